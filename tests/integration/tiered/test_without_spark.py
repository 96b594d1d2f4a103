"""``jobs/offload.py`` (``spark-mq offload``) and ``spark-mq query --archive`` against a real broker in
processes where pyspark cannot be imported: the offload archives everything and the lookup finds the
archived messages, so neither needs Spark installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ._support import create_topic, produce, run_job

BLOCKED = 'raise ImportError("pyspark is blocked here: this command must run without Spark")\n'


def without_pyspark(tmp_path) -> dict[str, str]:
    """An environment whose ``import pyspark`` fails, as on a machine without Spark."""
    stub = tmp_path / "no_pyspark" / "pyspark"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(BLOCKED)
    path = [str(stub.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def test_offload_and_archive_query_run_without_pyspark(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    env = without_pyspark(tmp_path)
    check = subprocess.run([sys.executable, "-c", "import pyspark"], env=env, capture_output=True, text=True)
    assert check.returncode != 0 and "pyspark is blocked" in check.stderr  # the stub works

    topic = create_topic(api, c.namesrv, c.addr, "offload_no_spark")
    sent = produce(c.namesrv, topic, 40)
    root = tmp_path / "archive"
    proc = run_job("--namesrv", c.namesrv, "--topic", topic, "--root", str(root), "--all", env=env)
    assert "done: 40 message(s)" in proc.stdout

    query = subprocess.run([sys.executable, "-m", "spark_mq.cli", "query", "--namesrv", c.namesrv, "--topic", topic,
                            "--key", "k1", "--archive", str(root), "--json"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert query.returncode == 0, query.stderr
    rows = [json.loads(line) for line in query.stdout.splitlines()]
    assert [(r["msg_id"], r["tier"]) for r in rows] == [(sent[1].result.msg_id, "cold")]
