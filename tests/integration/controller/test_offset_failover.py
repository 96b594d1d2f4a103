"""Committed consumer offsets through a controller failover: a group commits on the master, which is SIGKILLed
long before its slaves' next metadata sync (slaveSynchronizeInterval). The elected slave answers the offsets
committed, not the older ones of its last copy of the master's table: the master logged each commit in the
commitlog (rmq_sys_CONSUMER_OFFSET_LOG_<broker>), the commit was answered once the SyncStateSet had it, and the
promoted slave replayed the log at its start. A oneway commit the slaves do not have yet (frozen) is not told to
consumers until they have it: no later master could tell less."""

from __future__ import annotations

import signal
import time

from servers import unique, wait_until

from ._support import ControllerClient
from .test_broker_failover import (  # noqa: F401 (api, embedded, replica_set: fixtures)
    TIMEOUT_S,
    api,
    elected,
    embedded,
    replica_set,
    send,
    started_with_a_topic,
    sync_state_set,
)

# commits answered once every replica of the SyncStateSet has them; no metadata sync during the test
CONF = "allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\nslaveSynchronizeInterval=600000\n"


def test_the_elected_slave_answers_the_offsets_committed_on_the_killed_master(embedded, replica_set, api,  # noqa: F811
                                                                              remoting):
    namesrv = embedded.addr
    rs = replica_set(CONF)
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    send(namesrv, topic, "m", 20)
    master = rs.brokers[1].addr
    group = unique("offsets")
    for offset in (3, 5, 9):  # one queue committed several times, the other once
        api.update_consumer_offset(master, group, topic, 0, offset)
    api.update_consumer_offset(master, group, topic, 1, 4)
    slaves = [rs.brokers[2], rs.brokers[3]]
    for b in slaves:
        b.server.signal(signal.SIGSTOP)
    try:
        api.update_consumer_offset(master, group, topic, 0, 15, oneway=True)
        time.sleep(0.5)
        assert api.query_consumer_offset(master, group, topic, 0) == 9  # on the master only so far
    finally:
        for b in slaves:
            b.server.signal(signal.SIGCONT)
    wait_until(lambda: api.query_consumer_offset(master, group, topic, 0) == 15, TIMEOUT_S,
               "the oneway commit told once the slaves have it")
    rs.brokers[1].kill()
    new_master = elected(api, namesrv, topic, rs)
    assert api.query_consumer_offset(new_master.addr, group, topic, 0) == 15
    assert api.query_consumer_offset(new_master.addr, group, topic, 1) == 4
    assert "Traceback" not in new_master.log()
