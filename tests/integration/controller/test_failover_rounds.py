"""Round after round of master deaths against a real controller: each time the most up-to-date live
member of the SyncStateSet takes over with the next master epoch, the old master returns and is
re-admitted by the new one. The CI-sized run does a few rounds; the slow one 20, and prints how long
each election took after the master's last heartbeat (a figure, never asserted)."""

from __future__ import annotations

import statistics
import time

import pytest
from servers import unique, wait_until

from spark_mq.remoting.codes import ResponseCode

from .conftest import replica_set


def _rounds(api, heartbeats, rounds: int) -> list[float]:
    name = unique("rounds")
    brokers = replica_set(name)
    for b in brokers:
        api.register(b.name, b.broker_id, b.address)
        heartbeats.start(b)
    assert api.elect(name, 0).code == ResponseCode.SUCCESS
    assert api.alter(name, 0, 1, {0, 1, 2}, 1).code == ResponseCode.SUCCESS
    master, epoch, set_epoch = 0, 1, 2
    waits = []
    for r in range(rounds):
        others = [b for b in brokers if b.broker_id != master]
        ahead = others[r % 2]  # the replica furthest ahead this round
        for b in brokers:
            b.epoch = epoch
            b.max_offset = 1000 * (r + 1) + (500 if b is ahead else 0)
        for b in others:
            api.heartbeat(b.name, b.broker_id, b.address, b.epoch, b.max_offset)
        heartbeats.stop(brokers[master])
        stopped = time.monotonic()
        info = wait_until(lambda e=epoch + 1: (i := api.replica_info(name)).master_epoch == e and i, timeout=60,
                          what=f"round {r}: a new master")
        waits.append(time.monotonic() - stopped)
        assert info.master_id == ahead.broker_id, f"round {r}: elected {info.master_id}, not {ahead.broker_id}"
        assert (info.sync_state_set, info.sync_state_set_epoch) == ({ahead.broker_id}, set_epoch + 1)
        heartbeats.start(brokers[master])  # the old master returns
        master, epoch, set_epoch = ahead.broker_id, epoch + 1, set_epoch + 1
        regrown = api.alter(name, master, epoch, {0, 1, 2}, set_epoch)
        assert regrown.code == ResponseCode.SUCCESS, f"round {r}: {regrown.remark}"
        set_epoch += 1
    return waits


def test_a_few_failovers_in_a_row(api, heartbeats):
    assert len(_rounds(api, heartbeats, 3)) == 3


@pytest.mark.slow
def test_twenty_failovers_in_a_row(api, heartbeats):
    waits = _rounds(api, heartbeats, 20)
    print(f"\n20 elections after the master's last heartbeat: median {statistics.median(waits):.2f} s, "
          f"max {max(waits):.2f} s (controllerHeartBeatTimeoutMills=2000, scanNotActiveBrokerInterval=200)")
