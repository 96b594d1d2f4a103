"""Timer messages on a master and its slave (real processes): the timer topic is replicated like any other
message, only the master delivers (the delivered copy reaches the slave by replication, once: the slave's
commitlog, read with the independent struct reader, holds each message exactly once in rmq_sys_wheel_timer
and once in its real topic), and the slave keeps no timer log of its own."""

from __future__ import annotations

import collections
import time

from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties

from .commitlog_files import read_commitlog

TIMER = "timerPrecisionMs=200\ntimerMaxDelaySec=60\nmappedFileSizeTimerLog=400000\n"
SYNC_TIMEOUT_S = 60.0
COUNT = 20


def test_a_timer_message_is_replicated_and_delivered_by_the_master_only(ha_pair, tmp_path, namesrv, api):
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=TIMER)
    pair.start_slave(tmp_path, namesrv, TIMER)
    topic = unique("HaTimer")
    api.create_topic(pair.master.addr, topic, 1, 1)
    bodies = [f"t{i}".encode() for i in range(COUNT)]
    due = int(time.time() * 1000) + 2000
    batch = MessageBatch.of(topic, 0, bodies, [encode_properties({"TIMER_DELIVER_MS": str(due)})] * COUNT)
    assert api.send_batch(pair.master.addr, batch, "ha_producer").status == SendStatus.SEND_OK

    def copies(store) -> collections.Counter:
        return collections.Counter((u.topic, u.body) for u in read_commitlog(store).units)

    def delivered_on_slave():
        c = copies(pair.slave.store)
        return c if all(c[(topic, b)] for b in bodies) else None

    on_slave = wait_until(delivered_on_slave, SYNC_TIMEOUT_S, "the delivered copies replicated to the slave")
    on_master = copies(pair.master.store)
    for b in bodies:
        assert on_master[("rmq_sys_wheel_timer", b)] == on_slave[("rmq_sys_wheel_timer", b)] == 1
        assert on_master[(topic, b)] == on_slave[(topic, b)] == 1  # delivered once, by the master
    assert (pair.master.store / "timerlog").exists() and not (pair.slave.store / "timerlog").exists()
    assert "timer:" not in pair.slave.log() and "Traceback" not in pair.slave.log()
