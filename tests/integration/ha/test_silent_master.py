"""A master that hangs without being deposed (RocketMQ's haHousekeepingInterval): frozen (SIGSTOP) or behind
a network black hole, it neither sends nor closes the slave's HA connection. The slave drops a connection
that brought nothing for the interval and connects again, so it copies what the master wrote meanwhile
once the master, or a route to it, is back: both commitlogs byte-identical, nothing lost. An idle master's
heartbeats keep the connection."""

from __future__ import annotations

import signal
import time

import pytest

from .test_replication import make_topic, replicated, send_batches
from .test_restarts import connects, reconnected_at

HEARTBEAT_S = 0.2  # the master's haSendHeartbeatInterval here: an idle master is heard this often
HOUSEKEEPING_S = 2.0  # the slave's haHousekeepingInterval here
DROPPED = "sent nothing for"  # the slave's log line when it drops a silent connection


def drops(pair) -> int:
    return pair.slave.log().count(DROPPED)


@pytest.mark.parametrize("how", ["black hole", "SIGSTOP"])
def test_a_slave_reconnects_to_a_master_silent_for_the_housekeeping_interval(ha_pair, ha_proxy, api, tmp_path,
                                                                             namesrv, how):
    heartbeats = f"haSendHeartbeatInterval={HEARTBEAT_S * 1000:.0f}\n"
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=heartbeats)
    proxy = ha_proxy(pair)
    pair.start_slave(tmp_path, namesrv, f"{heartbeats}haHousekeepingInterval={HOUSEKEEPING_S * 1000:.0f}\n"
                     f"haMasterAddress={proxy.addr}\n")
    topic = make_topic(api, pair)
    sent = send_batches(api, pair.master.addr, topic, 8, seed=21)
    m, _ = replicated(pair)
    time.sleep(2 * HOUSEKEEPING_S)  # idle: the master's heartbeats keep the connection
    assert drops(pair) == 0 and len(connects(pair)) == 1

    silent_since = time.monotonic()
    if how == "black hole":
        proxy.black_hole()  # the connection goes dark; a new one through the proxy gets through
        sent += send_batches(api, pair.master.addr, topic, 8, seed=22)  # stored while the slave hears nothing
        assert reconnected_at(pair, 2) == m.end  # the slave asks from what it had: nothing lost, nothing twice
        assert drops(pair) == 1 and time.monotonic() - silent_since >= HOUSEKEEPING_S / 2
    else:
        pair.master.server.signal(signal.SIGSTOP)
        try:
            while drops(pair) == 0:
                time.sleep(0.1)
                assert time.monotonic() - silent_since < 10 * HOUSEKEEPING_S, "the slave kept the silent connection"
            assert time.monotonic() - silent_since >= HOUSEKEEPING_S / 2
        finally:
            pair.master.server.signal(signal.SIGCONT)
        assert reconnected_at(pair, 2) == m.end
        sent += send_batches(api, pair.master.addr, topic, 8, seed=22)
    _, s = replicated(pair)
    assert [u.body for u in s.units] == sent
