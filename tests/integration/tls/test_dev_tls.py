"""``spark-mq dev --tls`` (issue 25): the dev cluster (a NameServer, a master and a slave) serves TLS only
on every port with certificates it makes beside its store, and the CLI produces and consumes over TLS
with them, while a plaintext CLI is refused."""

from __future__ import annotations

import os
import subprocess
import sys

from servers import ServerProcess, free_port, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message

CLI_TIMEOUT_S = 60.0


def spark_mq(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_MQ_")}
    return subprocess.run([sys.executable, "-m", "spark_mq.cli", *args], input=input, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, env=env)


def test_dev_tls_serves_tls_only_and_the_cli_produces_and_consumes_over_it(tmp_path):
    namesrv = f"127.0.0.1:{free_port()}"
    dev = ServerProcess(["dev", "--tls", "--replicas", "2", "--namesrv-port", namesrv.rpartition(":")[2], "--port",
                         "0", "--metrics-port", "0", "--store", str(tmp_path / "store")], tmp_path / "dev.log",
                        "spark-mq dev: ", verbose=False)
    try:
        ca = str(tmp_path / "tls" / "ca.pem")  # made beside the store
        topic, group = unique("DevTls"), unique("dev_tls")
        produced = spark_mq("produce", "--namesrv", namesrv, "--tls-ca", ca, "--topic", topic, input="one\ntwo\n")
        assert produced.returncode == 0, produced.stderr
        refused = spark_mq("produce", "--namesrv", namesrv, "--topic", topic, input="three\n")
        assert refused.returncode != 0 and "accepts TLS connections only" in refused.stderr
        consumed = spark_mq("consume", "--namesrv", namesrv, "--tls-ca", ca, "--topic", topic, "--group", group,
                            "--from", "first", "--max", "2", "--timeout", "10")
        assert consumed.returncode == 0, consumed.stderr
        assert sorted(consumed.stdout.split()) == ["one", "two"]
    finally:
        dev.stop_cleanly()


def test_dev_tls_with_the_controller_elects_and_replicates_over_tls(tmp_path):
    """The controller in the NameServer, its pushes to the brokers, the brokers' calls to it and
    replication all over TLS: the set forms and a send waiting for both replicas is acknowledged."""
    namesrv = f"127.0.0.1:{free_port()}"
    dev = ServerProcess(["dev", "--tls", "--controller", "--replicas", "2", "--namesrv-port",
                         namesrv.rpartition(":")[2], "--port", "0", "--metrics-port", "0", "--store",
                         str(tmp_path / "store")], tmp_path / "dev.log", "spark-mq dev: ", verbose=False)
    try:
        config = ClientConfig(namesrv, tls_enable=True, tls_trust_cert_path=str(tmp_path / "tls" / "ca.pem"))
        with SyncMQClientAPI(timeout=10.0, ssl_context=config.ssl_context()) as api:
            members = wait_until(lambda: (d := api.get_cluster_info(namesrv).broker_addr_table.get("broker-a"))
                                 and set(d.broker_addrs) == {0, 2} and d.broker_addrs, CLI_TIMEOUT_S,
                                 "replica 1 elected master, replica 2 registered")
            topic = unique("DevTlsController")
            api.create_topic(members[0], topic, 1, 1)
        with SyncProducer(unique("pg"), config, retry_times=2) as producer:
            assert producer.send(Message(topic, b"acknowledged by both")).status == SendStatus.SEND_OK
        log = (tmp_path / "dev.log").read_text()
        assert "refusing a plaintext connection" not in log and "TLS handshake with" not in log
    finally:
        dev.stop_cleanly()
