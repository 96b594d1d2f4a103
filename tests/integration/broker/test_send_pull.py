"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and PULL_MESSAGE (long polling included)
against a real ``spark-mq broker`` process, through our client (``SyncMQClientAPI`` /
``MQClientAPI``)."""

from __future__ import annotations

import asyncio

import pytest
from servers import LONG_SUSPEND_MS, WOKEN_WITHIN_S, held_pulls, unique, until_held

from spark_mq.client.api import MQClientAPI
from spark_mq.client.ids import uniq_key
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.remoting.codes import ResponseCode

from ._support import pull_header, send_header


def pull_all(api, addr, topic, queue_id, offset=0, group="itest_reader", subscription=None):
    result = api.pull_message(addr, pull_header(group, topic, queue_id, offset, subscription=subscription))
    return result, result.messages(check_crc=True)


def test_send_v1_and_v2_to_an_auto_created_topic_round_trip(broker, api):
    topic = unique("SendAuto")
    k1, k2 = uniq_key(), uniq_key()
    r1 = api.send_message(broker.addr, send_header(topic, -1, tags="a", keys="order-1 order-2", uniq_key=k1,
                                                   props={"color": "red", "n": "1"}), b"first body")
    assert r1.status == SendStatus.SEND_OK
    assert 0 <= r1.queue_id < 4  # queueId -1: the broker picked one of the default 4
    assert (r1.queue_offset, r1.msg_id, r1.topic) == (0, k1, topic)
    r2 = api.send_message_v2(broker.addr, send_header(topic, r1.queue_id, tags="b", uniq_key=k2), b"second")
    assert (r2.status, r2.queue_id, r2.queue_offset, r2.msg_id) == (SendStatus.SEND_OK, r1.queue_id, 1, k2)

    # auto-created with the default topic's queue count, perm read+write
    cfg = api.get_all_topic_config(broker.addr).topic_config_table[topic]
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (4, 4, 6)

    # msgId is an offsetMsgId: store host (the broker's address) + commitlog offset
    for r in (r1, r2):
        host, phys = parse_offset_msg_id(r.offset_msg_id)
        assert host == pack_host("127.0.0.1", int(broker.addr.rpartition(":")[2]))
        assert phys >= 0
    by_id = api.view_message_by_id(broker.addr, r1.offset_msg_id)
    assert by_id is not None and by_id.body == b"first body"
    assert (by_id.topic, by_id.queue_id, by_id.queue_offset) == (topic, r1.queue_id, 0)
    assert by_id.tags == "a" and by_id.keys == ["order-1", "order-2"]
    assert by_id.properties["UNIQ_KEY"] == k1 and by_id.properties["color"] == "red"
    assert by_id.physical_offset == parse_offset_msg_id(r1.offset_msg_id)[1]

    result, msgs = pull_all(api, broker.addr, topic, r1.queue_id)
    assert result.status == PullStatus.FOUND
    assert [m.body for m in msgs] == [b"first body", b"second"]
    assert [m.tags for m in msgs] == ["a", "b"]
    assert [m.properties.get("UNIQ_KEY") for m in msgs] == [k1, k2]
    assert msgs[0].properties["n"] == "1" and "color" not in msgs[1].properties


def test_send_to_a_created_topic_and_bad_queue(broker, api):
    topic = unique("SendCreated")
    api.create_topic(broker.addr, topic, 2, 2)
    seen = set()
    for i in range(20):
        r = api.send_message(broker.addr, send_header(topic, -1), f"m{i}".encode())
        assert 0 <= r.queue_id < 2
        seen.add(r.queue_id)
    assert seen == {0, 1}  # random pick over 20 sends: both queues used
    assert sum(api.get_max_offset(broker.addr, topic, q) for q in (0, 1)) == 20
    with pytest.raises(MQClientError) as e:
        api.send_message(broker.addr, send_header(topic, 5), b"x")
    assert e.value.code == ResponseCode.SYSTEM_ERROR and "queueId[5]" in e.value.remark


def test_send_batch_to_auto_created_and_created_topics(broker, api):
    for created in (False, True):
        topic = unique("Batch")
        if created:
            api.create_topic(broker.addr, topic, 3, 3)
        keys = [uniq_key() for _ in range(5)]
        msgs = [Message(topic, f"batch-{i}".encode(), tags="t" if i % 2 else "u", keys=f"bk{i}",
                        properties={"idx": str(i)}) for i in range(5)]
        batch = MessageBatch.from_messages(msgs, -1, uniq_keys=keys)
        r = api.send_batch(broker.addr, batch, "itest_producer")
        assert r.status == SendStatus.SEND_OK
        assert 0 <= r.queue_id < (3 if created else 4)
        assert r.queue_offset == 0
        assert r.msg_ids == keys
        assert len(r.offset_msg_ids) == 5
        for i, oid in enumerate(r.offset_msg_ids):
            m = api.view_message_by_id(broker.addr, oid)
            assert m is not None and (m.body, m.queue_offset, m.properties["UNIQ_KEY"]) == (
                f"batch-{i}".encode(), i, keys[i])
        _, got = pull_all(api, broker.addr, topic, r.queue_id)
        assert [m.body for m in got] == [f"batch-{i}".encode() for i in range(5)]
        assert [m.keys for m in got] == [[f"bk{i}"] for i in range(5)]
        assert [m.properties["idx"] for m in got] == [str(i) for i in range(5)]
        assert [m.tags for m in got] == ["u", "t", "u", "t", "u"]
        # a second batch follows in the same queue
        r2 = api.send_batch(broker.addr, MessageBatch.from_messages(msgs[:2], r.queue_id), "itest_producer")
        assert (r2.queue_id, r2.queue_offset) == (r.queue_id, 5)


def test_pull_found_offsets_not_found_and_moved(broker, api):
    topic = unique("Pull")
    api.create_topic(broker.addr, topic, 2, 2)
    for i in range(10):
        api.send_message(broker.addr, send_header(topic, 1), f"p{i}".encode())
    h = pull_header("g", topic, 1, 3, max_nums=4)
    r = api.pull_message(broker.addr, h)
    assert r.status == PullStatus.FOUND
    assert [m.body for m in r.messages(check_crc=True)] == [b"p3", b"p4", b"p5", b"p6"]
    assert [m.queue_offset for m in r.messages()] == [3, 4, 5, 6]
    assert (r.next_begin_offset, r.min_offset, r.max_offset) == (7, 0, 10)
    assert len(r.unit_starts()) == 4

    end = api.pull_message(broker.addr, pull_header("g", topic, 1, 10))
    assert (end.status, end.next_begin_offset, end.min_offset, end.max_offset) == (PullStatus.NO_NEW_MSG, 10, 0, 10)
    assert end.body == b""
    empty = api.pull_message(broker.addr, pull_header("g", topic, 0, 0))
    assert empty.status == PullStatus.NO_NEW_MSG and empty.max_offset == 0

    moved = api.pull_message(broker.addr, pull_header("g", topic, 1, 50))
    assert moved.status == PullStatus.OFFSET_ILLEGAL
    assert moved.next_begin_offset == 10 and moved.max_offset == 10

    with pytest.raises(MQClientError) as e:
        api.pull_message(broker.addr, pull_header("g", unique("NoSuchTopic"), 0, 0))
    assert e.value.code == ResponseCode.TOPIC_NOT_EXIST


def test_pull_filters_by_tags(broker, api):
    topic = unique("Tags")
    api.create_topic(broker.addr, topic, 1, 1)
    tags = ["a", "b", "c", "a", "d", "b"]
    for i, t in enumerate(tags):
        api.send_message(broker.addr, send_header(topic, 0, tags=t), f"{t}{i}".encode())
    r = api.pull_message(broker.addr, pull_header("g", topic, 0, 0, subscription="a || b"))
    assert r.status == PullStatus.FOUND
    assert [m.body for m in r.messages()] == [b"a0", b"b1", b"a3", b"b5"]
    assert r.next_begin_offset == 6
    star = api.pull_message(broker.addr, pull_header("g", topic, 0, 0, subscription="*"))
    assert len(star.messages()) == 6
    none = api.pull_message(broker.addr, pull_header("g", topic, 0, 0, subscription="zzz"))
    assert none.status in (PullStatus.NO_MATCHED_MSG, PullStatus.NO_NEW_MSG)
    assert none.body == b"" and none.next_begin_offset == 6


def test_long_poll_is_woken_by_a_send_and_times_out_without_one(broker):
    topic = unique("LongPoll")

    async def main():
        async with MQClientAPI(timeout=5.0) as api:
            await api.create_topic(broker.addr, topic, 2, 2)
            # woken by a send to its queue: answered well before its suspend timeout could have expired
            held = asyncio.ensure_future(api.pull_message(broker.addr, pull_header("g", topic, 0, 0,
                                                                                   suspend_ms=LONG_SUSPEND_MS)))
            await until_held(api, broker.addr, 1)
            await api.send_message(broker.addr, send_header(topic, 0), b"wake up")
            r = await asyncio.wait_for(held, WOKEN_WITHIN_S)
            assert r.status == PullStatus.FOUND and [m.body for m in r.messages()] == [b"wake up"]

            # held at the end of a non-empty queue, woken by the next message
            held = asyncio.ensure_future(api.pull_message(broker.addr, pull_header("g", topic, 0, 1,
                                                                                   suspend_ms=LONG_SUSPEND_MS)))
            await until_held(api, broker.addr, 1)
            await api.send_message(broker.addr, send_header(topic, 0), b"second")
            r = await asyncio.wait_for(held, WOKEN_WITHIN_S)
            assert [(m.queue_offset, m.body) for m in r.messages()] == [(1, b"second")]

            # nothing sent: held by the broker, then PULL_NOT_FOUND at its suspend timeout
            waiting = asyncio.ensure_future(api.pull_message(broker.addr, pull_header("g", topic, 1, 0,
                                                                                      suspend_ms=2000)))
            await until_held(api, broker.addr, 1)
            r = await asyncio.wait_for(waiting, WOKEN_WITHIN_S)
            assert r.status == PullStatus.NO_NEW_MSG
            assert await held_pulls(api, broker.addr) == 0

    asyncio.run(main())


def test_held_pulls_are_woken_only_by_their_own_queue(broker):
    topic = unique("LongPollQueues")

    async def main():
        async with MQClientAPI(timeout=5.0) as api:
            await api.create_topic(broker.addr, topic, 3, 3)
            held = {q: asyncio.ensure_future(api.pull_message(broker.addr, pull_header("g", topic, q, 0,
                                                                                        suspend_ms=LONG_SUSPEND_MS)))
                    for q in range(3)}
            await until_held(api, broker.addr, 3)
            await api.send_message(broker.addr, send_header(topic, 1), b"for queue 1")
            r1 = await asyncio.wait_for(held[1], WOKEN_WITHIN_S)
            assert [m.body for m in r1.messages()] == [b"for queue 1"]
            # the send woke its own queue's pull only: the broker still holds the other two
            assert await held_pulls(api, broker.addr) == 2 and not held[0].done() and not held[2].done()
            await api.send_message(broker.addr, send_header(topic, 2), b"for queue 2")
            r2 = await asyncio.wait_for(held[2], WOKEN_WITHIN_S)
            assert [m.body for m in r2.messages()] == [b"for queue 2"]
            assert await held_pulls(api, broker.addr) == 1 and not held[0].done()
            await api.send_message(broker.addr, send_header(topic, 0), b"for queue 0")
            r0 = await asyncio.wait_for(held[0], WOKEN_WITHIN_S)
            assert [m.body for m in r0.messages()] == [b"for queue 0"]

    asyncio.run(main())


def test_commit_offset_carried_by_a_pull(broker, api):
    topic, group = unique("CommitPull"), unique("cg")
    api.create_topic(broker.addr, topic, 1, 1)
    for i in range(5):
        api.send_message(broker.addr, send_header(topic, 0), f"c{i}".encode())
    # a fresh group on a queue that starts at 0 reads from 0
    assert api.query_consumer_offset(broker.addr, group, topic, 0) == 0
    r = api.pull_message(broker.addr, pull_header(group, topic, 0, 3, commit_offset=3))
    assert r.status == PullStatus.FOUND
    assert api.query_consumer_offset(broker.addr, group, topic, 0) == 3
    # without the commit flag the offset field is ignored
    api.pull_message(broker.addr, pull_header(group, topic, 0, 4))
    assert api.query_consumer_offset(broker.addr, group, topic, 0) == 3
