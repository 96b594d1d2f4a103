"""Fixtures of the TLS and peer-authentication tests: the throwaway certificates (``scripts/make_certs.py``'s
set, made once per session), config lines for a server's ``tls.*`` keys, NameServers started with them, and
a master with its slave (real ``spark-mq broker`` processes)."""

from __future__ import annotations

import contextlib
import socket
import ssl
from pathlib import Path

import pytest
from broker._support import pull_header, send_header
from servers import NAMESRV_READY, Broker, ServerProcess, free_port, unique, wait_until

from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.commands.certs import make_certs
from spark_mq.common.tls import client_context


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    make_certs(out, [], [])
    return out


def tls_conf(certs: Path, mode: str = "enforcing", *, cert: str = "server", need_client_auth: str = "none",
             dial: bool = True, client_cert: bool = False) -> str:
    """Config lines: the ports served in ``mode`` with certificate ``cert`` (a name of the set), client
    certificates per ``need_client_auth`` checked against ca.pem; with ``dial`` the peers dialled over TLS
    (ca.pem trusted, ``client_cert``: presenting client.pem)."""
    lines = [f"tls.server.mode={mode}", f"tls.server.certPath={certs / cert}.pem",
             f"tls.server.keyPath={certs / cert}.key", f"tls.server.trustCertPath={certs / 'ca.pem'}",
             f"tls.server.need.client.auth={need_client_auth}"]
    if dial:
        lines += ["tls.enable=true", f"tls.client.trustCertPath={certs / 'ca.pem'}"]
    if client_cert:
        lines += [f"tls.client.certPath={certs / 'client.pem'}", f"tls.client.keyPath={certs / 'client.key'}"]
    return "\n".join(lines) + "\n"


def start_namesrv_with(root: Path, conf: str) -> ServerProcess:
    """A NameServer on a free port with ``conf`` as its namesrv.conf; log in ``root``/namesrv.log."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "namesrv.conf").write_text(conf)
    return ServerProcess(["namesrv", "-c", str(root / "namesrv.conf"), "--port", "0"], root / "namesrv.log",
                         NAMESRV_READY, verbose=False)


def trusting(certs: Path, client_cert: bool = False):
    """A client context trusting the test CA (presenting client.pem with ``client_cert``)."""
    if client_cert:
        return client_context(str(certs / "ca.pem"), str(certs / "client.pem"), str(certs / "client.key"))
    return client_context(str(certs / "ca.pem"))


# --- a master and its slave on a NameServer, each with extra conf lines -----------------------------

SMALL_FILES = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\n"
ACCOUNT = "accessKey=clusterAdmin\nsecretKey=cluster-secret-1234\n"
REPLICATION_TIMEOUT_S = 20.0


def master_of(namesrv: str, root: Path, conf: str = "", metrics: bool = False) -> Broker:
    """An ASYNC_MASTER on a free HA port (``broker.ha_port``) with ``conf``."""
    ha_port = free_port()
    broker = Broker(namesrv, root / "master", f"{SMALL_FILES}brokerRole=ASYNC_MASTER\nhaListenPort={ha_port}\n{conf}",
                    broker_name=root.name, metrics=metrics, verbose=False)
    broker.ha_port = ha_port
    return broker


def slave_of(master: Broker, root: Path, conf: str = "", name: str = "slave", metrics: bool = False) -> Broker:
    return Broker(master.namesrv, root / name, f"{SMALL_FILES}brokerRole=SLAVE\nbrokerId=1\n{conf}",
                  broker_name=master.name, metrics=metrics, verbose=False)


def send_and_read_on_slave(api, master: Broker, slave: Broker, body: bytes) -> None:
    """Create a topic on both, send ``body`` to the master, and wait until a pull from the slave finds it."""
    topic = unique("Tls")
    for b in (master, slave):
        api.create_topic(b.addr, topic, 1, 1)
    assert api.send_message(master.addr, send_header(topic, 0), body).status == SendStatus.SEND_OK

    def on_slave():
        result = api.pull_message(slave.addr, pull_header("tls_reader", topic, 0, 0))
        return result.status == PullStatus.FOUND and [m.body for m in result.messages()]

    assert wait_until(on_slave, REPLICATION_TIMEOUT_S, "the message replicated to the slave") == [body]


def stranger_gets(port: int, hello: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    """What the HA port sends a socket (over TLS with ``tls``) that says ``hello``, until it closes the
    connection (a reset: it closed with our hello unread; an alert: it refused our certificate)."""
    got = b""
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=REPLICATION_TIMEOUT_S))
        if tls is not None:
            s = stack.enter_context(tls.wrap_socket(s, server_hostname="127.0.0.1"))
        s.sendall(hello)
        with contextlib.suppress(ConnectionResetError, ssl.SSLError):
            while chunk := s.recv(4096):
                got += chunk
    return got
