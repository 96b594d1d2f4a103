"""Peers proving who they are on haListenPort (issue 25), between real broker processes: a master with the
cluster's account (accessKey/secretKey) streams its commitlog to a slave that proves the same account, and
to nobody else: a stranger speaking RocketMQ's HA protocol, one proving a wrong secret or another account,
and a slave configured with a wrong secret get no byte, and the master logs each refusal, rate-limited."""

from __future__ import annotations

import asyncio
import re

import pytest
from servers import start_namesrv, wait_until

from spark_mq.common.errors import ReplicationError
from spark_mq.store.ha.ha_auth import ClusterAccount, prove
from spark_mq.store.ha.ha_protocol import REPORT

from .conftest import ACCOUNT, REPLICATION_TIMEOUT_S, master_of, send_and_read_on_slave, slave_of, stranger_gets

STRANGERS = 10  # connections, more than the rate limit's burst of log lines per window


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    server = start_namesrv(tmp_path_factory.mktemp("namesrv") / "namesrv.log", verbose=False)
    yield server.addr
    server.stop_cleanly()


@pytest.fixture
def master(namesrv, tmp_path, api):
    """A master with the cluster's account and a slave with it, the first message replicated."""
    broker = master_of(namesrv, tmp_path, ACCOUNT)
    slave = slave_of(broker, tmp_path, ACCOUNT)
    try:
        send_and_read_on_slave(api, broker, slave, b"replicated to a slave that proved the account")
    except BaseException:
        slave.stop_if_running()
        broker.stop_if_running()
        raise
    yield broker
    slave.stop()
    broker.stop()


def refusals(master) -> list[str]:
    return re.findall(r"HA: refusing a connection from 127\.0\.0\.1:\d+: (.*?)\"", master.log())


def test_a_stranger_speaking_the_ha_protocol_gets_no_commitlog_byte(master):
    for _ in range(STRANGERS):  # what a RocketMQ 4.x slave sends first: its commitlog's end
        assert stranger_gets(master.ha_port, REPORT.pack(0)) == b""
    lines = wait_until(lambda: refusals(master), what="the refusals logged")
    assert lines[0].startswith("it sent no credentials")
    assert len(lines) < STRANGERS  # rate-limited per peer host


async def _prove(port: int, account: ClusterAccount) -> bytes:
    """Prove ``account`` on the HA port and, whatever the verdict, report offset 0: what comes back until
    the master closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with pytest.raises(ReplicationError, match="the master refused this slave's account"):
            await prove(reader, writer, account)
        writer.write(REPORT.pack(0))
        try:
            return await asyncio.wait_for(reader.read(), REPLICATION_TIMEOUT_S)
        except ConnectionResetError:  # closed with our report unread
            return b""
    finally:
        writer.close()


@pytest.mark.parametrize(("account", "why"), [
    (ClusterAccount("clusterAdmin", "wrong-secret-5678"), "a wrong signature (secretKey)"),
    (ClusterAccount("someoneElse", "cluster-secret-1234"), "another account ('someoneElse')"),
])
def test_a_peer_proving_the_wrong_account_gets_no_commitlog_byte(master, account, why):
    assert asyncio.run(_prove(master.ha_port, account)) == b""
    assert wait_until(lambda: any(why in line for line in refusals(master)), what="the refusal logged")
    assert "cluster-secret-1234" not in master.log() and "wrong-secret-5678" not in master.log()


def test_a_slave_with_a_wrong_secret_is_refused_and_says_so(namesrv, tmp_path, master):
    impostor = slave_of(master, tmp_path, "accessKey=clusterAdmin\nsecretKey=not-the-cluster-secret\n", "impostor")
    try:
        wait_until(lambda: "the master refused this slave's account (accessKey clusterAdmin)" in impostor.log(),
                   REPLICATION_TIMEOUT_S, "the impostor's refusal")
        assert "HA: replicating from master" not in impostor.log()
        assert "not-the-cluster-secret" not in impostor.log()
    finally:
        impostor.stop()


def test_a_master_without_an_account_serves_a_slave_that_has_one(namesrv, tmp_path, api):
    plain = master_of(namesrv, tmp_path)
    slave = slave_of(plain, tmp_path, ACCOUNT)
    try:
        send_and_read_on_slave(api, plain, slave, b"no proof asked")
    finally:
        slave.stop()
        plain.stop()
