"""Delayed messages on a master and its slave (real processes): the schedule topic is replicated like
any other message, only the master delivers (the delivered copy reaches the slave by replication,
once: the slave's commitlog, read with the independent struct reader, holds each message exactly
once in the schedule topic and once in its real topic), and the slave takes the master's per-level
progress (delayOffset.json ``offsetTable``) through GET_ALL_DELAY_OFFSET."""

from __future__ import annotations

import json

from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties

from ._support import delivered_copies

LEVELS = "messageDelayLevel=2s 4s\nflushDelayOffsetInterval=300\n"
SYNC_TIMEOUT_S = 60.0
COUNT = 20


def test_a_delayed_message_is_replicated_and_delivered_by_the_master_only(ha_pair, tmp_path, namesrv, api):
    pair = ha_pair("ASYNC_MASTER", with_slave=False, master_conf=LEVELS)
    pair.start_slave(tmp_path, namesrv, f"{LEVELS}slaveSynchronizeInterval=500\n")
    topic = unique("HaDelay")
    api.create_topic(pair.master.addr, topic, 1, 1)
    bodies = [f"d{i}".encode() for i in range(COUNT)]
    batch = MessageBatch.of(topic, 0, bodies, [encode_properties({"DELAY": "1"})] * COUNT)
    assert api.send_batch(pair.master.addr, batch, "ha_producer").status == SendStatus.SEND_OK

    on_master, on_slave = delivered_copies(pair, topic, bodies, SYNC_TIMEOUT_S)
    for b in bodies:
        assert on_master[("SCHEDULE_TOPIC_XXXX", b)] == on_slave[("SCHEDULE_TOPIC_XXXX", b)] == 1
        assert on_master[(topic, b)] == on_slave[(topic, b)] == 1  # delivered once, by the master

    def slave_progress():
        path = pair.slave.store / "config" / "delayOffset.json"
        return path.exists() and json.loads(path.read_text()).get("offsetTable") == {"1": COUNT}

    wait_until(slave_progress, SYNC_TIMEOUT_S, "the master's delay progress in the slave's delayOffset.json")
    assert "schedule:" not in pair.slave.log() and "Traceback" not in pair.slave.log()
