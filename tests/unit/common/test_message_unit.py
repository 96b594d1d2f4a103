"""The commitlog unit and consume queue entry, checked with a decoder written here from
DESIGN.md's byte layout ("On-disk formats"), not with the project's own decoder."""

from __future__ import annotations

import random
import re
import socket
import struct
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_helpers import reference_java_hash

from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.properties import decode_properties, encode_properties
from spark_mq.common.unit.batch import decode_units
from spark_mq.common.unit.chain import follow_chain, walk_units
from spark_mq.common.unit.decode import decode_message
from spark_mq.common.unit.encode import encode_batch

# -- the test's own parser ---------------------------------------------------------------------
# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG,
# BORNTIMESTAMP, BORNHOST(8), STORETIMESTAMP, STOREHOSTADDRESS(8), RECONSUMETIMES,
# PREPAREDTRANSACTIONOFFSET, BODY length
FIXED = struct.Struct(">iIIiiqqiq8sq8siqi")
MAGIC = 0xDAA320A7
BLANK = 0xCBD43194
CQ_ENTRY = struct.Struct(">qiq")  # commitlog offset, size, tag hash


@dataclass
class Unit:
    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: bytes
    position: int  # where the unit starts in the parsed buffer


def parse_unit(data: bytes, pos: int) -> Unit:
    (total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts, born_host, store_ts, store_host,
     reconsume, prepared, body_len) = FIXED.unpack_from(data, pos)
    assert magic == MAGIC, f"bad magic {magic:#x} at {pos}"
    p = pos + FIXED.size
    body = data[p : p + body_len]
    p += body_len
    topic_len = data[p]
    topic = data[p + 1 : p + 1 + topic_len].decode()
    p += 1 + topic_len
    (props_len,) = struct.unpack_from(">h", data, p)
    props = data[p + 2 : p + 2 + props_len]
    p += 2 + props_len
    assert p - pos == total, f"unit at {pos}: fields add up to {p - pos}, TOTALSIZE says {total}"
    return Unit(total, crc, qid, flag, qoff, phys, sysflag, born_ts, born_host, store_ts, store_host,
                reconsume, prepared, body, topic, props, pos)


def parse_units(data: bytes) -> tuple[list[Unit], int]:
    """Units from the start of ``data`` up to a blank unit or zeros; returns (units, end)."""
    units, pos = [], 0
    while pos + 8 <= len(data):
        size, magic = struct.unpack_from(">iI", data, pos)
        if magic != MAGIC:
            break
        units.append(parse_unit(data, pos))
        pos += size
    return units, pos


# -- the store end to end ----------------------------------------------------------------------
TOPICS = ["TopicA", "Topic_B-2", "%RETRY%group|x"]
TAGS = [None, "TagA", "TagB", "标签", "😀"]


@dataclass
class Sent:
    topic: str
    queue_id: int
    body: bytes
    props: dict[str, str]
    phys: int
    queue_offset: int
    msg_id: str


def _random_messages(rng: random.Random, topic: str, n: int) -> tuple[list[Message], list[str]]:
    msgs, uniq = [], []
    for _ in range(n):
        keys = [f"k{rng.randrange(500)}" for _ in range(rng.randrange(3))]
        props = {"p": str(rng.random())} if rng.random() < 0.5 else {}
        body = rng.randbytes(rng.choice([0, 1, rng.randrange(2000), rng.randrange(9000)]))
        msgs.append(Message(topic, body, tags=rng.choice(TAGS), keys=keys, properties=props, flag=rng.randrange(4)))
        uniq.append(f"U{rng.getrandbits(64):016X}")
    return msgs, uniq


def _store_a_few_thousand(make_store) -> tuple[Path, list[Sent], int, int]:
    rng = random.Random(7)
    store = make_store()
    sent: list[Sent] = []
    t0 = int(time.time() * 1000)
    for round_ in range(60):
        topic = rng.choice(TOPICS)
        qid = rng.randrange(3)
        if round_ % 3 == 0:  # single puts
            msgs, uniq = _random_messages(rng, topic, 5)
            results = [store.put_message(m, qid, u) for m, u in zip(msgs, uniq, strict=True)]
        else:
            msgs, uniq = _random_messages(rng, topic, rng.randrange(1, 120))
            results = [store.put_messages(MessageBatch.from_messages(msgs, qid, uniq))]
        phys = np.concatenate([r.physical_offsets for r in results]).tolist()
        qoffs = [r.queue_offset + i for r in results for i in range(r.count)]
        ids = [i for r in results for i in r.msg_ids()]
        for m, u, p, q, i in zip(msgs, uniq, phys, qoffs, ids, strict=True):
            sent.append(Sent(topic, qid, m.body, {**m.all_properties(), "UNIQ_KEY": u}, p, q, i))
    t1 = int(time.time() * 1000)
    store.shutdown()
    assert len(sent) > 2000
    return store.root, sent, t0, t1


def test_store_files_decode_with_a_parser_written_from_the_layout(make_store):
    root, sent, t0, t1 = _store_a_few_thousand(make_store)
    file_size = 64 * 1024
    store_host = socket.inet_aton("127.0.0.1") + struct.pack(">i", 10911)

    # commitlog: 20-digit names that are the offset of the file's first byte
    files = sorted((root / "commitlog").iterdir())
    assert len(files) > 10
    units: dict[int, Unit] = {}
    for i, f in enumerate(files):
        assert re.fullmatch(r"\d{20}", f.name)
        assert int(f.name) == i * file_size
        data = f.read_bytes()
        assert len(data) == file_size
        found, end = parse_units(data)
        for u in found:
            units[int(f.name) + u.position] = u
        if i < len(files) - 1:
            # the tail that could not hold the next unit is one blank unit covering it exactly
            size, magic = struct.unpack_from(">iI", data, end)
            assert magic == BLANK and size == file_size - end
            next_size = struct.unpack_from(">i", files[i + 1].read_bytes(), 0)[0]
            assert next_size + 8 > file_size - end, "a unit was moved on although it fit"
        else:
            assert not any(data[end:]), "bytes after the last unit"

    assert sorted(units) == sorted(s.phys for s in sent), "every message exactly once, nothing else"
    per_queue: dict[tuple[str, int], list[Unit]] = defaultdict(list)
    for s in sent:
        u = units[s.phys]
        assert u.physical_offset == s.phys  # == file start + position
        assert u.topic == s.topic and u.queue_id == s.queue_id and u.body == s.body
        assert u.queue_offset == s.queue_offset
        assert u.body_crc == zlib.crc32(s.body) & 0x7FFFFFFF
        assert decode_properties(u.properties) == s.props
        assert t0 <= u.store_timestamp <= t1
        assert u.store_host == store_host
        assert u.born_host == socket.inet_aton("127.0.0.1") + bytes(4)
        assert u.prepared_transaction_offset == 0 and u.reconsume_times == 0 and u.sys_flag == 0
        assert s.msg_id == (store_host + struct.pack(">q", s.phys)).hex().upper()
        assert re.fullmatch(r"[0-9A-F]{32}", s.msg_id)
        per_queue[(s.topic, s.queue_id)].append(u)

    # queue offsets are consecutive per queue, in commitlog order
    for q_units in per_queue.values():
        q_units.sort(key=lambda u: u.physical_offset)
        assert [u.queue_offset for u in q_units] == list(range(len(q_units)))

    # consume queues: 20-byte entries pointing at the right unit, with its size and tag hash
    cq_file_size = 20 * 50
    for (topic, qid), q_units in per_queue.items():
        qdir = root / "consumequeue" / topic / str(qid)
        cq_files = sorted(qdir.iterdir())
        assert [f.name for f in cq_files] == [f"{i * cq_file_size:020d}" for i in range(len(cq_files))]
        raw = b"".join(f.read_bytes() for f in cq_files)
        entries = [CQ_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), 20)]
        assert all(e == (0, 0, 0) for e in entries[len(q_units):])
        for u, (phys, size, tag) in zip(q_units, entries, strict=False):
            assert phys == u.physical_offset and size == u.total_size
            tags = decode_properties(u.properties).get("TAGS")
            assert tag == (reference_java_hash(tags) if tags else 0)


# -- encode_batch → walk_units → decode_units / decode_message ----------------------------------
topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True)
prop_text = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02"), max_size=15)
prop_dicts = st.dictionaries(prop_text.filter(bool), prop_text, max_size=4)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def batches(draw) -> MessageBatch:
    n = draw(st.integers(1, 20))
    batch = MessageBatch.of(
        draw(topics),
        draw(st.integers(0, 2**31 - 1)),
        draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n)),
        [encode_properties(p) for p in draw(st.lists(prop_dicts, min_size=n, max_size=n))],
        born_host=pack_host(draw(st.sampled_from(["10.0.0.1", "192.168.255.254"])), draw(st.integers(0, 65535))),
    )
    batch.flags = np.array(draw(st.lists(int32, min_size=n, max_size=n)), dtype=np.int32)
    batch.born_timestamps = np.array(draw(st.lists(int64, min_size=n, max_size=n)), dtype=np.int64)
    # IPv6 host flags are never written: hosts are always stored as IPv4 (8 bytes)
    batch.sys_flags = np.array(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)),
                               dtype=np.int32) & ~0x30
    batch.reconsume_times = np.array(draw(st.lists(int32, min_size=n, max_size=n)), dtype=np.int32)
    return batch


@given(
    batch=batches(),
    physical_offset=st.integers(0, 2**40),
    queue_offset=st.integers(0, 2**40),
    store_ts=st.integers(0, 2**45),
    lead=st.binary(max_size=5),
)
@settings(max_examples=150)
def test_encode_walk_decode_round_trip(batch, physical_offset, queue_offset, store_ts, lead):
    store_host = pack_host("172.16.0.9", 10911)
    enc = encode_batch(batch, physical_offset, queue_offset, store_ts, store_host)
    n = len(batch)
    assert len(enc.data) == int(enc.sizes.sum())
    offsets_in_batch = np.concatenate(([0], np.cumsum(enc.sizes)[:-1]))
    assert enc.physical_offsets.tolist() == (physical_offset + offsets_in_batch).tolist()

    # the test's parser reads exactly what was meant
    mine, end = parse_units(enc.data)
    assert end == len(enc.data) and len(mine) == n

    # walk from an arbitrary position inside a buffer, with a blank unit behind the batch
    data = lead + enc.data + struct.pack(">iI", 8, BLANK)
    walk = walk_units(memoryview(data), len(lead), len(data))
    assert walk.reason == "blank"
    assert walk.end == len(lead) + len(enc.data)
    assert (walk.starts - len(lead)).tolist() == [u.position for u in mine]

    cols = decode_units(np.frombuffer(data, dtype=np.uint8), walk.starts)
    assert cols.header["queue_offset"].tolist() == list(range(queue_offset, queue_offset + n))
    for i, u in enumerate(mine):
        s, e = int(walk.starts[i]), int(walk.starts[i]) + int(enc.sizes[i])
        assert data[cols.body_start[i] : cols.body_end[i]] == batch.bodies[i]
        assert data[cols.topic_start[i] : cols.topic_end[i]] == batch.topic.encode()
        assert data[cols.props_start[i] : cols.props_end[i]] == batch.properties[i]
        m = decode_message(data[s:e])
        expected = {
            "topic": batch.topic,
            "queue_id": batch.queue_id,
            "queue_offset": queue_offset + i,
            "physical_offset": int(enc.physical_offsets[i]),
            "body": batch.bodies[i],
            "properties": decode_properties(batch.properties[i]),
            "flag": int(batch.flags[i]),
            "sys_flag": int(batch.sys_flags[i]),
            "body_crc": zlib.crc32(batch.bodies[i]) & 0x7FFFFFFF,
            "born_timestamp": int(batch.born_timestamps[i]),
            "born_host": batch.born_host,
            "store_timestamp": store_ts,
            "store_host": store_host,
            "reconsume_times": int(batch.reconsume_times[i]),
        }
        assert {k: getattr(m, k) for k in expected} == expected
        # and the independent parser agrees field for field
        assert (u.topic, u.queue_id, u.queue_offset, u.physical_offset, u.body, u.flag, u.sys_flag,
                u.body_crc, u.born_timestamp, u.born_host, u.store_timestamp, u.store_host,
                u.reconsume_times, u.prepared_transaction_offset) == (
            m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.body, m.flag, m.sys_flag,
            m.body_crc, m.born_timestamp, m.born_host, m.store_timestamp, m.store_host,
            m.reconsume_times, 0)


def _three_units() -> bytes:
    batch = MessageBatch.of("T", 0, [b"one", b"two", b"three"], [b"TAGS\x01a\x02"] * 3)
    return encode_batch(batch, 0, 0, 1, pack_host("127.0.0.1", 1)).data


def test_walk_stops_at_a_unit_whose_body_fails_its_crc():
    data = bytearray(_three_units())
    starts = walk_units(memoryview(bytes(data)), 0, len(data)).starts.tolist()
    data[starts[1] + FIXED.size] ^= 0xFF  # flip a body byte of the second unit
    walk = walk_units(memoryview(bytes(data)), 0, len(data))
    assert walk.starts.tolist() == starts[:1]
    assert walk.end == starts[1]
    assert "CRC" in walk.reason
    # without CRC checks the torn body is not noticed
    assert walk_units(memoryview(bytes(data)), 0, len(data), check_crc=False).starts.tolist() == starts


def test_walk_stops_at_a_torn_tail_and_at_zeros():
    data = _three_units()
    starts = walk_units(memoryview(data), 0, len(data)).starts.tolist()
    torn = walk_units(memoryview(data[:-1]), 0, len(data) - 1)
    assert torn.starts.tolist() == starts[:2] and torn.end == starts[2]
    padded = data + bytes(64)
    zero = walk_units(memoryview(padded), 0, len(padded))
    assert zero.reason == "zero" and zero.end == len(data) and zero.starts.tolist() == starts


def test_walk_in_chunks_with_max_units():
    data = _three_units()
    first = walk_units(memoryview(data), 0, len(data), max_units=2)
    assert first.reason == "max" and first.starts.size == 2
    rest = walk_units(memoryview(data), first.end, len(data), max_units=2)
    assert rest.starts.size == 1 and rest.end == len(data) and rest.reason == "end"


def _units_with_fake_heads(n: int, seed: int) -> bytes:
    """``n`` units whose bodies hold what looks like unit heads (the message magic with a size
    that fits): alone, in chains of fakes, and leading exactly to the next real unit."""
    rng = random.Random(seed)
    bodies = []
    for i in range(n):
        body = bytearray(rng.randbytes(rng.randrange(0, 400)))
        if i % 3 == 0 and len(body) >= 40:
            at = rng.randrange(0, len(body) - 24)
            fake_size = rng.choice([95, 8, rng.randrange(95, 5000)])
            body[at : at + 8] = struct.pack(">iI", fake_size, MAGIC)
            body[at + fake_size : at + fake_size + 8] = struct.pack(">iI", 200, MAGIC)[: len(body) - at - fake_size]
        bodies.append(bytes(body))
    batch = MessageBatch.of("FakeHeads", 1, bodies, [b"TAGS\x01a\x02"] * n)
    data = bytearray(encode_batch(batch, 0, 0, 1, pack_host("127.0.0.1", 1)).data)
    # a body that leads to the next real unit: its fake size is the distance to it
    units, _ = parse_units(bytes(data))
    for u in units[1::7]:
        if len(u.body) >= 8:
            at = u.position + FIXED.size
            data[at : at + 8] = struct.pack(">iI", u.position + u.total_size - at, MAGIC)
    return bytes(data)


def test_follow_chain_in_bulk_finds_the_units_a_step_per_unit_finds():
    """follow_chain links long stretches in bulk from every offset holding the magic: bodies
    holding fake heads must not change which units it finds, where it ends, or why."""
    data = _units_with_fake_heads(12_000, seed=7)  # ~2.6 MB: the bulk path
    units, end = parse_units(data)
    expected = [u.position for u in units]
    whole = follow_chain(memoryview(data + struct.pack(">iI", 8, BLANK)), 0, len(data) + 8)
    assert whole.starts.tolist() == expected and whole.end == end == len(data) and whole.reason == "blank"
    for cut, reason in ((len(data) - 3, "does not fit"), (len(data), "end")):
        part = follow_chain(memoryview(data), 0, cut)
        assert part.starts.tolist() == (expected if reason == "end" else expected[:-1]) and reason in part.reason
    broken = bytearray(data)
    broken[expected[9000] + 4] ^= 0x01  # a damaged magic ends the chain there
    walk = follow_chain(memoryview(bytes(broken)), expected[3], len(data))
    assert walk.starts.tolist() == expected[3:9000] and walk.end == expected[9000] and walk.reason == "bad magic"
    first = follow_chain(memoryview(data), 0, len(data), max_units=5_000)
    rest = follow_chain(memoryview(data), first.end, len(data))
    assert first.reason == "max" and first.starts.tolist() + rest.starts.tolist() == expected
