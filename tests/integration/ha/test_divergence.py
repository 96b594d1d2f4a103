"""A slave whose commitlog diverged from its master's is refused, never merged (issue 14), however the
two ends compare: the same length, shorter, inside one of the master's units, or past the master's end.

A diverged store is made as the issue says: written to as a master (another broker name), stopped,
then started as the slave of a master that stored other messages. The slave checks its last unit
against the master's (VIEW_MESSAGE_BY_ID) before it connects; the master checks the offset a slave
reports (a RocketMQ 4.x slave sends nothing else), here spoken by the test itself (``RawSlave``)."""

from __future__ import annotations

import pytest
from broker._support import send_header
from servers import Broker, unique, wait_until

from spark_mq.client.results import SendStatus

from ._support import SMALL_FILES
from .commitlog_files import Commitlog, read_commitlog
from .test_replication import REPLICATION_TIMEOUT_S, RawSlave

REFUSED = "HA: refusing master"


def send_all(api, addr: str, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        assert api.send_message(addr, send_header(topic, 0), body).status == SendStatus.SEND_OK


def written_as_a_master(api, tmp_path, namesrv, topic: str, bodies: list[bytes]) -> Commitlog:
    """The store ``tmp_path / "slave"`` (where the pair's slave keeps its store) written to as a master."""
    was_master = Broker(namesrv, tmp_path / "slave", f"{SMALL_FILES}brokerRole=ASYNC_MASTER\n",
                        broker_name=unique("old"))
    api.create_topic(was_master.addr, topic, 1, 1)
    send_all(api, was_master.addr, topic, bodies)
    was_master.stop()
    return read_commitlog(was_master.store)


def refusals(pair) -> int:
    return pair.slave.log().count(REFUSED)


@pytest.mark.parametrize("case", ["same length", "shorter", "ends inside a master's unit"])
def test_a_diverged_slave_is_refused_and_keeps_its_files(ha_pair, api, tmp_path, namesrv, case):
    topic = unique("Div")  # one name on both brokers: units of equal bodies have equal sizes
    old_bodies, master_bodies = {
        "same length": ([b"o" * 100] * 5, [b"m" * 100] * 5),
        "shorter": ([b"o" * 100] * 3, [b"m" * 100] * 5),
        "ends inside a master's unit": ([b"o" * 100], [b"m" * 500] * 2),
    }[case]
    before = written_as_a_master(api, tmp_path, namesrv, topic, old_bodies)
    pair = ha_pair("ASYNC_MASTER", with_slave=False)
    api.create_topic(pair.master.addr, topic, 1, 1)
    send_all(api, pair.master.addr, topic, master_bodies)
    master = read_commitlog(pair.master.store)
    starts = {u.offset for u in master.units}
    if case == "same length":
        assert before.end == master.end
    elif case == "shorter":
        assert before.end < master.end and before.end in starts
    else:
        assert 0 < before.end < master.end and before.end not in starts

    pair.start_slave(tmp_path, namesrv)  # the same store directory, now as this master's slave
    wait_until(lambda: refusals(pair) >= 1, REPLICATION_TIMEOUT_S, "the slave to refuse its master")
    log = pair.slave.log()
    assert "diverged" in log and "Nothing was merged" in log and "Traceback" not in log
    # more on the master, and more attempts (it retries every second): still nothing merged
    send_all(api, pair.master.addr, topic, [b"later"] * 3)
    seen = refusals(pair)
    wait_until(lambda: refusals(pair) >= seen + 2, REPLICATION_TIMEOUT_S, "two more refused attempts")
    after = read_commitlog(pair.slave.store)
    assert after.span(0, before.end) == before.span(0, before.end)
    assert after.end == before.end and after.units == before.units
    assert " connected at commitlog offset" not in pair.master.log()  # it never reported an offset


def test_the_master_refuses_a_slave_reporting_an_end_inside_a_unit_or_past_its_own(ha_pair, api):
    """What a RocketMQ 4.x slave would send: an offset, nothing else."""
    pair = ha_pair("ASYNC_MASTER", with_slave=False)
    topic = unique("Div")
    api.create_topic(pair.master.addr, topic, 1, 1)
    send_all(api, pair.master.addr, topic, [b"x" * 300] * 4)
    m = read_commitlog(pair.master.store)
    second = m.units[1].offset
    for offset, why in ((second + 7, "inside one of this master's units"), (m.end + 1, "past this master's end")):
        slave = RawSlave(pair.ha_port)
        try:
            slave.report(offset)
            wait_until(lambda: f"reports commitlog offset {offset}, {why}" in pair.master.log(),  # noqa: B023
                       REPLICATION_TIMEOUT_S, f"the master to refuse offset {offset}")
            assert slave.sock.recv(1) == b""  # disconnected, nothing sent
        finally:
            slave.sock.close()
    # an offset on a unit boundary is served: the rest of the commitlog from there
    slave = RawSlave(pair.ha_port)
    try:
        slave.report(second)
        offset, data = slave.receive()
        assert offset == second and data == m.span(second, m.end)
    finally:
        slave.sock.close()
