"""A producer's batch encoding, in columns and (a small batch) one message at a time: what it puts
on the wire and what it refuses, the same either way."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mq.client import ids, outgoing
from spark_mq.client.ids import UNIQ_KEY_LENGTH, UniqKeyGenerator, parse_uniq_key
from spark_mq.client.outgoing import SMALL_BATCH, PreparedBatch, prepare, prepare_batch
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import Message
from spark_mq.common.properties import TIMER_DELIVER_MS, UNIQ_KEY, WAIT_STORE_MSG_OK, decode_properties
from spark_mq.remoting import message_batch_codec
from spark_mq.remoting.message_batch_codec import MIN_RECORD_SIZE, decode_batch_body, encode_batch_body

MAX = 4 * 1024 * 1024
MIXED = [  # every kind of message a batch may hold
    Message("T", b"a", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}, flag=7),
    Message("T", b"b"),
    Message("T", bytearray(b"c"), properties={UNIQ_KEY: "MINE", WAIT_STORE_MSG_OK: "false"}),
    Message("T", memoryview(b"d"), keys="solo", flag=-1),
    Message("T", b"e", deliver_time_ms=1_900_000_000_000),
    Message("T", b"f" * 3000, flag=-(1 << 31)),
    Message("T", b"g", properties={"DELAY": "0"}),
    Message("T", b"h"),
]


@pytest.fixture(params=["columns", "one by one"])
def batch_path(request, monkeypatch) -> str:
    """Runs a test with every batch prepared and encoded in columns, then one message at a time."""
    if request.param == "columns":
        monkeypatch.setattr(outgoing, "SMALL_BATCH", 0)
        monkeypatch.setattr(message_batch_codec, "SMALL_BATCH_RECORDS", 0)
    return request.param


def _wire(batch: PreparedBatch) -> list[tuple[bytes, dict[str, str], int]]:
    """The batch as the broker decodes its SEND_BATCH_MESSAGE body."""
    decoded = decode_batch_body(encode_batch_body(batch.to_message_batch(3)), "T", 3, 0)
    return [(b, decode_properties(p), int(f)) for b, p, f in
            zip(decoded.bodies, decoded.properties, decoded.flags, strict=True)]


def test_plain_messages_get_fresh_unique_keys_and_wait():
    batch = prepare_batch([Message("T", f"m{i}".encode()) for i in range(1000)], MAX)
    wire = _wire(batch)
    assert [b for b, _, _ in wire] == [f"m{i}".encode() for i in range(1000)]
    keys = [p[UNIQ_KEY] for _, p, _ in wire]
    assert all(p == {UNIQ_KEY: k, WAIT_STORE_MSG_OK: "true"} for (_, p, _), k in zip(wire, keys, strict=True))
    assert len(set(keys)) == 1000 and all(len(k) == UNIQ_KEY_LENGTH for k in keys)
    parse_uniq_key(keys[0])  # a well-formed key
    assert batch.msg_id == ",".join(keys)
    assert batch.record_sizes.tolist() == [MIN_RECORD_SIZE + len(b) + len(p) for b, p in
                                           zip(batch.bodies, batch.properties, strict=True)]


def test_properties_tags_keys_flags_and_an_own_uniq_key_are_kept(batch_path):
    batch = prepare_batch(MIXED[:4], MAX)
    wire = _wire(batch)
    assert [b for b, _, _ in wire] == [b"a", b"b", b"c", b"d"]
    assert [f for _, _, f in wire] == [7, 0, 0, -1]
    props = [p for _, p, _ in wire]
    assert props[0] == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", UNIQ_KEY: props[0][UNIQ_KEY],
                        WAIT_STORE_MSG_OK: "true"}
    assert props[2] == {UNIQ_KEY: "MINE", WAIT_STORE_MSG_OK: "false"}
    assert props[3]["KEYS"] == "solo"
    assert batch.msg_id.split(",") == [p[UNIQ_KEY] for p in props]


def test_a_deliver_time_alone_is_encoded():
    # a batch whose only property is a timer's deliver time is not a batch of plain messages
    wire = _wire(prepare_batch([Message("T", b"a", deliver_time_ms=1_900_000_000_000), Message("T", b"b")], MAX))
    assert wire[0][1][TIMER_DELIVER_MS] == "1900000000000"
    assert TIMER_DELIVER_MS not in wire[1][1]


def test_split_keeps_order_and_every_group_within_the_limit():
    sizes = [10, 500, 30, 2000, 5, 5, 5, 700]
    batch = prepare_batch([Message("T", b"x" * s) for s in sizes], MAX)
    limit = int(batch.record_sizes[1] + batch.record_sizes[2]) + 1  # the 2000-byte body is alone over it
    groups = batch.split(limit)
    assert [b for g in groups for b in g.bodies] == batch.bodies
    assert [k for g in groups for k in g.uniq_keys] == batch.uniq_keys
    assert all(g.size <= limit or len(g) == 1 for g in groups)
    assert any(len(g) == 1 and g.size > limit for g in groups)
    for g in groups[:-1]:  # greedy: the next message would not have fitted
        nxt = groups[groups.index(g) + 1]
        assert g.size + int(nxt.record_sizes[0]) > limit
    assert batch.split(10 * MAX) == [batch]


@pytest.mark.parametrize(("messages", "match"), [
    ([], "at least one message"),
    ([Message("T", b"a"), "not a message"], "spark_mq Message"),
    ([Message("T", b"a"), Message("U", b"b")], "same topic"),
    ([Message("%RETRY%g", b"a")], "retry topic"),
    ([Message("TBW102", b"a")], "not allowed"),
    ([Message("bad topic", b"a")], "illegal characters"),
    ([Message("T", b"a"), Message("T", b"")], "empty"),
    ([Message("T", b"a"), Message("T", "text")], "must be bytes"),
    ([Message("T", b"x" * (MAX + 1))], "over max_message_size"),
    ([Message("T", b"a", flag=1 << 31)], "32-bit"),
    ([Message("T", b"a", properties={"p": "v" * 40000})], "over the 32767 limit"),
    ([Message("T", b"a", properties={"a\x01b": "c"})], "illegal property name"),
])
def test_bad_batches_are_refused_before_anything_is_sent(messages, match, batch_path):
    with pytest.raises(MessageValidationError, match=match):
        prepare_batch(messages, MAX)


@pytest.mark.parametrize("n", [1, 2, 3, SMALL_BATCH])
def test_a_small_batch_one_by_one_is_the_columns_byte_for_byte(n, monkeypatch):
    got = []
    for small in (0, SMALL_BATCH):  # prepared in columns, then one by one
        monkeypatch.setattr(outgoing, "SMALL_BATCH", small)
        monkeypatch.setattr(ids, "_default", UniqKeyGenerator(ip="10.1.2.3", pid=7, seed=9, clock=lambda: 1.7e9))
        b = prepare_batch((MIXED * 2)[:n], MAX)
        bodies = []
        for records in (0, SMALL_BATCH):  # encoded in columns, then one record at a time
            monkeypatch.setattr(message_batch_codec, "SMALL_BATCH_RECORDS", records)
            bodies.append(encode_batch_body(b.to_message_batch(3)))
        assert bodies[0] == bodies[1]
        assert (b.body is not None) == bool(small)  # the small path's body, encoded as it was prepared
        assert b.body in (None, bodies[0])
        got.append((b.topic, b.bodies, b.properties, np.asarray(b.flags, dtype=np.int32).tolist(),
                    np.asarray(b.record_sizes).tolist(), b.uniq_keys, b.msg_id, bodies[0], b.size))
    assert got[0] == got[1]
    groups = b.split(b.size - 1)  # the small path's lists split as the columns do, each group encoded anew
    assert [m for g in groups for m in g.bodies] == b.bodies and len(groups) == min(n, 2)
    assert all(g.size == len(encode_batch_body(g.to_message_batch(3))) for g in groups)


def test_a_zero_delay_level_is_allowed_in_a_batch():
    wire = _wire(prepare_batch([Message("T", b"a", properties={"DELAY": "0"})], MAX))
    assert wire[0][1]["DELAY"] == "0"


def test_single_message_is_compressed_only_when_that_helps():
    big = b"abc" * 5000
    p = prepare(Message("T", big), MAX, compress_threshold=4096)
    assert p.sys_flag and len(p.body) < len(big)
    noise = np.random.default_rng(1).bytes(5000)
    assert prepare(Message("T", noise), MAX, compress_threshold=4096).body == noise
    assert decode_properties(p.properties)[UNIQ_KEY] == p.uniq_key
