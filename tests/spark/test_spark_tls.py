"""The source's and sink's TLS options (``tls``, ``tlsTrustCertPath``, ``tlsCertPath``, ``tlsKeyPath``) in a real
local SparkSession against a NameServer and a broker with ``tls.server.mode=enforcing``: validated on the driver,
passed to every client the driver and the executors open (batch and streaming reads, a group member, the sink), a
plaintext or an untrusting read refused with a message saying what to do; and ``jobs/consume.py`` over TLS with an
account (``aclEnable``), both from spark-mq's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from integration.tls import conftest as tls_fixtures
from integration.tls.conftest import start_namesrv_with, tls_conf
from servers import AclCluster, Broker, unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig, open_api
from spark_mq.client.producer import SyncProducer
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import Message
from spark_mq.spark.options import Connection, SinkOptions, SourceOptions

JOBS = Path(__file__).resolve().parents[2] / "jobs"
NAMESRV = "127.0.0.1:9876"
certs = tls_fixtures.certs  # the fixture: scripts/make_certs.py's set, made once per session


@pytest.fixture(scope="module")
def tls_cluster(certs, tmp_path_factory):
    """A NameServer and a broker serving TLS only and requiring a client certificate (each dials the other
    with client.pem)."""
    root = tmp_path_factory.mktemp("spark_tls")
    conf = tls_conf(certs, need_client_auth="require", client_cert=True)
    namesrv = start_namesrv_with(root / "namesrv", conf)
    try:
        broker = Broker(namesrv.addr, root / "broker", conf, verbose=False)
    except BaseException:
        namesrv.stop_cleanly()
        raise
    yield namesrv.addr, broker
    broker.stop()
    namesrv.stop_cleanly()


def tls_options(certs: Path, *, client_cert: bool = True, ca: str = "ca.pem") -> dict[str, str]:
    opts = {"tlsTrustCertPath": str(certs / ca)}
    if client_cert:
        opts.update(tlsCertPath=str(certs / "client.pem"), tlsKeyPath=str(certs / "client.key"))
    return opts


def new_topic(namesrv: str, broker: Broker, config: ClientConfig) -> str:
    topic = unique("spark_tls")
    with open_api(config) as api:
        api.create_topic(broker.addr, topic, 2, 2)
        wait_until(lambda: api.get_route_info(namesrv, topic), what=f"route of {topic}")
    return topic


def test_tls_options_are_checked_on_the_driver(certs, tmp_path):
    """A path implies TLS (as the CLI's --tls-ca); tls=false with a path, a missing file, a certificate without its
    key and a file that is not PEM fail before anything is planned, naming the option."""
    base = {"namesrv": NAMESRV, "topic": "T"}
    opts = SourceOptions.parse({**base, "TLSTRUSTCERTPATH": str(certs / "ca.pem")})
    assert opts.client_config.tls_enable and opts.client_config.ssl_context() is not None
    assert not SourceOptions.parse(base).client_config.tls_enable
    assert SinkOptions.parse({**base, "tls": "true"}).client_config.tls_enable  # the system's CAs
    with pytest.raises(ConfigError, match=r"option 'tlsTrustCertPath' is given with tls=false"):
        SourceOptions.parse({**base, "tls": "false", "tlsTrustCertPath": str(certs / "ca.pem")})
    missing = str(tmp_path / "nowhere.pem")
    with pytest.raises(ConfigError, match=rf"option tlsTrustCertPath={missing}: no such file"):
        SourceOptions.parse({**base, "tlsTrustCertPath": missing})
    with pytest.raises(ConfigError, match=r"option tlsCertPath and option tlsKeyPath go together"):
        SinkOptions.parse({**base, "tlsCertPath": str(certs / "client.pem")})
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"option tlsTrustCertPath=.*junk.pem: not a PEM certificate"):
        SinkOptions.parse({**base, "tlsTrustCertPath": str(tmp_path / "junk.pem")})
    with pytest.raises(ConfigError, match=r"option 'tls' must be true or false"):
        SourceOptions.parse({**base, "tls": "yes"})


def test_connection_from_the_environment_and_back_to_options(certs, monkeypatch):
    """What the notebooks use: spark-mq's environment (a CA implies TLS), and the options helpers pass on."""
    for name in ("SPARK_MQ_TLS", "SPARK_MQ_TLS_CERT", "SPARK_MQ_TLS_KEY", "SPARK_MQ_ACCESS_KEY", "SPARK_MQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_MQ_TLS_CA", str(certs / "ca.pem"))
    connection = Connection.from_env()
    assert connection.tls and connection.credentials is None
    assert connection.spark_options() == {"tls": "true", "tlsTrustCertPath": str(certs / "ca.pem")}
    assert Connection.parse(connection.spark_options()) == connection
    assert Connection().spark_options() == {}


def test_the_source_and_sink_dial_over_tls_with_a_client_certificate(spark, tls_cluster, certs):
    """The sink's executors, the batch source's driver and executors, and a streaming read that joins a group
    (its driver's group member and offset commits) all reach servers that accept TLS with a client certificate
    only."""
    namesrv, broker = tls_cluster
    options = tls_options(certs)
    topic = new_topic(namesrv, broker, Connection.parse(options).client_config(namesrv))
    rows = spark.createDataFrame([(f"m{i}".encode(),) for i in range(6)], "body BINARY")
    rows.write.format("spark_mq").option("namesrv", namesrv).option("topic", topic).options(**options) \
        .mode("append").save()
    read = spark.read.format("spark_mq").option("namesrv", namesrv).option("topic", topic).options(**options)
    assert sorted(r.body for r in read.load().collect()) == [f"m{i}".encode() for i in range(6)]
    query = (spark.readStream.format("spark_mq").option("namesrv", namesrv).option("topic", topic)
             .option("group", unique("spark_tls_group")).option("startingOffsets", "earliest").options(**options)
             .load().writeStream.format("memory").queryName(unique("spark_tls_stream"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        assert query.exception() is None
        assert spark.table(query.name).count() == 6
    finally:
        query.stop()



def test_the_offload_job_pulls_over_tls(tls_cluster, certs, tmp_path):
    """``jobs/offload.py --tls-ca --tls-cert --tls-key``: its plan and the pulls of each range (each opens its own
    client) reach the servers over TLS, and the archive holds every message."""
    namesrv, broker = tls_cluster
    config = Connection.parse(tls_options(certs)).client_config(namesrv)
    topic = new_topic(namesrv, broker, config)
    with SyncProducer(unique("spark_tls_pg"), config) as producer:
        producer.send_batch([Message(topic, f"o{i}".encode()) for i in range(5)])
    proc = subprocess.run([sys.executable, str(JOBS / "offload.py"), "--namesrv", namesrv, "--topic", topic, "--root",
                           str(tmp_path), "--format", "parquet", "--all", "--tls-ca", str(certs / "ca.pem"),
                           "--tls-cert", str(certs / "client.pem"), "--tls-key", str(certs / "client.key")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    archived = ds.dataset(str(tmp_path / topic), format="parquet", partitioning="hive").to_table()
    assert sorted(archived.column("body").to_pylist()) == [f"o{i}".encode() for i in range(5)]


def test_a_plaintext_or_untrusting_read_fails_saying_what_to_do(spark, tls_cluster, certs):
    """Without ``tls`` the server's answer names the option; with a CA that did not sign the server's certificate
    the error says the server's certificate is refused; without the client certificate the server's refusal is
    explained."""
    namesrv, _ = tls_cluster
    topic = unique("spark_tls_none")

    def count(**options: str) -> int:  # a reader of its own: DataFrameReader.options adds to the reader
        return spark.read.format("spark_mq").option("namesrv", namesrv).option("topic", topic).options(**options) \
            .load().count()

    with pytest.raises(Exception, match=r"accepts TLS connections only.*option tls=true of the Spark source"):
        count()
    with pytest.raises(Exception, match=r"certificate is refused: .*not among the trusted ones .*tlsTrustCertPath"):
        count(**tls_options(certs, ca="other-ca.pem"))
    with pytest.raises(Exception, match=r"refuses our client certificate or its absence"):
        count(**tls_options(certs, client_cert=False))


@pytest.fixture(scope="module")
def acl_tls(certs, tmp_path_factory):
    cluster = AclCluster(tmp_path_factory.mktemp("spark_acl_tls"), tls_conf(certs))
    yield cluster
    cluster.stop()


def test_the_consume_job_reads_over_tls_with_an_account_from_the_environment(spark, acl_tls, certs,
                                                                             tmp_path):
    """``jobs/consume.py`` against servers with aclEnable and TLS only, SPARK_MQ_TLS_CA and the account from the
    environment (as spark-mq's): every message the sink wrote (TLS and the account as options) is read, in
    micro-batches of ``--max-per-trigger`` under Trigger.AvailableNow, each reported with the lag behind it (summed
    and per queue), and the group's offsets committed. (The suite's only run of the job's own process: one JVM.)"""
    namesrv, broker = acl_tls.namesrv.addr, acl_tls.broker
    admin = ClientConfig(namesrv, tls_enable=True, tls_trust_cert_path=str(certs / "ca.pem"),
                         access_key=acl_tls.admin[0], secret_key=acl_tls.admin[1])
    topic, group = new_topic(namesrv, broker, admin), unique("spark_tls_job")
    account = {"tls": "true", "tlsTrustCertPath": str(certs / "ca.pem"), "accessKey": acl_tls.user[0],
               "secretKey": acl_tls.user[1]}
    bodies = [b"a", b"b", b"c", b"d", b"e"]
    spark.createDataFrame([(b,) for b in bodies], "body BINARY").write.format("spark_mq") \
        .option("namesrv", namesrv).option("topic", topic).options(**account).mode("append").save()
    env = {**os.environ, "SPARK_MQ_TLS_CA": str(certs / "ca.pem"), "SPARK_MQ_ACCESS_KEY": acl_tls.user[0],
           "SPARK_MQ_SECRET_KEY": acl_tls.user[1]}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(JOBS / "consume.py"), "--namesrv", namesrv, "--topic", topic,
                           "--group", group, "--starting-offsets", "earliest", "--max-per-trigger", "2",
                           "--trigger", "availableNow", "--sink", "parquet", "--path", str(out),
                           "--checkpoint", str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert acl_tls.user[1] not in proc.stdout + proc.stderr
    # one progress line per micro-batch: 5 messages at 2 per trigger make 3 batches, 3, 1 then 0 behind
    batches = [line for line in proc.stdout.splitlines() if line.startswith("[consume] batch ")]
    assert [line.split(" lag ")[1].split()[0] for line in batches] == ["3", "1", "0"], proc.stdout
    assert all("=" in line.split(" lag ")[1] for line in batches), proc.stdout  # and per queue
    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("body").to_pylist()) == bodies
    for ids in ("msg_id", "uniq_key"):
        assert len(set(table.column(ids).to_pylist()) - {None, ""}) == len(bodies), table.column(ids)
    with SyncAdmin(admin) as a:
        assert a.group_progress(group, topic).total_lag == 0
