"""The producer against real ``spark-mq namesrv`` / ``spark-mq broker`` processes: every send mode,
batches split under the 4 MiB limit, ordered sends, the message fields round trip, compression,
validation, and fault avoidance when a broker dies mid-run."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
import zlib
from collections import defaultdict

import numpy as np
import pytest
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer, SyncProducer, select_by_hash
from spark_mq.client.results import SendStatus
from spark_mq.common.errors import ClientError, MessageValidationError, SendFailedError
from spark_mq.common.message import Message
from spark_mq.common.properties import UNIQ_KEY
from spark_mq.common.unit.batch import decode_units
from spark_mq.common.unit.layout import COMPRESSED_FLAG
from spark_mq.remoting.message_batch_codec import MIN_RECORD_SIZE

from ._producer_support import create_topic, pull_all, pull_header

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def config(namesrv) -> ClientConfig:
    return ClientConfig(namesrv)


@pytest.fixture
def topic(api, namesrv, broker):
    name = unique("ProducerT")
    create_topic(api, namesrv, [broker], name)
    return name


@pytest.fixture
def producer(config):
    with SyncProducer(unique("pg"), config) as p:
        yield p


def test_sync_send_round_trips_keys_tags_properties_and_uniq_key(api, broker, topic, producer):
    msg = Message(topic, b"hello", tags="TagA", keys=["order-1", "user-7"], properties={"color": "red"}, flag=7)
    result = producer.send(msg)
    assert result.status == SendStatus.SEND_OK
    assert result.topic == topic and result.broker_name == "broker-a" and 0 <= result.queue_id < 4
    assert len(result.msg_id) == 32 and result.msg_id == result.msg_id.upper()

    stored = api.view_message_by_id(broker.addr, result.offset_msg_id)
    assert stored.body == b"hello" and stored.tags == "TagA" and stored.keys == ["order-1", "user-7"]
    assert stored.properties["color"] == "red" and stored.properties[UNIQ_KEY] == result.msg_id
    assert stored.properties["WAIT"] == "true"
    assert stored.flag == 7 and stored.sys_flag == 0 and stored.queue_id == result.queue_id
    # the broker indexes KEYS and UNIQ_KEY
    now = int(time.time() * 1000) + 1000
    by_key = wait_until(lambda: api.query_message(broker.addr, topic, "user-7", 10, 0, now), what="key index")
    assert [m.properties[UNIQ_KEY] for m in by_key] == [result.msg_id]
    by_uniq = api.query_message(broker.addr, topic, result.msg_id, 10, 0, now, unique_key=True)
    assert [m.body for m in by_uniq] == [b"hello"]
    # a UNIQ_KEY the caller set is kept
    mine = producer.send(Message(topic, b"x", properties={UNIQ_KEY: "0A0000010000000000000000000000AB"}))
    assert mine.msg_id == "0A0000010000000000000000000000AB"


def test_round_robin_spreads_sends_over_the_queues(topic, producer):
    queues = [producer.send(Message(topic, b"rr")).queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(b == (a + 1) % 4 for a, b in itertools.pairwise(queues))


def test_async_callback_and_oneway_sends(api, broker, topic, config):
    got: list = []
    errors: list = []

    async def run() -> list:
        async with Producer(unique("pg"), config) as p:
            results = await asyncio.gather(*(p.send(Message(topic, f"async-{i}".encode())) for i in range(20)))
            tasks = [p.send_callback(Message(topic, f"cb-{i}".encode()), got.append, errors.append) for i in range(10)]
            await asyncio.gather(*tasks)
            for i in range(5):
                await p.send_oneway(Message(topic, f"oneway-{i}".encode()))
            # a callback send still in flight at shutdown is finished first
            p.send_callback(Message(topic, b"cb-last"), got.append, errors.append)
        return results

    results = asyncio.run(run())
    assert all(r.status == SendStatus.SEND_OK for r in results) and len({r.msg_id for r in results}) == 20
    assert not errors and len(got) == 11
    expected = {f"async-{i}" for i in range(20)} | {f"cb-{i}" for i in range(10)} | {f"oneway-{i}" for i in range(5)}
    expected.add("cb-last")

    def stored() -> set[str]:
        return {m.body.decode() for q in range(4) for m in pull_all(api, broker.addr, topic, q)}

    wait_until(lambda: stored() == expected, what="every async, callback and oneway message stored")


def test_callback_reports_failure():
    failures: list[BaseException] = []

    async def run() -> None:
        async with Producer(unique("pg"), ClientConfig("127.0.0.1:1"), send_timeout_s=1) as p:
            await p.send_callback(Message("NoSuchTopicAnywhere", b"x"), lambda r: None, failures.append)

    asyncio.run(run())
    assert len(failures) == 1 and isinstance(failures[0], SendFailedError)


def test_sync_callback_send(topic, producer):
    done = threading.Event()
    seen: list = []
    future = producer.send_callback(Message(topic, b"cb"), lambda r: (seen.append(r), done.set()), seen.append)
    future.result(5)
    assert done.is_set() and seen[0].status == SendStatus.SEND_OK


def test_batch_over_4mib_is_split_and_all_stored(api, broker, topic, producer):
    bodies = [os.urandom(700 * 1024) + i.to_bytes(4, "big") for i in range(10)]  # ~7 MiB, incompressible
    messages = [Message(topic, b, tags="batch", keys=f"b{i}") for i, b in enumerate(bodies)]
    results = producer.send_batch(messages)
    assert len(results) == 2  # 5 messages of ~700 KiB fit 4 MiB, 6 do not
    assert [len(r.msg_ids) for r in results] == [5, 5] and [len(r.offset_msg_ids) for r in results] == [5, 5]
    stored = [api.view_message_by_id(broker.addr, mid) for r in results for mid in r.offset_msg_ids]
    assert [m.body for m in stored] == bodies
    assert [m.properties[UNIQ_KEY] for m in stored] == [k for r in results for k in r.msg_ids]
    assert [m.keys for m in stored] == [[f"b{i}"] for i in range(10)] and {m.tags for m in stored} == {"batch"}
    assert all(m.sys_flag & COMPRESSED_FLAG == 0 for m in stored)  # batches are never compressed
    for r in results:  # each request went to one queue, its messages consecutive there
        ms = [m for m in stored if m.properties[UNIQ_KEY] in r.msg_ids]
        assert {m.queue_id for m in ms} == {r.queue_id}
        assert [m.queue_offset for m in ms] == list(range(r.queue_offset, r.queue_offset + len(ms)))
    # every request stayed within 4 MiB encoded
    sizes = defaultdict(int)
    for r in results:
        for m in stored:
            if m.properties[UNIQ_KEY] in r.msg_ids:
                props = "".join(f"{k}\x01{v}\x02" for k, v in m.properties.items()).encode()
                sizes[r.queue_offset, r.queue_id] += MIN_RECORD_SIZE + len(m.body) + len(props)
    assert all(s <= 4 * MiB for s in sizes.values())


def test_small_batch_is_one_request_and_a_big_one_needs_send_batch(topic, producer):
    result = producer.send([Message(topic, f"m{i}".encode()) for i in range(50)])
    assert len(result.msg_ids) == 50 and len(set(result.msg_ids)) == 50
    with pytest.raises(MessageValidationError, match="send_batch"):
        producer.send([Message(topic, b"x" * MiB) for _ in range(5)])


def test_orderly_send_keeps_each_key_on_one_queue(api, broker, topic, producer):
    route_queues = producer._thread.run(producer.producer.publish_queues(topic))
    sent: dict[str, list] = defaultdict(list)
    for i in range(40):
        key = f"order-{i % 5}"
        r = producer.send_orderly(Message(topic, f"{key}:{i}".encode()), key)
        sent[key].append(r)
    for key, results in sent.items():
        assert {r.queue_id for r in results} == {select_by_hash(route_queues, None, key).queue_id}
        assert [r.queue_offset for r in results] == sorted(r.queue_offset for r in results)
    assert len({rs[0].queue_id for rs in sent.values()}) > 1  # keys do spread
    for key, results in sent.items():  # in send order within the queue
        msgs = [m for m in pull_all(api, broker.addr, topic, results[0].queue_id) if m.body.startswith(key.encode())]
        assert [int(m.body.split(b":")[1]) for m in msgs] == [i for i in range(40) if f"order-{i % 5}" == key]


def test_large_body_is_stored_compressed_and_read_back_whole(api, broker, topic, producer):
    body = b"".join(f"line {i}: the quick brown fox\n".encode() for i in range(4000))  # ~120 KB, compressible
    result = producer.send(Message(topic, body, tags="big"))
    small = producer.send(Message(topic, b"s" * 4095))

    stored = api.view_message_by_id(broker.addr, result.offset_msg_id)
    assert stored.sys_flag & COMPRESSED_FLAG and stored.body == body
    assert stored.body_crc == zlib.crc32(zlib.compress(body, 5)) & 0x7FFFFFFF
    assert api.view_message_by_id(broker.addr, small.offset_msg_id).sys_flag & COMPRESSED_FLAG == 0

    # the unit in the commitlog holds the deflated body; pulls decode it back
    pulled = api.pull_message(broker.addr, pull_header(topic, result.queue_id, result.queue_offset, 1))
    units = decode_units(np.frombuffer(pulled.body, dtype=np.uint8), pulled.unit_starts()[:1])
    assert int(units.header["body_length"][0]) < len(body) // 10
    assert pulled.messages()[0].body == body


@pytest.mark.parametrize(("message", "match"), [
    (Message("bad topic!", b"x"), "illegal characters"),
    (Message("", b"x"), "topic is empty"),
    (Message("T" * 128, b"x"), "over the 127 limit"),
    (Message("TBW102", b"x"), "not allowed"),
    (Message("VALID", b""), "empty"),
    (Message("VALID", b"x" * (4 * MiB + 1)), "over max_message_size"),
    (Message("VALID", b"x", properties={"a\x01b": "c"}), "illegal property name"),
    (Message("VALID", b"x", properties={"p": "v" * 40000}), "over the 32767 limit"),
    (Message("VALID", "text"), "must be bytes"),
])
def test_validation_errors_send_nothing(api, broker, topic, producer, message, match):
    message.topic = topic if message.topic == "VALID" else message.topic
    with pytest.raises(MessageValidationError, match=match):
        producer.send(message)
    with pytest.raises(MessageValidationError, match=match):
        producer.send_oneway(message)
    assert all(api.get_max_offset(broker.addr, topic, q) == 0 for q in range(4))


def test_batch_rules(api, broker, topic, producer):
    cases = [
        ([], "at least one message"),
        ([Message(topic, b"a"), Message(topic + "x", b"b")], "same topic"),
        ([Message("%RETRY%g", b"a")], "retry topic"),
        ([Message(topic, b"a"), Message(topic, b"")], "empty"),
    ]
    for messages, match in cases:
        with pytest.raises(MessageValidationError, match=match):
            producer.send_batch(messages)
    assert all(api.get_max_offset(broker.addr, topic, q) == 0 for q in range(4))


def test_unknown_topic_is_created_through_tbw102(api, broker, producer):
    topic = unique("AutoT")
    result = producer.send(Message(topic, b"auto"))
    assert result.status == SendStatus.SEND_OK and result.broker_name == "broker-a"
    assert api.view_message_by_id(broker.addr, result.offset_msg_id).body == b"auto"


def test_producer_must_be_started(config, topic):
    p = SyncProducer(unique("pg"), config)
    try:
        with pytest.raises(ClientError, match="not started"):
            p.send(Message(topic, b"x"))
    finally:
        p.shutdown()
    with pytest.raises(RuntimeError):
        p.send(Message(topic, b"x"))


def test_fault_avoidance_when_a_broker_dies_mid_run(tmp_path, api):
    """With two brokers, one killed mid-run, sends continue on the other and no message the
    producer reported as sent is lost."""
    ns = start_namesrv(tmp_path / "namesrv.log")
    a = Broker(ns.addr, tmp_path / "a", broker_name="broker-a")
    b = Broker(ns.addr, tmp_path / "b", broker_name="broker-b")
    try:
        topic = unique("FaultT")
        create_topic(api, ns.addr, [a, b], topic)
        sent: list = []  # (seq, SendResult)
        failures: list = []
        stop = threading.Event()
        killed_at: list[int] = []

        def produce(p: SyncProducer) -> None:
            seq = 0
            while not stop.is_set():
                try:
                    sent.append((seq, p.send(Message(topic, f"seq-{seq}".encode()))))
                except (SendFailedError, ClientError) as e:
                    failures.append((seq, e))
                seq += 1
                time.sleep(0.002)

        with SyncProducer(unique("pg"), ClientConfig(ns.addr)) as p:
            worker = threading.Thread(target=produce, args=(p,))
            worker.start()
            try:
                wait_until(lambda: len({r.broker_name for _, r in sent}) == 2, what="sends to both brokers")
                time.sleep(0.5)
                a.kill()
                killed_at.append(len(sent))
                time.sleep(3.0)
            finally:
                stop.set()
                worker.join(10)
            after = [r for _, r in sent[killed_at[0]:]]
            assert not p.producer.fault.is_available("broker-a")  # the failed attempt put it in avoidance
            assert p.producer.fault.is_available("broker-b")
        assert not worker.is_alive()
        assert len(after) > 100, f"sends stalled after the kill: {len(after)} succeeded, failures {failures[:3]}"
        assert len(failures) <= 3, failures
        # once broker-a failed it was avoided: at most a send or two still reached it, then only broker-b
        assert [r.broker_name for r in after[3:]] == ["broker-b"] * (len(after) - 3)

        a.start_again()  # recovers what it acknowledged before the crash
        stored = {x.name: {m.properties[UNIQ_KEY] for q in range(4) for m in pull_all(api, x.addr, topic, q)}
                  for x in (a, b)}
        lost = [(seq, r) for seq, r in sent if r.msg_id not in stored[r.broker_name]]
        assert not lost, f"{len(lost)} of {len(sent)} acknowledged messages missing, e.g. {lost[:3]}"
    finally:
        a.stop_if_running()
        b.stop_if_running()
        ns.stop_cleanly()
