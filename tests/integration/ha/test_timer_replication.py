"""Timer messages on a master and its slave (real processes): the timer topic is replicated like any other
message, only the master delivers (the delivered copy reaches the slave by replication, once: the slave's
commitlog, read with the independent struct reader, holds each message exactly once in rmq_sys_wheel_timer
and once in its real topic), and the slave keeps no timer log of its own."""

from __future__ import annotations

import collections
import json
import time

from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties

from ._support import delivered_copies
from .commitlog_files import read_commitlog

TIMER = "timerPrecisionMs=200\ntimerMaxDelaySec=60\nmappedFileSizeTimerLog=400000\n"
SYNC_TIMEOUT_S = 60.0
COUNT = 20
# the late timers' due time: past the master's SIGKILL (a few seconds in), asserted; overdue ones are delivered at once
LATE_MS = 10_000


def test_a_timer_message_is_replicated_and_delivered_by_the_master_only(ha_pair, tmp_path, namesrv, api):
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=TIMER)
    pair.start_slave(tmp_path, namesrv, TIMER)
    topic = unique("HaTimer")
    api.create_topic(pair.master.addr, topic, 1, 1)
    bodies = [f"t{i}".encode() for i in range(COUNT)]
    due = int(time.time() * 1000) + 2000
    batch = MessageBatch.of(topic, 0, bodies, [encode_properties({"TIMER_DELIVER_MS": str(due)})] * COUNT)
    assert api.send_batch(pair.master.addr, batch, "ha_producer").status == SendStatus.SEND_OK

    on_master, on_slave = delivered_copies(pair, topic, bodies, SYNC_TIMEOUT_S)
    for b in bodies:
        assert on_master[("rmq_sys_wheel_timer", b)] == on_slave[("rmq_sys_wheel_timer", b)] == 1
        assert on_master[(topic, b)] == on_slave[(topic, b)] == 1  # delivered once, by the master
    assert (pair.master.store / "timerlog").exists() and not (pair.slave.store / "timerlog").exists()
    assert "timer:" not in pair.slave.log() and "Traceback" not in pair.slave.log()


def test_a_slave_promoted_after_its_master_dies_delivers_the_timers_still_pending(ha_pair, tmp_path, namesrv, api):
    """The slave keeps the master's timercheck.json (GET_TIMER_CHECK_POINT); the master is SIGKILLed with
    timers pending; the slave, restarted as master on its own store, rebuilds its timer log from the
    replicated timer topic and delivers those, skipping the ones the master delivered: none lost (its
    commitlog holds every timer in its real topic), duplicates counted."""
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=TIMER)
    pair.start_slave(tmp_path, namesrv, f"{TIMER}slaveSynchronizeInterval=300\n")
    topic = unique("HaTimerTakeover")
    api.create_topic(pair.master.addr, topic, 1, 1)
    now = int(time.time() * 1000)
    early = [f"e{i}".encode() for i in range(COUNT)]
    late = [f"l{i}".encode() for i in range(COUNT)]
    for bodies, due in ((early, now + 1500), (late, now + LATE_MS)):
        batch = MessageBatch.of(topic, 0, bodies, [encode_properties({"TIMER_DELIVER_MS": str(due)})] * COUNT)
        assert api.send_batch(pair.master.addr, batch, "ha_producer").status == SendStatus.SEND_OK

    def delivered(store, bodies) -> collections.Counter | None:
        c = collections.Counter(u.body for u in read_commitlog(store).units if u.topic == topic)
        return c if all(c[b] for b in bodies) else None

    wait_until(lambda: delivered(pair.slave.store, early), SYNC_TIMEOUT_S, "the early timers replicated")
    checkpoint = pair.slave.store / "config" / "timercheck.json"

    def synced_past_early():
        progress = json.loads(checkpoint.read_text()) if checkpoint.exists() else {}
        return progress.get("synced") and progress.get("readTimeMs", 0) > now + 1500 \
            and progress.get("queueOffset") == 2 * COUNT

    wait_until(synced_past_early, SYNC_TIMEOUT_S, "the master's timer progress on the slave")
    assert not delivered(pair.slave.store, late)  # still pending when the master dies
    pair.master.kill()
    pair.slave.stop()
    pair.slave.conf.write_text(pair.slave.conf.read_text().replace("brokerRole=SLAVE", "brokerRole=ASYNC_MASTER")
                               .replace("brokerId=1", "brokerId=0"))
    pair.slave.start_again()
    seen = wait_until(lambda: delivered(pair.slave.store, early + late), SYNC_TIMEOUT_S,
                      "the pending timers delivered by the promoted slave")
    duplicates = sum(seen.values()) - len(seen)
    print(f"timer takeover: {2 * COUNT} timers, 0 lost, {duplicates} duplicates")
    assert set(seen) == set(early + late)
    assert all(seen[b] == 1 for b in early)  # the master's deliveries were skipped
    assert "timer log rebuilt from the consume queue" in pair.slave.log()
