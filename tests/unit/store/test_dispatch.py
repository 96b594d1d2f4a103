"""Dispatch of small passes: the scalar path builds exactly the entries of the vectorised one, and
index entries it defers are still found by key queries at once, after a checkpoint and after a
crash (recovery rebuilds them)."""

from __future__ import annotations

import random

import numpy as np
from unit_helpers import crash, reference_java_hash

from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.properties import PackedProperties
from spark_mq.common.unit.decode import decode_message
from spark_mq.store.dispatch import (
    SCALAR_PASS_MESSAGES,
    AppendRecord,
    dispatch_info,
    packed_dispatch_info,
    scalar_dispatch_info,
)
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus

TOPIC = "TopicTest"
PIECES = ["a", "B", " ", "  ", "é", "中", "😀", "\x01", "\x02", "TAGS", "KEYS", "UNIQ_KEY", "x"]


def _random_properties(rng: random.Random) -> bytes:
    """Property strings as a client may send them: duplicates, empty names and values, stray
    separators, multi-byte text, sometimes no trailing separator or invalid UTF-8."""
    parts = []
    for _ in range(rng.randrange(6)):
        name = rng.choice(["TAGS", "KEYS", "UNIQ_KEY", "OTHER", "", "".join(rng.choices(PIECES, k=2))])
        value = "".join(rng.choices(PIECES, k=rng.randrange(10)))
        parts.append(f"{name}\x01{value}" if rng.random() < 0.9 else name)
    raw = ("\x02".join(parts) + ("\x02" if rng.random() < 0.7 else "")).encode()
    return raw + b"\xff\xfe" if rng.random() < 0.1 else raw


def _records(rng: random.Random) -> list[AppendRecord]:
    out, phys = [], 0
    for _ in range(rng.randrange(1, 4)):
        props = [_random_properties(rng) for _ in range(rng.randrange(1, 6))]
        units = [rng.randbytes(rng.randrange(30)) + p for p in props]  # properties end every unit
        sizes = np.array([len(u) for u in units], dtype=np.int64)
        offsets = phys + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        phys += int(sizes.sum())
        out.append(AppendRecord(rng.choice([TOPIC, "主题", "t2"]), 0, 0, offsets, sizes, b"".join(units),
                                np.array([len(p) for p in props], dtype=np.int64), 0))
    return out


def test_scalar_pass_the_put_path_and_a_slaves_pass_equal_the_vectorised_scan():
    rng = random.Random(7)
    for _ in range(1500):
        records = _records(rng)
        sizes = np.concatenate([r.sizes for r in records])
        ends = np.cumsum(sizes)
        starts = ends - np.concatenate([r.property_lengths for r in records])
        prefixes = np.repeat([reference_java_hash(r.topic + "#") for r in records], [r.sizes.size for r in records])
        want = dispatch_info(np.frombuffer(b"".join(r.data for r in records), dtype=np.uint8), starts, ends,
                             prefixes.astype(np.int64))
        scalar = scalar_dispatch_info(records, lambda t: reference_java_hash(t + "#"))
        # a put's pass: the property strings as put, joined, instead of the units
        strings = [r.data[end - length:end] for r in records
                   for end, length in zip(np.cumsum(r.sizes).tolist(), r.property_lengths.tolist(), strict=True)]
        packed = PackedProperties.join(strings, np.concatenate([r.property_lengths for r in records]))
        # a slave's pass: the property strings packed out of the units read back
        units = np.frombuffer(b"".join(r.data for r in records), dtype=np.uint8)
        from_units = PackedProperties.pack(units, starts, ends)
        for got in (scalar, packed_dispatch_info(packed, prefixes.astype(np.int64)),
                    packed_dispatch_info(from_units, prefixes.astype(np.int64))):
            for field in ("tag_codes", "key_rows", "key_hashes"):
                a, b = getattr(got, field), getattr(want, field)
                assert a.dtype == b.dtype and np.array_equal(a, b), (field, [r.data for r in records])


def _keyed(i: int) -> Message:
    return Message(TOPIC, f"body {i}".encode(), tags=f"tag{i % 3}", keys=[f"k{i}", "shared"])


def _bodies(store: MessageStore, key: str) -> set[bytes]:
    return {decode_message(u).body for u in store.query_by_key(TOPIC, key, 1000)}


def test_key_queries_see_messages_whose_index_entries_a_read_deferred(make_store):
    store = make_store()
    for i in range(5):  # single puts, each read at once: small passes, index entries deferred
        store.put_message(_keyed(i), 0)
        res = store.get_messages(TOPIC, 0, i, 32, {reference_java_hash(f"tag{i % 3}")})
        assert res.status == GetStatus.FOUND and res.count == 1
    assert store.dispatch_backlog() == 0
    assert _bodies(store, "k3") == {b"body 3"}
    # a large batch after deferred entries: the index stays in commitlog order, nothing lost
    big = [_keyed(i) for i in range(5, 5 + SCALAR_PASS_MESSAGES + 8)]
    store.put_messages(MessageBatch.from_messages(big, 0))
    store.put_message(_keyed(100), 0)
    assert store.get_messages(TOPIC, 0, 0, 1000).count == len(big) + 6
    assert _bodies(store, "shared") == {f"body {i}".encode() for i in [*range(5 + len(big)), 100]}


def test_deferred_index_entries_survive_a_checkpoint_and_a_crash(make_store, tmp_path):
    store = make_store()
    for i in range(3):
        store.put_message(_keyed(i), 1)
        assert store.get_messages(TOPIC, 1, i, 32).count == 1
    store._checkpointer.take()  # what the flush thread does every second: writes the index first
    assert store._checkpointer.file is not None and store._checkpointer.file.safe_offset == store.commitlog.max_offset()
    for i in range(3, 6):  # dispatched to the consume queue only, then the crash
        store.put_message(_keyed(i), 1)
        assert store.get_messages(TOPIC, 1, i, 32).count == 1
    store.commitlog.flush()
    crash(store)
    again = make_store()
    assert again.recovery is not None and again.recovery.abnormal
    res = again.get_messages(TOPIC, 1, 0, 32)
    starts, sizes = res.unit_starts().tolist(), res.sizes.tolist()
    got = [decode_message(res.data[s : s + n]).body for s, n in zip(starts, sizes, strict=True)]
    assert got == [f"body {i}".encode() for i in range(6)]
    assert _bodies(again, "k4") == {b"body 4"}
    assert _bodies(again, "shared") == {f"body {i}".encode() for i in range(6)}


def test_a_pass_of_puts_to_queues_in_turn_fills_every_queue_in_order(make_store):
    """A vectorised pass writes one run per queue (its puts' rows gathered), whatever the order the
    puts of several queues and topics came in: each queue holds its messages in put order, tags and
    keys included."""
    store = make_store()
    rng = random.Random(3)
    sent: dict[tuple[str, int], list[bytes]] = {}
    keyed: dict[str, tuple[str, bytes]] = {}
    for j in range(40):  # ~800 messages, no read between them: one or two vectorised passes
        topic, queue = rng.choice([TOPIC, "t2"]), rng.randrange(3)
        first = len(sent.get((topic, queue), []))
        msgs = [Message(topic, f"{topic}/{queue}/{first + i}".encode(), tags=f"tag{(first + i) % 3}",
                        keys=[f"key{j}-{i}"]) for i in range(rng.randrange(2, 40))]
        store.put_messages(MessageBatch.from_messages(msgs, queue))
        sent.setdefault((topic, queue), []).extend(m.body for m in msgs)
        keyed.update({f"key{j}-{i}": (topic, m.body) for i, m in enumerate(msgs)})
    for (topic, queue), bodies in sent.items():
        res = store.get_messages(topic, queue, 0, 1000)
        assert res.count == len(bodies)
        got = [decode_message(res.data[s:s + n]) for s, n in zip(res.unit_starts().tolist(), res.sizes.tolist(),
                                                                   strict=True)]
        assert [m.body for m in got] == bodies
        entries = store.get_queue_entries(topic, queue, 0, len(bodies))
        assert entries["tag"].tolist() == [reference_java_hash(f"tag{i % 3}") for i in range(len(bodies))]
    for key, (topic, body) in rng.sample(sorted(keyed.items()), 20):
        assert [decode_message(u).body for u in store.query_by_key(topic, key)] == [body]
