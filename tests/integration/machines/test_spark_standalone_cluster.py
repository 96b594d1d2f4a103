"""Spark as it runs on a cluster: a Spark standalone master and two workers started from the pyspark distribution
(``spark-class org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``), each on a host of its
own (a network namespace), next to a NameServer and a broker on theirs; the drivers run in the root namespace
(client mode) and the executors on the workers' hosts reach the broker over the bridge, all with ACL and TLS
on (mutual TLS: the executors dial with the client certificate). ``sink_job.py`` writes rows with the sink and
reads them back, then ``jobs/consume.py`` streams them to Parquet, both with the account passed as options
(taken from the environment, as the jobs/ scripts take it); then the secret must be absent from the driver
UI's environment and SQL pages (REST and HTML), the master's UI, the event logs and the ``explain`` output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
from servers import Broker, unique, wait_until

from ._cluster import APP, REPO, Security, broker_host_conf, start_namesrv_on

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # seven JVMs on a 2-core machine

ROLES = ["namesrv", "broker", "master", "worker1", "worker2"]
WORKERS = ("worker1", "worker2")
SPARK_BIN = Path(pyspark.__file__).parent / "bin"
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
ROWS = 200
QUEUES = 4
START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 300
HTTP_TIMEOUT_S = 10
UI_LINE = "[sink_job] ui "


def http(url: str) -> str:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as r:
        return r.read().decode(errors="replace")


def alive_workers(master_ui: str) -> int:
    try:
        state = json.loads(http(f"{master_ui}/json/"))
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def spark_env(address: str) -> dict[str, str]:
    """The environment of a Spark daemon on ``address``: this checkout and interpreter for Python workers."""
    return dict(os.environ, SPARK_LOCAL_IP=address, SPARK_DAEMON_MEMORY="256m", PYSPARK_PYTHON=sys.executable,
                PYTHONPATH=str(REPO))


def submit_args(master: str, driver_host: str, events: Path) -> list[str]:
    """spark-submit to the standalone master, the driver on ``driver_host``, event logs to ``events``."""
    confs = {"spark.driver.host": driver_host, "spark.driver.bindAddress": driver_host,
             "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
             "spark.eventLog.compress": "false", "spark.executor.cores": "1", "spark.executor.memory": "512m",
             "spark.pyspark.python": sys.executable, "spark.executorEnv.PYTHONPATH": str(REPO)}
    return [str(SPARK_BIN / "spark-submit"), "--master", master,
            *(a for k, v in confs.items() for a in ("--conf", f"{k}={v}"))]


def ui_pages(ui: str) -> dict[str, str]:
    """The driver UI's environment and SQL pages, as REST answers and HTML."""
    app = json.loads(http(f"{ui}/api/v1/applications"))[0]["id"]
    rest = f"{ui}/api/v1/applications/{app}"
    pages = {"environment": http(f"{rest}/environment"), "environment.html": http(f"{ui}/environment/"),
             "sql": http(f"{rest}/sql?details=true&planDescription=true"), "sql.html": http(f"{ui}/SQL/")}
    for execution in json.loads(pages["sql"]):
        pages[f"sql/{execution['id']}.html"] = http(f"{ui}/SQL/execution/?id={execution['id']}")
    return pages


def test_spark_standalone_cluster_reads_and_writes_keeping_the_secret(network, tmp_path):
    net = network(ROLES)
    security = Security(acl=True, tls=True, root=tmp_path / "security")
    security.prepare([net.gateway, *(h.address for h in net.hosts.values())])
    address = {role: host.address for role, host in net.hosts.items()}
    master_url, master_ui = f"spark://{address['master']}:{MASTER_PORT}", f"http://{address['master']}:{MASTER_UI_PORT}"
    with ExitStack() as stack:
        namesrv = start_namesrv_on(net, "namesrv", tmp_path / "namesrv", security)
        stack.callback(namesrv.stop_cleanly)
        broker = Broker(namesrv.addr, tmp_path / "broker", broker_host_conf(net, "broker", security),
                        verbose=False, launcher=net.launcher("broker"))
        stack.callback(broker.stop)
        api = security.api(namesrv.addr)
        stack.callback(api.close)
        topic = unique("SparkOnMachines")
        api.create_topic(broker.addr, topic, QUEUES, QUEUES)

        logs = tmp_path / "spark"
        logs.mkdir()
        with open(logs / "master.log", "wb") as log:
            net.popen("master", [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
                                 "--host", address["master"], "--port", str(MASTER_PORT),
                                 "--webui-port", str(MASTER_UI_PORT)],
                      env=spark_env(address["master"]), stdout=log, stderr=subprocess.STDOUT)
        for w in WORKERS:
            with open(logs / f"{w}.log", "wb") as log:
                net.popen(w, [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", master_url,
                              "--host", address[w], "--cores", "1", "--memory", "1g", "--webui-port",
                              str(WORKER_UI_PORT), "--work-dir", str(logs / f"{w}-work")],
                          env=spark_env(address[w]), stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: alive_workers(master_ui) == len(WORKERS), START_TIMEOUT_S, "two workers at the master",
                   interval=0.5)

        events = tmp_path / "events"
        events.mkdir()
        submit = submit_args(master_url, net.gateway, events)
        env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable, **security.job_env())
        release = tmp_path / "ui-fetched"
        with open(logs / "sink_job.log", "wb") as log:
            sink = subprocess.Popen([*submit, str(Path(__file__).with_name("sink_job.py")), f"--namesrv={namesrv.addr}",
                                     f"--topic={topic}", f"--rows={ROWS}", f"--hold-until={release}"],
                                    env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=log, text=True)
        stack.callback(lambda: sink.poll() is None and sink.kill())
        printed = []
        while not (line := sink.stdout.readline()).startswith(UI_LINE):
            assert line, f"the sink job ended early:\n{''.join(printed)}\n{(logs / 'sink_job.log').read_text()[-4000:]}"
            printed.append(line)
        pages = ui_pages(line[len(UI_LINE):].strip())
        pages["master.html"] = http(master_ui)
        release.touch()
        out, _ = sink.communicate(timeout=JOB_TIMEOUT_S)
        assert sink.returncode == 0, (logs / "sink_job.log").read_text()[-4000:]
        job_out = "".join(printed) + out
        assert f"[sink_job] wrote {ROWS}" in job_out and f"[sink_job] read {ROWS}" in job_out, job_out
        explain = job_out.split("[sink_job] explain")[1]

        consume = subprocess.run([*submit, str(REPO / "jobs" / "consume.py"), f"--namesrv={namesrv.addr}",
                                  f"--topic={topic}", f"--group={unique('spark_cg')}", "--sink=parquet",
                                  f"--path={tmp_path / 'out'}", f"--checkpoint={tmp_path / 'ckpt'}",
                                  "--starting-offsets=earliest"], env=env, cwd=tmp_path,
                                 capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        assert consume.returncode == 0, consume.stderr[-4000:]
        assert pq.read_table(tmp_path / "out").num_rows == ROWS

        # the pages looked at are the ones that would show it
        assert "spark.app.name" in pages["environment"] and "spark_mq" in explain
        assert "Spark Master" in pages["master.html"] and json.loads(pages["sql"])
        assert len(list(events.iterdir())) == 2  # one event log per application
        event_logs = {str(p.relative_to(events)): p.read_text(errors="replace") for p in events.rglob("*")
                      if p.is_file()}
        seen = {name for name, text in {**pages, **event_logs, "explain": explain,
                                        "consume output": consume.stdout}.items() if APP[1] in text}
        assert not seen, f"the secret key shows in {sorted(seen)}"
