"""The vectorised Arrow decoder against the slow path: every column of every row must equal what
``decode_message`` gives for that unit alone."""

from __future__ import annotations

import struct
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.arrow import decoder
from spark_mq.arrow.decoder import decode_units_to_arrow
from spark_mq.arrow.schema import SCHEMA, to_utc_schema, utc_schema
from spark_mq.common.errors import BatchBodyError
from spark_mq.common.message import MessageBatch, pack_host, unpack_host
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import KEYS, TAGS, UNIQ_KEY, encode_properties
from spark_mq.common.unit import native
from spark_mq.common.unit.decode import decode_message
from spark_mq.common.unit.encode import encode_batch
from spark_mq.common.unit.layout import COMPRESSED_FLAG, MESSAGE_MAGIC, field_offset
from spark_mq.remoting.message_batch_codec import split_pull_body

BROKER = "broker-a"
SCHEMA_TEXT = (
    "topic string, broker_name string, queue_id int32, queue_offset int64, commitlog_offset int64, msg_id string, "
    "uniq_key string, keys string, tags string, properties map<string,string>, body binary, "
    "born_timestamp timestamp(ms), store_timestamp timestamp(ms), born_host string, store_host string, "
    "reconsume_times int32, sys_flag int32, flag int32"
)


def reference_rows(data: bytes) -> list[dict]:
    """The slow path: each unit decoded on its own, then mapped to the schema's columns."""
    starts = split_pull_body(data).tolist()
    ends = [*starts[1:], len(data)]
    rows = []
    for s, e in zip(starts, ends, strict=True):
        m = decode_message(data[s:e])
        rows.append({
            "topic": m.topic, "broker_name": BROKER, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.physical_offset, "msg_id": offset_msg_id(m.store_host, m.physical_offset),
            "uniq_key": m.properties.get(UNIQ_KEY), "keys": m.properties.get(KEYS), "tags": m.properties.get(TAGS),
            "properties": m.properties, "body": m.body, "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp, "born_host": unpack_host(m.born_host),
            "store_host": unpack_host(m.store_host), "reconsume_times": m.reconsume_times,
            "sys_flag": m.sys_flag, "flag": m.flag,
        })
    return rows


def arrow_rows(batch: pa.RecordBatch) -> list[dict]:
    """Rows of the decoded batch with maps as dicts and timestamps as epoch milliseconds."""
    cols = {name: batch.column(name) for name in batch.schema.names}
    for ts in ("born_timestamp", "store_timestamp"):
        cols[ts] = cols[ts].cast(pa.int64())
    rows = pa.RecordBatch.from_pydict(cols).to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
    return rows


text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=12)
prop_names = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=8)


@st.composite
def messages(draw):
    body = draw(st.binary(max_size=300))
    compressed = draw(st.booleans())
    props = draw(st.dictionaries(prop_names, text, max_size=4))
    for name in (TAGS, KEYS, UNIQ_KEY):
        if draw(st.booleans()):
            props[name] = draw(text)
    return (zlib.compress(body) if compressed else body), compressed, props


@st.composite
def pull_bodies(draw):
    """Several batches (topics, queues, hosts, flags, timestamps) encoded back to back."""
    parts, pos = [], draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(1, 4))):
        msgs = draw(st.lists(messages(), min_size=1, max_size=8))
        topic = draw(st.text("abcXYZ019_-%|", min_size=1, max_size=20))
        batch = MessageBatch.of(topic, draw(st.integers(0, 15)), [m[0] for m in msgs],
                                [encode_properties(m[2]) for m in msgs], born_timestamp=draw(st.integers(0, 1 << 42)),
                                born_host=pack_host(draw(st.sampled_from(["127.0.0.1", "10.1.22.233", "0.0.0.0"])),
                                                    draw(st.integers(-(1 << 31), (1 << 31) - 1))))
        n = len(msgs)
        batch.sys_flags[:] = [COMPRESSED_FLAG if m[1] else 0 for m in msgs]
        batch.flags[:] = draw(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=n, max_size=n))
        batch.reconsume_times[:] = draw(st.integers(0, 16))
        store_host = pack_host(draw(st.sampled_from(["192.168.0.1", "10.0.0.255"])), draw(st.integers(0, 65535)))
        enc = encode_batch(batch, pos, draw(st.integers(0, 1 << 40)), draw(st.integers(0, 1 << 42)), store_host)
        parts.append(enc.data)
        pos += len(enc.data)
    return b"".join(parts)


def test_schema_is_designs():
    assert ", ".join(f"{f.name} {_sql(f.type)}" for f in SCHEMA) == SCHEMA_TEXT


def _sql(t: pa.DataType) -> str:
    if pa.types.is_map(t):
        return f"map<{_sql(t.key_type)},{_sql(t.item_type)}>"
    return {pa.timestamp("ms"): "timestamp(ms)", pa.binary(): "binary", pa.string(): "string"}.get(t, str(t))


@settings(max_examples=150)
@given(pull_bodies())
def test_every_column_equals_the_slow_path(data):
    batch = decode_units_to_arrow(data, broker_name=BROKER)
    assert batch.schema == SCHEMA
    assert arrow_rows(batch) == reference_rows(data)


@settings(max_examples=50)
@given(pull_bodies())
def test_given_starts_and_numpy_buffer_decode_the_same(data):
    starts = split_pull_body(data)
    expected = decode_units_to_arrow(data, broker_name=BROKER)
    assert decode_units_to_arrow(np.frombuffer(data, dtype=np.uint8), starts, broker_name=BROKER).equals(expected)
    # a subset of the units (as the consume queue would give for one queue)
    sub = starts[::2]
    got = decode_units_to_arrow(memoryview(data), sub, broker_name=BROKER)
    assert got.equals(expected.take(pa.array(np.arange(0, starts.size, 2))))


@settings(max_examples=50)
@given(pull_bodies(), st.lists(st.sampled_from(SCHEMA.names), min_size=1, max_size=6, unique=True))
def test_pruned_columns_equal_those_of_the_full_decode(data, columns):
    got = decode_units_to_arrow(data, broker_name=BROKER, columns=columns)
    assert got.schema.names == columns
    assert got.equals(decode_units_to_arrow(data, broker_name=BROKER).select(columns))


@settings(max_examples=50)
@given(pull_bodies(), st.lists(st.sampled_from(SCHEMA.names), min_size=1, max_size=6, unique=True))
def test_utc_decode_is_the_stored_form_cast_to_utc(data, columns):
    """``utc=True`` (what a Spark read asks for) gives the stored form's batch in UTC_SCHEMA's types."""
    for cols in (SCHEMA.names, columns):
        got = decode_units_to_arrow(data, broker_name=BROKER, columns=cols, utc=True)
        assert got.schema == utc_schema(cols)
        assert got.equals(to_utc_schema(decode_units_to_arrow(data, broker_name=BROKER, columns=cols), got.schema))


def test_pruned_decode_builds_only_the_columns_asked_for(monkeypatch):
    """A read of body and offsets never splits the properties (the costliest part of a full decode)."""
    data = encode_batch(MessageBatch.of("T", 1, [b"a", b"b"], [encode_properties({TAGS: "x"})] * 2), 0, 0, 0,
                        pack_host("127.0.0.1", 10911)).data

    def refuse(*_args):
        raise AssertionError("properties split for a read that wants none of them")

    monkeypatch.setattr(decoder, "_property_pairs", refuse)
    monkeypatch.setattr(decoder, "_native_pairs", refuse)
    got = decode_units_to_arrow(data, broker_name=BROKER, columns=["body", "queue_offset"])
    assert got.to_pydict() == {"body": [b"a", b"b"], "queue_offset": [0, 1]}
    with pytest.raises(AssertionError, match="properties split"):
        decode_units_to_arrow(data, broker_name=BROKER, columns=["tags"])


@pytest.mark.skipif(native.PROPERTY_PAIRS is None, reason="the native library is not built")
@settings(max_examples=60, deadline=None)
@given(data=pull_bodies())
def test_native_and_numpy_paths_decode_the_same(data):
    """The native unit walk and property split (the default) give what the numpy paths give."""
    fast = decode_units_to_arrow(data, broker_name=BROKER)
    with _numpy_paths():
        assert decode_units_to_arrow(data, broker_name=BROKER).equals(fast)


NATIVE_DECODER_STEPS = ("PULL_UNITS", "PROPERTY_PAIRS", "HEADER_STRINGS", "GATHER_RANGES")


@contextmanager
def _numpy_paths():
    """The decoder without its native steps (as without the library) for the block."""
    with pytest.MonkeyPatch.context() as m:
        for name in NATIVE_DECODER_STEPS:
            m.setattr(native, name, None)
        yield


def _decoded_or_error(data: bytes) -> pa.RecordBatch | str:
    try:
        return decode_units_to_arrow(data, broker_name=BROKER)
    except BatchBodyError as e:
        return f"BatchBodyError: {e}"


@pytest.mark.skipif(native.PULL_UNITS is None, reason="the native library is not built")
@settings(max_examples=40, deadline=None)
@given(data=pull_bodies(), at=st.integers(0, 1 << 20), value=st.integers(0, 255), cut=st.integers(0, 3))
def test_native_and_numpy_walks_agree_on_damaged_bodies(data, at, value, cut):
    """A byte changed in a length field (or anywhere) and the body maybe cut short: the native unit pass decodes
    what the numpy walk decodes, or both refuse the body with the same BatchBodyError."""
    damaged = bytearray(data[: len(data) - cut])
    starts = split_pull_body(data)
    unit = int(starts[at % starts.size])
    damaged[min(unit + (0, 3, 87)[at % 3], len(damaged) - 1)] = value  # TOTALSIZE, its low byte, BODY's length
    fast = _decoded_or_error(bytes(damaged))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(native, "PULL_UNITS", None)
        slow = _decoded_or_error(bytes(damaged))
    assert fast == slow if isinstance(slow, str) else slow.equals(fast)


@pytest.mark.skipif(native.PROPERTY_PAIRS is None, reason="the native library is not built")
def test_native_split_of_odd_property_strings():
    """Pieces without a separator, empty names, a value holding NAME_VALUE_SEPARATOR, repeated picked names and
    strings without the final separator split as the numpy path splits them."""
    odd = [b"a\x01b\x02\x01x\x02nosep\x02TAGS\x01t1\x02TAGS\x01t2\x01more\x02", b"KEYS\x01k\x02c\x01\x01d",
           b"", b"\x02\x02UNIQ_KEY\x01u", b"\x00\x01z\x02"]
    data = encode_batch(MessageBatch.of("T", 1, [b"x"] * len(odd), odd), 0, 0, 0, pack_host("127.0.0.1", 1)).data
    fast = decode_units_to_arrow(data, broker_name=BROKER)
    assert fast.column("tags").to_pylist() == ["t2\x01more", None, None, None, None]
    with _numpy_paths():
        assert decode_units_to_arrow(data, broker_name=BROKER).equals(fast)
    assert arrow_rows(fast) == reference_rows(data)


@pytest.mark.skipif(native.PROPERTY_PAIRS is None, reason="the native library is not built")
@settings(max_examples=150, deadline=None)
@given(strings=st.lists(st.lists(st.sampled_from([b"\x00", b"\x01", b"\x02", b"a", b"TAGS", b"KEYS", b"UNIQ_KEY",
                                                  b"0123456789abcdef"]), max_size=12).map(b"".join),
                        min_size=1, max_size=6))
def test_native_split_of_any_property_bytes(strings):
    """Property strings of separators, NUL bytes, picked names and runs either side of 8 bytes (the native split
    copies 8 bytes a step) give the numpy path's columns, with the picked columns' nulls where it has them."""
    data = encode_batch(MessageBatch.of("T", 1, [b"x"] * len(strings), strings), 0, 0, 0,
                        pack_host("127.0.0.1", 1)).data
    columns = ["properties", "tags", "keys", "uniq_key"]
    fast = decode_units_to_arrow(data, broker_name=BROKER, columns=columns)
    with _numpy_paths():
        slow = decode_units_to_arrow(data, broker_name=BROKER, columns=columns)
    assert slow.equals(fast)
    assert [fast.column(c).null_count for c in columns] == [slow.column(c).null_count for c in columns]


def test_unknown_column_is_refused():
    data = encode_batch(MessageBatch.of("T", 1, [b"a"], [b""]), 0, 0, 0, pack_host("127.0.0.1", 10911)).data
    with pytest.raises(KeyError):
        decode_units_to_arrow(data, broker_name=BROKER, columns=["value"])


def test_properties_without_final_separator_and_odd_pairs():
    """RocketMQ 5 omits the last separator; a value holding a second name/value separator and
    pieces without a name are split exactly as decode_properties splits them."""
    raws = [b"TAGS\x01a\x02KEYS\x01k1 k2", b"", b"x\x01y\x01z\x02\x01novalue\x02noname\x02UNIQ_KEY\x01u",
            b"TAGS\x01b\x02"]
    batch = MessageBatch.of("T", 0, [b"1", b"", b"3", b"4"], raws)
    data = encode_batch(batch, 0, 0, 1, pack_host("1.2.3.4", 5)).data
    assert arrow_rows(decode_units_to_arrow(data, broker_name=BROKER)) == reference_rows(data)


def test_terminated_properties_with_odd_pairs():
    """Every message ends with the property separator (RocketMQ 4) but its pairs are not plain
    name/value pairs: a second name/value separator, pieces without one or without a name, NULs."""
    raws = [b"x\x01y\x01z\x02\x01novalue\x02noname\x02UNIQ_KEY\x01u\x02", b"TAGS\x01a\x00b\x02", b"",
            b"KEYS\x01k\x02\x02\x02", b"\x00n\x01v\x02"]
    batch = MessageBatch.of("T", 0, [b"1", b"2", b"3", b"4", b"5"], raws)
    data = encode_batch(batch, 0, 0, 1, pack_host("1.2.3.4", 5)).data
    assert arrow_rows(decode_units_to_arrow(data, broker_name=BROKER)) == reference_rows(data)


def test_message_magic_inside_bodies_is_not_taken_for_a_unit():
    """The walk looks for the magic code: bodies holding it (anywhere, even with a plausible size
    before it) must not split a unit."""
    magic = struct.pack(">i", MESSAGE_MAGIC)
    bodies = [magic, b"ab" + magic + b"cd", struct.pack(">i", 97) + magic + b"x" * 200, b"plain"]
    data = encode_batch(MessageBatch.of("T", 1, bodies), 0, 0, 1, pack_host("1.2.3.4", 5)).data
    batch = decode_units_to_arrow(data, broker_name=BROKER)
    assert batch.column("body").to_pylist() == bodies
    assert arrow_rows(batch) == reference_rows(data)


def test_inconsistent_unit_lengths_raise_batch_body_error():
    """A whole TOTALSIZE chain whose unit claims a longer body than it holds is a corrupt body."""
    data = bytearray(encode_batch(MessageBatch.of("T", 0, [b"abc", b"def"]), 0, 0, 1, pack_host("1.2.3.4", 5)).data)
    struct.pack_into(">i", data, field_offset("body_length"), 4)
    with pytest.raises(BatchBodyError, match="inconsistent lengths"):
        decode_units_to_arrow(bytes(data), broker_name=BROKER)


def test_duplicate_property_name_takes_the_last():
    batch = MessageBatch.of("T", 0, [b"b"], [b"TAGS\x01first\x02TAGS\x01second\x02"])
    data = encode_batch(batch, 0, 0, 1, pack_host("1.2.3.4", 5)).data
    assert decode_units_to_arrow(data, broker_name=BROKER).column("tags").to_pylist() == ["second"]


def test_flagged_body_that_is_not_zlib_is_returned_as_stored():
    batch = MessageBatch.of("T", 0, [b"not zlib", zlib.compress(b"yes")])
    batch.sys_flags[:] = COMPRESSED_FLAG
    data = encode_batch(batch, 0, 0, 1, pack_host("1.2.3.4", 5)).data
    assert decode_units_to_arrow(data, broker_name=BROKER).column("body").to_pylist() == [b"not zlib", b"yes"]


def test_empty_body_gives_empty_batch_and_torn_body_raises():
    empty = decode_units_to_arrow(b"", broker_name=BROKER)
    assert empty.num_rows == 0 and empty.schema == SCHEMA
    data = encode_batch(MessageBatch.of("T", 0, [b"abc"]), 0, 0, 1, pack_host("1.2.3.4", 5)).data
    with pytest.raises(BatchBodyError):
        decode_units_to_arrow(data[:-1], broker_name=BROKER)
    with pytest.raises(ValueError):
        decode_units_to_arrow(data, np.array([len(data) - 10]), broker_name=BROKER)


def test_hosts_format_like_unpack_host_for_many_distinct_hosts():
    rng = np.random.default_rng(7)
    parts, pos = [], 0
    for _ in range(200):
        ip = ".".join(str(int(b)) for b in rng.integers(0, 256, 4))
        port = int(rng.integers(-(1 << 31), 1 << 31))
        enc = encode_batch(MessageBatch.of("T", 0, [b"x"], born_host=pack_host(ip, port)), pos, 0, 1,
                           pack_host(ip, port & 0xFFFF))
        parts.append(enc.data)
        pos += len(enc.data)
    data = b"".join(parts)
    decoded = decode_units_to_arrow(data, broker_name=BROKER)
    assert arrow_rows(decoded) == reference_rows(data)
    with _numpy_paths():
        assert decode_units_to_arrow(data, broker_name=BROKER).equals(decoded)


def test_decodes_a_million_messages():
    """A million units (the benchmark's body, benchmarks/arrow_decode.py) decode to a million rows,
    each at its own commitlog and queue offset. How fast is the benchmark's to measure, not a
    timed unit test's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from arrow_decode import build_pull_body

    messages, queues = 1_000_000, 4
    data = build_pull_body(messages, queues=queues)
    batch = decode_units_to_arrow(data, broker_name=BROKER)  # walking the body included
    assert batch.num_rows == messages
    assert np.array_equal(batch.column("commitlog_offset").to_numpy(), split_pull_body(data))
    assert np.array_equal(batch.column("queue_offset").to_numpy(), np.arange(messages) // queues)


def test_port_is_signed_like_unpack_host():
    raw = pack_host("9.8.7.6", 0)[:4] + struct.pack(">i", -1)
    enc = encode_batch(MessageBatch.of("T", 0, [b"x"], born_host=raw), 0, 0, 1, raw)
    assert decode_units_to_arrow(enc.data, broker_name=BROKER).column("born_host").to_pylist() == ["9.8.7.6:-1"]
