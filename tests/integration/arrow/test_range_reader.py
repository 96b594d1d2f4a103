"""``read_range`` over its blocking pull channel against a real broker: every batch of a read of many pulls holds
what was sent once the read is over (each answer is read into one buffer the next pull reuses), and a broker that
cannot be reached is an error naming its address."""

from __future__ import annotations

import pytest
from servers import free_addr, unique, wait_until

from spark_mq.arrow.pull_channel import PullChannel
from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.queue_pull import pull_header
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import RemotingConnectError
from spark_mq.common.message import Message
from spark_mq.remoting.bodies import MessageQueue

PULL = 7  # messages per pull: a queue's read is many pulls


def test_batches_of_a_many_pull_read_keep_their_rows(cluster):
    topic = unique("range_read")
    with SyncMQClientAPI() as api:
        api.create_topic(cluster.broker, topic, 1, 1)
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic), what=f"route of {topic}")
        with SyncProducer(unique("range_pg"), ClientConfig(cluster.namesrv)) as producer:
            sent = [Message(topic, f"body-{i}-".encode() * (1 + i % 5), tags=f"t{i % 3}", keys=[f"k{i}"])
                    for i in range(60)]
            producer.send(sent)  # one batch
        end = api.get_max_offset(cluster.broker, topic, 0)
    part = QueueRange(topic, "broker-a", cluster.broker, 0, 5, end, "*", unique("range_g"), PULL, True)
    batches = list(read_range(part, columns=["body", "tags", "keys", "queue_offset"]))  # every pull done first
    assert len(batches) == -(-(end - 5) // PULL)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(5, end))
    assert [(r["body"], r["tags"], r["keys"]) for r in rows] == [(m.body, m.tags, f"k{i}")
                                                                  for i, m in enumerate(sent)][5:]


def test_a_broker_that_does_not_answer_is_named():
    """The channel's error is the one ``first_answering`` goes round a broker set's members on."""
    addr = free_addr()  # nothing listens there
    header = pull_header("g", MessageQueue("T", "broker-x", 0), 0, PULL, "*")
    with PullChannel(None, 1.0) as channel, pytest.raises(RemotingConnectError, match=f"cannot connect to {addr}"):
        channel.pull_message(addr, header)
