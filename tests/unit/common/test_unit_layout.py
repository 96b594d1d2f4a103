"""The unit layout's one declaration: the drawing agrees with it, the numpy and struct forms derived
from it agree with each other, and the vectorised and one-unit range finders agree on any bytes."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.columns import Columns
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.unit import layout
from spark_mq.common.unit.encode import encode_batch
from spark_mq.common.unit.layout import (
    HEADER_SIZE,
    MIN_UNIT_SIZE,
    UnitRanges,
    header_field,
    header_record,
    header_struct,
    unit_ranges,
    unit_ranges_at,
)

_DRAWN = re.compile(r"^\s+(\d+|\.)\s+(\d+)\s+([A-Z]+)", re.M)


def test_the_drawing_is_the_declaration() -> None:
    drawn = _DRAWN.findall(layout.__doc__ or "")
    fixed = [(int(off), int(size)) for off, size, _ in drawn if off != "."]
    record = header_record()
    declared = [(record.fields[name][1], record[name].itemsize) for name in record.names]
    assert fixed == declared
    assert [layout.field_offset(name) for name in record.names] == [off for off, _ in fixed]  # the struct side's
    assert [int(size) for off, size, _ in drawn if off == "."] == [
        np.dtype(layout.TOPIC_LENGTH_CODE).itemsize, np.dtype(layout.PROPS_LENGTH_CODE).itemsize
    ] == [layout.TOPIC_LENGTH_STRUCT.size, layout.PROPS_LENGTH_STRUCT.size]
    assert HEADER_SIZE == 88 and MIN_UNIT_SIZE == 91


def test_struct_and_numpy_forms_read_the_same_bytes() -> None:
    raw = bytes(np.random.default_rng(1).integers(0, 256, HEADER_SIZE, dtype=np.uint8))
    record = np.frombuffer(raw, dtype=header_record())[0]
    assert header_struct().unpack(raw) == tuple(record[name].item() for name in header_record().names)
    assert header_struct().size == header_record().itemsize
    only = ("queue_id", "store_host")
    packed = header_struct(only).pack(7, b"\x01" * 8)
    assert np.frombuffer(packed, dtype=header_record())[0]["queue_id"] == 7
    assert packed.count(0) == HEADER_SIZE - 4 - 8 + 3  # the other fields are zero pads


def _units(bodies: list[bytes], props: list[bytes], topic: str) -> tuple[bytes, np.ndarray]:
    batch = MessageBatch.of(topic, 3, bodies, props, born_host=pack_host("10.0.0.1", 7))
    encoded = encode_batch(batch, 0, 0, 1, pack_host("10.0.0.2", 9))
    return encoded.data, encoded.physical_offsets


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=20)), min_size=1, max_size=8),
       st.text("abcXYZ_-", min_size=1, max_size=30))
def test_vectorised_and_one_unit_ranges_agree(messages: list[tuple[bytes, bytes]], topic: str) -> None:
    data, starts = _units([b for b, _ in messages], [p for _, p in messages], topic)
    buf = np.frombuffer(data, dtype=np.uint8)
    ranges = unit_ranges(buf, starts, header_field(buf, starts, "body_length"))
    assert ranges.fit(np.append(starts[1:], len(data))).all()
    for i, start in enumerate(starts.tolist()):
        one = unit_ranges_at(data, start, int(ranges.body_end[i] - ranges.body_start[i]))
        assert one == tuple(int(getattr(ranges, name)[i]) for name in
                            ("body_start", "body_end", "topic_start", "topic_end", "props_start", "props_end"))
        assert data[one[0]:one[1]] == messages[i][0]
        assert data[one[2]:one[3]] == topic.encode()
        assert data[one[4]:one[5]] == messages[i][1]


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=MIN_UNIT_SIZE, max_size=400), st.data())
def test_ranges_of_any_bytes_read_inside_the_buffer(raw: bytes, data: st.DataObject) -> None:
    buf = np.frombuffer(raw, dtype=np.uint8)
    starts = np.array(sorted(data.draw(st.sets(st.integers(0, len(raw) - MIN_UNIT_SIZE), min_size=1))),
                      dtype=np.int64)
    ranges = unit_ranges(buf, starts, header_field(buf, starts, "body_length"))  # never raises
    ok = ranges.fit(np.append(starts[1:], len(raw)))
    assert np.all(ranges.props_end[ok] <= len(raw))


def test_columns_take_rows_together() -> None:
    ranges = UnitRanges(*(np.arange(4) + k for k in range(7)))
    taken = ranges.take(np.array([2, 0]))
    assert isinstance(taken, UnitRanges) and isinstance(taken, Columns)
    assert taken.starts.tolist() == [2, 0] and taken.props_end.tolist() == [8, 6]
