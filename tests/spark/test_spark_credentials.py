"""The source's and sink's ``accessKey``/``secretKey`` options: validated, and the secret nowhere a user or an
operator could see it in a real local SparkSession with its UI and event log on (``redaction_driver.py``, a
driver process of its own: its options appear in plans, ``explain``, ``DESCRIBE TABLE EXTENDED``, ``SHOW CREATE
TABLE``, the UI's REST API and pages, the event log and its log output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from conftest import create_topic
from servers import AclCluster, unique

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import Message
from spark_mq.remoting.signature import Credentials
from spark_mq.spark.options import SinkOptions, SourceOptions, table_options

DRIVER = Path(__file__).with_name("redaction_driver.py")
JOB = Path(__file__).resolve().parents[2] / "jobs" / "consume.py"
SECRET = f"s3cr3t-{unique('x')}"  # unique: found only where this test put it


def test_the_options_take_an_account_and_keep_the_secret_out_of_reprs_and_errors():
    opts = SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "T", "accesskey": "user", "SECRETKEY": SECRET})
    assert opts.credentials is not None and opts.credentials.access_key == "user"
    assert SECRET not in repr(opts) and SECRET not in repr(opts.credentials)
    sink = SinkOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "T", "accessKey": "user", "secretKey": SECRET})
    assert sink.credentials is not None and SECRET not in repr(sink)
    assert SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "T"}).credentials is None
    with pytest.raises(ConfigError, match="'secretKey' is given without 'accessKey'") as lone:
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "T", "secretKey": SECRET})
    assert SECRET not in str(lone.value)
    with pytest.raises(ConfigError, match="'secretKey' is given twice") as twice:
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "T", "accessKey": "u", "secretKey": SECRET,
                             "option.secretKey": SECRET + "2"})
    assert SECRET not in str(twice.value)


def test_a_table_keeps_no_secret_and_its_reads_take_it_from_the_environment(monkeypatch):
    table = {"provider": "spark_mq", "namesrv": "127.0.0.1:9876", "topic": "T", "accessKey": "user",
             "secretKey": SECRET}
    stored = table_options(table)
    assert stored == {"namesrv": "127.0.0.1:9876", "topic": "T", "accesskey": "user"}
    monkeypatch.delenv("SPARK_MQ_SECRET_KEY", raising=False)
    with pytest.raises(ConfigError, match="set SPARK_MQ_SECRET_KEY in the driver's environment"):
        SourceOptions.parse(stored)
    monkeypatch.setenv("SPARK_MQ_SECRET_KEY", SECRET)
    assert SourceOptions.parse(stored).credentials == Credentials("user", SECRET)
    assert SourceOptions.parse({**stored, "secretKey": "the query's"}).credentials.secret_key == "the query's"


def test_the_secret_is_nowhere_in_plans_tables_ui_event_log_or_logs(cluster, produced, tmp_path):
    sink_topic = unique("redaction_sink")
    create_topic(cluster, sink_topic)
    proc = subprocess.run([sys.executable, str(DRIVER), cluster.namesrv, produced.topic, "reader", SECRET,
                           str(tmp_path / "out"), sink_topic], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["count"] == counts["table_count"] == len(produced.results) and counts["streamed"] > 0
    looked_at = sorted(p for p in (tmp_path / "out").rglob("*") if p.is_file())
    names = {p.name for p in looked_at}
    assert {"plans.txt", "describe.txt", "show_create.txt", "rest_environment.json", "rest_sql.json",
            "page_sql.html"} <= names and any(p.parent.name == "events" and p.stat().st_size for p in looked_at)
    # the options are shown where Spark shows a write's options (so a leak would be seen), redacted by name
    everything = {p: p.read_text("utf-8", "replace") for p in looked_at}
    redacted = "secretKey -> *********(redacted)"
    assert redacted in everything[tmp_path / "out" / "dumps" / "rest_sql.json"]
    assert any(redacted in text for p, text in everything.items() if p.parent.name == "events")
    leaks = [str(p.relative_to(tmp_path)) for p, text in everything.items() if SECRET in text]
    assert not leaks, f"the secret appears in {leaks}"
    assert SECRET not in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def acl(tmp_path_factory):
    cluster = AclCluster(tmp_path_factory.mktemp("spark_acl"))
    yield cluster
    cluster.stop()


def test_the_source_and_sink_sign_with_their_account_and_a_wrong_secret_is_refused(spark, acl):
    """Against a NameServer and broker with aclEnable (needs the server-side gate of branch acl-server): the sink's
    executors and the source's driver and executors sign with the options' account; a wrong secret fails the query
    with NO_PERMISSION and no secret in the error."""
    topic = unique("spark_acl")
    with SyncAdmin(ClientConfig(acl.namesrv.addr, access_key=acl.admin[0], secret_key=acl.admin[1])) as admin:
        admin.create_topic(topic, broker_addr=acl.broker.addr, read_queue_nums=2, write_queue_nums=2)
    account = {"accessKey": acl.user[0], "secretKey": acl.user[1]}
    rows = spark.createDataFrame([(b"a",), (b"b",), (b"c",)], "body BINARY")
    rows.write.format("spark_mq").option("namesrv", acl.namesrv.addr).option("topic", topic).options(**account) \
        .mode("append").save()
    read = spark.read.format("spark_mq").option("namesrv", acl.namesrv.addr).option("topic", topic)
    assert sorted(r.body for r in read.options(**account).load().collect()) == [b"a", b"b", b"c"]
    with pytest.raises(Exception, match="NO_PERMISSION") as refused:
        read.options(accessKey=acl.user[0], secretKey="not-the-secret").load().count()
    assert "not-the-secret" not in str(refused.value) and acl.user[1] not in str(refused.value)


@pytest.mark.slow  # ~25 s; the suite runs the same job with an account and TLS (test_spark_tls.py)
def test_the_consume_job_reads_with_the_environments_account_and_commits_the_group(acl, tmp_path):
    """``jobs/consume.py`` against the ACL cluster, the account from SPARK_MQ_ACCESS_KEY/SPARK_MQ_SECRET_KEY (as
    ``spark-mq dev --acl``'s credentials.env gives it): every message read, the group's offsets committed (its
    driver is a group member: heartbeats, offsets and pulls all signed), and no secret in its output."""
    admin = ClientConfig(acl.namesrv.addr, access_key=acl.admin[0], secret_key=acl.admin[1])
    topic, group = unique("acl_job"), unique("acl_job_group")
    with SyncAdmin(admin) as a:
        a.create_topic(topic, broker_addr=acl.broker.addr, read_queue_nums=2, write_queue_nums=2)
    with SyncProducer(unique("acl_job_pg"), ClientConfig(acl.namesrv.addr, access_key=acl.user[0],
                                                         secret_key=acl.user[1])) as producer:
        producer.send_batch([Message(topic, f"m{i}".encode()) for i in range(10)])
    env = {**os.environ, "SPARK_MQ_ACCESS_KEY": acl.user[0], "SPARK_MQ_SECRET_KEY": acl.user[1]}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(JOB), "--namesrv", acl.namesrv.addr, "--topic", topic, "--group", group,
                           "--starting-offsets", "earliest", "--sink", "parquet", "--path", str(out), "--checkpoint",
                           str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert acl.user[1] not in proc.stdout + proc.stderr
    assert ds.dataset(str(out), format="parquet", partitioning="hive").to_table().num_rows == 10
    with SyncAdmin(admin) as a:
        assert a.group_progress(group, topic).total_lag == 0
