"""``spark_mq.spark.sink_rows`` without a SparkSession: Arrow rows to encoded messages and routing inputs,
checked against the scalar encoders and a Java ``String.hashCode`` written from its definition."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from test_spark_sink_routing import java_string_hash

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.properties import decode_properties
from spark_mq.spark.sink_rows import encode_rows, first_keys, java_hash_strings, key_queue_index

_MAP = pa.map_(pa.string(), pa.string())


def test_key_routing_is_pinned():
    # pinned: a change here moves every key to another queue, for this sink and for other producers
    hashes = java_hash_strings(pa.array(["hello", "polygenelubricants", "order-42", "订单-7"]))
    assert hashes.tolist() == [99162322, -(1 << 31), java_string_hash("order-42"), java_string_hash("订单-7")]
    assert key_queue_index(hashes, 4).tolist() == [2, 0, abs(java_string_hash("order-42")) % 4,
                                                   abs(java_string_hash("订单-7")) % 4]


def test_hashes_match_java_on_random_strings():
    rng = random.Random(7)
    alphabet = "abcXYZ09 -_é中文😀"
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(500)]
    array = pa.array(words).slice(3)  # a sliced array: buffers start before the array
    assert java_hash_strings(array).tolist() == [java_string_hash(w) for w in words[3:]]


def test_first_key():
    got = first_keys(pa.array(["  a b", "x", "", "   ", None])).to_pylist()
    assert got == ["a", "x", "", "", ""]


def test_encoded_properties_match_what_the_row_says():
    batch = pa.record_batch({
        "body": pa.array(["a", "bb", "ccc"]),
        "keys": pa.array([["", None, "k1", "k2"], None, ["solo"]], pa.list_(pa.string())),
        "tags": pa.array(["t", None, ""]),
        "properties": pa.array([{"n": "1", "UNIQ_KEY": "old", "WAIT": "false", "TAGS": "map-tag"}, None,
                                {"KEYS": "map-keys", "gone": None}], _MAP),
        "queue_id": pa.array([None, 2, None], pa.int16()),
        "ignored": pa.array([1.5, 2.5, 3.5]),
    })
    rows = encode_rows(batch, "T")
    props = [decode_properties(p) for p in rows.properties.to_pylist()]
    keys = [k.decode() for k in rows.uniq_keys.tolist()]
    assert props[0] == {"n": "1", "TAGS": "t", "KEYS": "k1 k2", "UNIQ_KEY": keys[0], "WAIT": "true"}
    assert props[1] == {"UNIQ_KEY": keys[1], "WAIT": "true"}
    assert props[2] == {"KEYS": "solo", "UNIQ_KEY": keys[2], "WAIT": "true"}  # the column's keys over the map's
    assert len(set(keys)) == 3
    assert rows.queue_ids.tolist() == [-1, 2, -1]
    assert rows.has_key.tolist() == [True, False, True]
    assert rows.key_hashes[[0, 2]].tolist() == [java_string_hash("k1"), java_string_hash("solo")]
    assert rows.bodies.to_pylist() == [b"a", b"bb", b"ccc"]
    assert rows.topics == ["T"] and rows.topic_codes.tolist() == [0, 0, 0]
    # a SEND_BATCH_MESSAGE record: 22 fixed bytes, the body, the properties
    assert rows.record_sizes.tolist() == [22 + len(b) + len(p) for b, p in
                                          zip(rows.bodies.to_pylist(), rows.properties.to_pylist(), strict=True)]


@pytest.mark.parametrize(("columns", "message"), [
    ({"body": pa.array(["a", None])}, "1 row.s. have a null 'body'"),
    ({"body": pa.array(["a", ""])}, "empty 'body'"),
    ({"body": pa.array(["a"]), "tags": pa.array(["x\x01y"])}, "column 'tags' contain"),
    ({"body": pa.array(["a"]), "properties": pa.array([{"": "v"}], _MAP)}, "empty name"),
    ({"body": pa.array(["a"]), "properties": pa.array([{"k": "v\x02"}], _MAP)}, r"properties \(a value\)"),
    ({"body": pa.array(["a"]), "keys": pa.array(["k" * 40000])}, "over the 32767 limit"),
])
def test_bad_rows_are_refused_with_the_column_named(columns, message):
    with pytest.raises(MessageValidationError, match=message):
        encode_rows(pa.record_batch(columns), "T")


def test_topic_column_codes():
    rows = encode_rows(pa.record_batch({"body": pa.array(["1", "2", "3"]), "topic": pa.array(["B", "A", "B"])}), None)
    assert [rows.topics[c] for c in rows.topic_codes] == ["B", "A", "B"]
    assert np.array_equal(rows.queue_ids, [-1, -1, -1])
