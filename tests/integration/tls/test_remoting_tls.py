"""TLS on the remoting port (issue 25), against real NameServer processes: ``enforcing`` refuses a
plaintext client with an answer that says so and one rate-limited log line, ``permissive`` serves both
on one port, ``need.client.auth=require`` refuses a client without a certificate, and a client refuses an
expired certificate, one of another CA and one for another host, each with the reason in its error."""

from __future__ import annotations

import re

import pytest
from servers import wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import RemotingConnectError, SparkMQError

from .conftest import start_namesrv_with, tls_conf, trusting

PLAINTEXT_TRIES = 12  # more than the rate limit's burst of lines per window


@pytest.fixture
def namesrv_of(tmp_path, certs):
    """``namesrv_of(conf)``: a NameServer started with ``conf``, stopped cleanly after the test."""
    started = []

    def start(conf: str):
        server = start_namesrv_with(tmp_path / f"namesrv{len(started)}", conf)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop_cleanly()


def cluster_info(addr: str, ssl_context=None):
    with SyncMQClientAPI(timeout=5.0, ssl_context=ssl_context) as api:
        return api.get_cluster_info(addr)


def test_enforcing_refuses_a_plaintext_client_saying_why_and_serves_tls(namesrv_of, certs):
    ns = namesrv_of(tls_conf(certs, "enforcing", dial=False))
    assert cluster_info(ns.addr, trusting(certs)).broker_addr_table == {}
    for _ in range(PLAINTEXT_TRIES):
        with pytest.raises(SparkMQError, match=r"accepts TLS connections only.*connect over TLS"):
            cluster_info(ns.addr)
    refusals = wait_until(lambda: re.findall(r"refusing a plaintext connection from 127\.0\.0\.1", ns.log()),
                          what="the refusal logged")
    assert 1 <= len(refusals) < PLAINTEXT_TRIES  # logged, rate-limited per peer host


def test_permissive_serves_tls_and_plaintext_clients_on_one_port(namesrv_of, certs):
    ns = namesrv_of(tls_conf(certs, "permissive", dial=False))
    assert cluster_info(ns.addr).broker_addr_table == {}
    assert cluster_info(ns.addr, trusting(certs)).broker_addr_table == {}


def test_require_client_auth_refuses_a_client_without_a_certificate(namesrv_of, certs):
    ns = namesrv_of(tls_conf(certs, "enforcing", need_client_auth="require", dial=False))
    with pytest.raises(RemotingConnectError, match=r"refuses our client certificate or its absence \(does it require"):
        cluster_info(ns.addr, trusting(certs))
    assert cluster_info(ns.addr, trusting(certs, client_cert=True)).broker_addr_table == {}


@pytest.mark.parametrize(("cert", "reason"), [
    ("expired", "certificate has expired"),
    ("other", "unable to get local issuer certificate: its CA is not among the trusted ones"),
    ("wronghost", "IP address mismatch, certificate is not valid for '127.0.0.1'"),
])
def test_a_bad_server_certificate_is_refused_naming_the_reason(namesrv_of, certs, cert, reason):
    ns = namesrv_of(tls_conf(certs, "enforcing", cert=cert, dial=False))
    with pytest.raises(RemotingConnectError, match=re.escape(f"the server's certificate is refused: {reason}")):
        cluster_info(ns.addr, trusting(certs))


def test_a_tls_client_of_a_plaintext_server_is_told_it_does_not_speak_tls(namesrv_of, certs):
    ns = namesrv_of("")
    with pytest.raises(RemotingConnectError, match=r"TLS handshake failed.*does not speak TLS"):
        cluster_info(ns.addr, trusting(certs))
