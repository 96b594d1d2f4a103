"""The property string (``name\\x01value\\x02`` pairs): scalar codec, the vectorised scanner
dispatch uses to find TAGS, KEYS and UNIQ_KEY in a whole batch at once, and the send path's
joined properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.properties import (
    JoinedProperties,
    PackedProperties,
    decode_properties,
    encode_properties,
    scan_properties,
)

SEPARATORS = "\x01\x02"
no_sep_text = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters=SEPARATORS), max_size=20)
names = st.one_of(
    st.sampled_from(["TAGS", "KEYS", "KEY", "UNIQ_KEY", "a", "ab", "b", "键"]),
    st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters=SEPARATORS), min_size=1, max_size=10),
)
prop_dicts = st.dictionaries(names, no_sep_text, max_size=6)


@given(props=prop_dicts)
def test_encode_decode_round_trip(props):
    raw = encode_properties(props)
    assert decode_properties(raw) == props
    if props:
        assert raw.endswith(b"\x02"), "RocketMQ 4.x ends every pair with the separator"


def test_encode_matches_rocketmq_layout():
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    assert encode_properties({}) == b""


def test_decode_tolerates_missing_final_separator():
    assert decode_properties(b"TAGS\x01TagA\x02KEYS\x01k1") == {"TAGS": "TagA", "KEYS": "k1"}
    assert decode_properties(b"a\x01") == {"a": ""}
    assert decode_properties(b"") == {}


def test_decode_later_duplicate_wins():
    assert decode_properties(b"a\x011\x02a\x012\x02") == {"a": "2"}


@pytest.mark.parametrize(
    "props",
    [
        {"na\x01me": "v"},
        {"na\x02me": "v"},
        {"": "v"},
        {"name": "va\x01lue"},
        {"name": "va\x02lue"},
    ],
)
def test_encode_rejects_separators_and_empty_names(props):
    with pytest.raises(ValueError, match="illegal"):
        encode_properties(props)


def _layout(raws: list[bytes], gaps: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Property strings in one buffer with arbitrary bytes around them, as in a commitlog."""
    parts, starts, ends, pos = [], [], [], 0
    for raw, gap in zip(raws, gaps, strict=True):
        parts += [gap, raw]
        pos += len(gap)
        starts.append(pos)
        pos += len(raw)
        ends.append(pos)
    parts.append(b"\x02\x01tail")
    buf = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return buf, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


@given(
    rows=st.lists(
        st.tuples(prop_dicts, st.booleans(), st.binary(max_size=6)),
        max_size=25,
    ),
    probe=names,
)
@settings(max_examples=300)
def test_scan_and_packed_find_agree_with_decode(rows, probe):
    raws = []
    for props, drop_last_sep, _ in rows:
        raw = encode_properties(props)
        raws.append(raw[:-1] if drop_last_sep and raw else raw)
    # gap bytes may hold separators: the scanner must only look inside the given ranges
    buf, starts, ends = _layout(raws, [gap for _, _, gap in rows])
    scan = scan_properties(buf, starts, ends)
    packed = PackedProperties.pack(buf, starts, ends)  # the same values, found in the packed copy
    joined = PackedProperties.join(raws, np.array([len(r) for r in raws], dtype=np.int64))  # ... or in the strings
    for name in {probe, "TAGS", "KEYS", "UNIQ_KEY", *(n for p, _, _ in rows for n in p)}:
        for data, (vs, ve) in ((buf, scan.find(name)), (packed.data, packed.find(name)),
                               (joined.data, joined.find(name))):
            assert vs.shape == ve.shape == (len(rows),)
            for i, raw in enumerate(raws):
                expected = decode_properties(raw).get(name)
                if expected is None:
                    assert vs[i] == -1, (name, raw)
                else:
                    assert bytes(data[vs[i] : ve[i]]).decode() == expected, (name, raw)


def test_packed_find_takes_the_last_duplicate_and_runs_to_the_end():
    raws = [b"", b"a\x011\x02a\x012\x02", b"b\x01x\x02a\x01tail", b"ab\x013\x02"]
    buf, starts, ends = _layout(raws, [b"\x02a\x01junk"] * len(raws))  # separators around, outside the ranges
    packed = PackedProperties.pack(buf, starts, ends)
    vs, ve = packed.find("a")
    assert [bytes(packed.data[b:e]) if b >= 0 else None for b, e in zip(vs, ve, strict=True)] == \
        [None, b"2", b"tail", None]


def test_scan_handles_empty_strings_and_duplicates():
    raws = [b"", b"TAGS\x01A\x02", b"", b"a\x011\x02a\x012", b"TAGS\x01"]
    buf, starts, ends = _layout(raws, [b"\x01\x02"] * len(raws))
    scan = scan_properties(buf, starts, ends)
    vs, ve = scan.find("TAGS")
    assert vs[0] == vs[2] == vs[3] == -1
    assert bytes(buf[vs[1] : ve[1]]) == b"A"
    assert ve[4] == vs[4] >= 0  # present, empty value
    vs, ve = scan.find("a")
    assert bytes(buf[vs[3] : ve[3]]) == b"2"


def test_scan_of_no_rows_or_only_empty_strings():
    buf = np.frombuffer(b"xx", dtype=np.uint8)
    assert scan_properties(buf, np.zeros(0), np.zeros(0)).find("TAGS")[0].size == 0
    vs, _ = scan_properties(buf, np.array([0, 1]), np.array([0, 1])).find("TAGS")
    assert vs.tolist() == [-1, -1]


def test_scan_rejects_ranges_out_of_buffer_order():
    buf = np.frombuffer(b"a\x011\x02b\x012\x02", dtype=np.uint8)
    with pytest.raises(ValueError, match="buffer order"):
        scan_properties(buf, np.array([4, 0]), np.array([8, 4]))


@given(rows=st.lists(st.tuples(prop_dicts, st.booleans()), min_size=1, max_size=12), probe=names,
       window=st.tuples(st.integers(0, 12), st.integers(0, 12)))
@settings(max_examples=200)
def test_joined_properties_values_agree_with_decode(rows, probe, window):
    raws = [raw[:-1] if drop and raw else raw for raw, drop in ((encode_properties(p), d) for p, d in rows)]
    joined = JoinedProperties(raws)
    start, stop = min(window), min(max(window), len(raws))
    for name in {probe, *(n for p, _ in rows for n in p)}:
        got_rows, values = joined.values(name, start, stop)
        expected = {i: decode_properties(raws[i])[name] for i in range(start, stop)
                    if name in decode_properties(raws[i])}
        assert dict(zip(got_rows.tolist(), (v.decode() for v in values), strict=True)) == expected
        assert joined.mentions(f"{name}\x01".encode()) == any(f"{name}\x01".encode() in r for r in raws)
