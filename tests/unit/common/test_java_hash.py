"""java_hash must equal Java's ``String.hashCode`` bit for bit: consume queue tag codes and index
key hashes written by us are read by RocketMQ tools, and theirs by us."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_helpers import reference_java_hash

from spark_mq.common.java_hash import PrefixSumHasher, combine, java_hash, java_hashes


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("TagA", 2598919),  # 84*31^3 + 97*31^2 + 103*31 + 65
        ("hello", 99162322),
        ("hello world", 1794106052),
        ("Aa", 2112),  # the classic collision ...
        ("BB", 2112),  # ... with "Aa"
        ("polygenelubricants", -2147483648),  # wraps to Integer.MIN_VALUE
        ("TopicTest#KEY1", -1656969516),  # wraps negative
        ("é", 233),
        ("中文", 646394),  # 0x4E2D*31 + 0x6587
        ("😀", 1772899),  # two UTF-16 units: 0xD83D*31 + 0xDE00
    ],
)
def test_java_hash_matches_java_string_hashcode(s, expected):
    assert java_hash(s) == expected
    assert reference_java_hash(s) == expected


def test_java_hash_of_long_string_stays_a_signed_int():
    s = "x" * 10_000 + "😀" * 100
    h = java_hash(s)
    assert -(2**31) <= h < 2**31
    assert h == reference_java_hash(s)


def _ranges(strings: list[str], gap: bytes = b"") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One buffer holding every string's UTF-8 bytes (separated by ``gap``), plus their ranges."""
    parts, starts, ends, pos = [], [], [], 0
    for s in strings:
        raw = s.encode()
        parts.append(raw + gap)
        starts.append(pos)
        ends.append(pos + len(raw))
        pos += len(raw) + len(gap)
    buf = np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8)
    return buf, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


texts = st.lists(st.text(max_size=40), max_size=30)
ascii_texts = st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=40), max_size=30)


@given(strings=st.one_of(texts, ascii_texts), gap=st.binary(max_size=3))
@settings(max_examples=200)
def test_java_hashes_equals_java_hash_per_range(strings, gap):
    buf, starts, ends = _ranges(strings, gap)
    got = java_hashes(buf, starts, ends)
    assert got.dtype == np.int32
    assert got.tolist() == [reference_java_hash(s) for s in strings]
    assert got.tolist() == [java_hash(s) for s in strings]


@given(prefix=st.text(max_size=20), strings=st.one_of(texts, ascii_texts))
@settings(max_examples=200)
def test_java_hashes_with_one_prefix_hash_equals_hash_of_concatenation(prefix, strings):
    buf, starts, ends = _ranges(strings)
    got = java_hashes(buf, starts, ends, java_hash(prefix))
    assert got.tolist() == [reference_java_hash(prefix + s) for s in strings]


@given(
    pairs=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=30)), max_size=30),
)
@settings(max_examples=200)
def test_java_hashes_with_per_range_prefix_hashes(pairs):
    prefixes = [p for p, _ in pairs]
    strings = [s for _, s in pairs]
    buf, starts, ends = _ranges(strings)
    prefix_hashes = np.array([java_hash(p) for p in prefixes], dtype=np.int64)
    got = java_hashes(buf, starts, ends, prefix_hashes)
    assert got.tolist() == [reference_java_hash(p + s) for p, s in pairs]


def test_java_hashes_of_topic_key_pairs_as_the_index_uses_them():
    topics = ["TopicTest", "TopicTest", "订单", "T"]
    keys = ["KEY1", "😀key", "", "k" * 300]
    buf, starts, ends = _ranges(keys)
    prefix = np.array([java_hash(t + "#") for t in topics])
    got = java_hashes(buf, starts, ends, prefix)
    assert got.tolist() == [reference_java_hash(f"{t}#{k}") for t, k in zip(topics, keys, strict=True)]
    assert got[0] == -1656969516


@given(a=st.text(max_size=30), b=st.text(max_size=30))
def test_combine_equals_hash_of_concatenation(a, b):
    units = len(b.encode("utf-16-be")) // 2
    assert combine(java_hash(a), java_hash(b), units) == reference_java_hash(a + b)


def test_java_hashes_of_no_ranges_is_empty():
    got = java_hashes(np.zeros(4, dtype=np.uint8), np.zeros(0), np.zeros(0))
    assert got.size == 0


@given(
    pairs=st.lists(st.tuples(st.text(alphabet=st.characters(max_codepoint=127), max_size=20),
                             st.text(alphabet=st.characters(max_codepoint=127), max_size=300)), max_size=30),
    gap=st.binary(max_size=3).filter(bytes.isascii),
    one_prefix=st.booleans(),
)
@settings(max_examples=200)
def test_prefix_sum_hasher_equals_java_hashes_on_ascii(pairs, gap, one_prefix):
    """Dispatch hashes packed property strings by prefix sums: every tag code and index key hash
    must be the one Java (and ``java_hashes``) gives, empty ranges and ranges at 0 included."""
    prefixes = [p for p, _ in pairs]
    strings = [s for _, s in pairs]
    buf, starts, ends = _ranges(strings, gap)
    if one_prefix:
        prefix = java_hash("TopicTest#")
        expected = [reference_java_hash("TopicTest#" + s) for s in strings]
    else:
        prefix = np.array([java_hash(p) for p in prefixes], dtype=np.int64)
        expected = [reference_java_hash(p + s) for p, s in pairs]
    hasher = PrefixSumHasher(buf)
    assert hasher.hashes(starts, ends, 0).tolist() == [reference_java_hash(s) for s in strings]
    got = hasher.hashes(starts, ends, prefix)
    assert got.dtype == np.int32
    assert got.tolist() == expected == java_hashes(buf, starts, ends, prefix).tolist()
