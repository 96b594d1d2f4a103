"""A NameServer, a master and its slave with TLS enforcing on every port and client certificates required
(issue 25), as real processes: the brokers register over mutual TLS, a message produced on the master is
read from the slave (replication over mutual TLS, the slave proving the cluster's account too), metrics are
served over HTTPS only, and the HA port gives a plaintext stranger and a TLS peer without a certificate
nothing."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest
from servers import wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.store.ha.ha_protocol import REPORT

from .conftest import (
    ACCOUNT,
    REPLICATION_TIMEOUT_S,
    master_of,
    send_and_read_on_slave,
    slave_of,
    start_namesrv_with,
    stranger_gets,
    tls_conf,
    trusting,
)


@pytest.fixture
def cluster(tmp_path, certs):
    """(namesrv, master, slave), every port TLS only with client certificates required."""
    conf = tls_conf(certs, "enforcing", need_client_auth="require", client_cert=True)
    namesrv = start_namesrv_with(tmp_path / "namesrv", conf)
    started = []
    try:
        started.append(master_of(namesrv.addr, tmp_path, conf + ACCOUNT, metrics=True))
        started.append(slave_of(started[0], tmp_path, conf + ACCOUNT))
        yield namesrv, *started
    finally:
        for broker in reversed(started):
            broker.stop()
        namesrv.stop_cleanly()


def test_produce_on_the_master_consume_from_the_slave_all_over_mutual_tls(cluster, certs):
    namesrv, master, slave = cluster
    with SyncMQClientAPI(timeout=10.0, ssl_context=trusting(certs, client_cert=True)) as api:
        info = wait_until(lambda: (d := api.get_cluster_info(namesrv.addr).broker_addr_table.get(master.name))
                          and len(d.broker_addrs) == 2 and d, REPLICATION_TIMEOUT_S, "both brokers registered")
        assert info.broker_addrs == {0: master.addr, 1: slave.addr}
        send_and_read_on_slave(api, master, slave, b"over TLS all the way")

    url = f"https://127.0.0.1:{master.metrics_port}/metrics"
    with urllib.request.urlopen(url, context=trusting(certs, client_cert=True), timeout=10) as page:
        assert b"spark_mq_messages_in_total" in page.read()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # plain HTTP: no metrics
        urllib.request.urlopen(f"http://127.0.0.1:{master.metrics_port}/metrics", timeout=10).read()


def test_the_ha_port_gives_a_plaintext_stranger_and_a_peer_without_a_certificate_nothing(cluster, certs):
    _, master, _ = cluster
    assert stranger_gets(master.ha_port, REPORT.pack(0)) == b""
    wait_until(lambda: "does not speak TLS (tls.server.mode=enforcing)" in master.log(), what="the refusal logged")

    assert stranger_gets(master.ha_port, REPORT.pack(0), trusting(certs)) == b""  # TLS, no client certificate
    wait_until(lambda: re.search(r"HA: connection from 127.0.0.1:\d+ failed before replicating: .*CERTIFICATE",
                                 master.log()), what="the refused handshake logged")
