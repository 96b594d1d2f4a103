"""What the ``spark_mq`` sink makes of one Arrow batch of rows, in columns (no Row, dict or message
object per row): each row's topic, its routing inputs (``queue_id``, the hash of its first key) and
its encoded message (body, and properties ending with a fresh UNIQ_KEY and ``WAIT=true``, as the
client's batch encoder writes them; :class:`~spark_mq.client.outgoing.PreparedBatch` then carries
them to the wire).

Routing by key, stable and the same for every producer that follows it: a row with no ``queue_id``
and a non-empty first key goes to ``queues[abs(hash(first_key)) % len(queues)]`` where

- ``first_key`` is the first non-empty key: of ``keys`` split on spaces (a string column), or the
  first non-empty element (an array column);
- ``hash`` is Java's ``String.hashCode`` (signed 32-bit, over UTF-16 code units);
- ``queues`` are the topic's writable queues sorted by (broker name, queue id).

That is RocketMQ's ``SelectMessageQueueByHash`` with the key as its argument (Java producers list a
topic's queues in that order), so a Java producer sending ``producer.send(msg, new
SelectMessageQueueByHash(), key)`` puts the same key on the same queue. As Kafka's key routing, the
mapping changes when the topic's queue count does.

Thread-safety: pure functions over immutable Arrow arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.client.ids import uniq_keys
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.java_hash import java_hashes
from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE
from spark_mq.common.properties import (
    KEY_SEPARATOR,
    KEYS,
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PRODUCER_GROUP,
    PROPERTY_SEPARATOR,
    TAGS,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
)
from spark_mq.remoting.message_batch_codec import MIN_RECORD_SIZE

BODY, TOPIC_COL, KEYS_COL, TAGS_COL, PROPERTIES_COL, QUEUE_ID = (
    "body", "topic", "keys", "tags", "properties", "queue_id")
NO_QUEUE = -1  # a row's queue_id / target when it has none
# the streaming query and micro-batch an exactly-once write's messages come from (spark/exactly_once.py)
QUERY_PROPERTY, BATCH_PROPERTY = "SPARK_MQ_QUERY", "SPARK_MQ_BATCH"
# property names the sink sets itself: a `properties` entry with one of these names is dropped
SINK_SET_PROPERTIES = (UNIQ_KEY, WAIT_STORE_MSG_OK, TRANSACTION_PREPARED, PRODUCER_GROUP, TRANSACTION_ID,
                       QUERY_PROPERTY, BATCH_PROPERTY)
_SEPARATORS = f"[{NAME_VALUE_SEPARATOR}{PROPERTY_SEPARATOR}]"
_NV, _PS = NAME_VALUE_SEPARATOR.encode(), PROPERTY_SEPARATOR.encode()
_UNIQ_KEY_LENGTH = 32  # uniq_keys() makes S32 values


@dataclass(frozen=True)
class EncodedRows:
    """One Arrow batch as messages: row i is ``bodies[i]``/``properties[i]`` for ``topics[topic_codes[i]]``."""

    topics: list[str]
    topic_codes: np.ndarray  # int64 per row
    queue_ids: np.ndarray  # int64 per row, NO_QUEUE where none
    key_hashes: np.ndarray  # int32 per row: Java hash of the first key
    has_key: np.ndarray  # bool per row: a non-empty first key
    bodies: pa.Array  # binary
    properties: pa.Array  # binary, encoded
    uniq_keys: np.ndarray  # S32 per row
    record_sizes: np.ndarray  # int64 per row: the message's bytes in a SEND_BATCH_MESSAGE body

    def __len__(self) -> int:
        return len(self.topic_codes)


def encode_rows(batch: pa.RecordBatch, default_topic: str | None, extra: bytes = b"") -> EncodedRows:
    """Validate and encode ``batch`` (the sink's columns; others ignored), every row's properties
    ending with ``extra`` (encoded pairs) before its UNIQ_KEY; MessageValidationError saying which
    column is wrong, before any of the batch is sent."""
    n = batch.num_rows
    names = set(batch.schema.names)
    topics, topic_codes = _topics(batch.column(TOPIC_COL) if TOPIC_COL in names else None, default_topic, n)
    bodies = _bodies(batch.column(BODY))
    keys_text = _keys_text(batch.column(KEYS_COL)) if KEYS_COL in names else _empty_strings(n)
    tags = _non_null_strings(batch.column(TAGS_COL)) if TAGS_COL in names else _empty_strings(n)
    _check_no_separators(keys_text, KEYS_COL)
    _check_no_separators(tags, TAGS_COL)
    has_tags = pc.greater(pc.binary_length(tags), 0)
    has_keys_text = pc.greater(pc.binary_length(keys_text), 0)
    user = (_user_properties(batch.column(PROPERTIES_COL), has_tags, has_keys_text) if PROPERTIES_COL in names
            else _empty_strings(n))
    keys = uniq_keys(n)
    parts = (user, _named(TAGS, tags, has_tags), _named(KEYS, keys_text, has_keys_text))
    properties = pc.binary_join_element_wise(*(p.cast(pa.binary()) for p in parts), pa.scalar(extra, pa.binary()),
                                             _uniq_tail(keys), b"")
    property_lengths = pc.binary_length(properties).to_numpy(zero_copy_only=False).astype(np.int64)
    if n and int(property_lengths.max()) > MAX_PROPERTIES_LENGTH:
        raise MessageValidationError(f"a row's properties are {int(property_lengths.max())} bytes encoded, over the "
                                     f"{MAX_PROPERTIES_LENGTH} limit: use fewer or shorter keys, tags and properties")
    first = first_keys(keys_text)
    has_key = pc.greater(pc.binary_length(first), 0).to_numpy(zero_copy_only=False)
    queue_ids = (pc.fill_null(batch.column(QUEUE_ID).cast(pa.int64()), NO_QUEUE).to_numpy(zero_copy_only=False)
                 if QUEUE_ID in names else np.full(n, NO_QUEUE, dtype=np.int64))
    body_lengths = pc.binary_length(bodies).to_numpy(zero_copy_only=False).astype(np.int64)
    return EncodedRows(topics, topic_codes, queue_ids, java_hash_strings(first), has_key, bodies, properties, keys,
                       MIN_RECORD_SIZE + body_lengths + property_lengths)


def key_queue_index(key_hashes: np.ndarray, queue_count: int) -> np.ndarray:
    """Each key's index into the topic's sorted writable queues: ``abs(hash) % queue_count`` (the
    module doc's rule; int64 so ``abs(-2**31)`` does not overflow as Java's ``Math.abs`` would)."""
    return np.abs(key_hashes.astype(np.int64)) % queue_count


def java_hash_strings(strings: pa.Array) -> np.ndarray:
    """Java ``String.hashCode`` of each value of a string array (0 for null), vectorised over its buffers."""
    strings = strings.cast(pa.large_string())
    n = len(strings)
    _, offsets_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[strings.offset: strings.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    hashes = java_hashes(data, offsets[:-1], offsets[1:])
    return np.where(strings.is_valid().to_numpy(zero_copy_only=False), hashes, 0).astype(np.int32)


def first_keys(keys_text: pa.Array) -> pa.Array:
    """The first non-empty space-separated key of each value ("" when none)."""
    trimmed = pc.utf8_ltrim(keys_text, characters=KEY_SEPARATOR)
    return pc.fill_null(pc.list_element(pc.split_pattern(trimmed, KEY_SEPARATOR, max_splits=1), 0), "")


def _topics(column: pa.Array | None, default_topic: str | None, n: int) -> tuple[list[str], np.ndarray]:
    """The batch's distinct topics and each row's index into them: the ``topic`` option for every
    row when given (it overrides the column, as Kafka's), else the ``topic`` column."""
    if default_topic is not None:
        return [default_topic], np.zeros(n, dtype=np.int64)
    assert column is not None  # validate_sink_schema refused a write with neither
    if column.null_count:
        raise MessageValidationError(f"{column.null_count} row(s) have a null 'topic' and the write has no 'topic' "
                                     f"option: fill the column (e.g. coalesce(col('topic'), lit('<topic>')))")
    column = column.cast(pa.string())
    topics = pc.unique(column)
    return topics.to_pylist(), pc.index_in(column, value_set=topics).to_numpy(zero_copy_only=False).astype(np.int64)


def _bodies(column: pa.Array) -> pa.Array:
    """The bodies as binary; MessageValidationError for a null, empty or oversized one."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
    if column.null_count:
        raise MessageValidationError(f"{column.null_count} row(s) have a null 'body': every message needs a body")
    if len(column):
        lengths = pc.binary_length(column)
        shortest, longest = pc.min_max(lengths).values()
        if shortest.as_py() == 0:
            raise MessageValidationError("a row has an empty 'body': a message body needs at least one byte")
        if longest.as_py() > DEFAULT_MAX_MESSAGE_SIZE:
            raise MessageValidationError(f"a row's body is {longest.as_py()} bytes, over the "
                                         f"{DEFAULT_MAX_MESSAGE_SIZE} limit")
    return column


def _empty_strings(n: int) -> pa.Array:
    return pa.array([""], pa.string()).take(np.zeros(n, dtype=np.int64))


def _non_null_strings(column: pa.Array) -> pa.Array:
    return pc.fill_null(column.cast(pa.string()), "")


def _keys_text(column: pa.Array) -> pa.Array:
    """``keys`` as the KEYS property holds them: a string as it is, an array's non-empty elements
    joined by spaces; "" for none."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return _non_null_strings(column)
    values = column.flatten()
    keep = pc.fill_null(pc.greater(pc.binary_length(values), 0), False)
    lists = _regroup(len(column), pc.list_parent_indices(column), values, keep)
    return pc.binary_join(lists, KEY_SEPARATOR)


def _regroup(n: int, parents: pa.Array, values: pa.Array, keep: pa.Array) -> pa.ListArray:
    """The kept ``values`` as ``n`` lists, value j in list ``parents[j]`` (empty lists where none)."""
    kept_parents = parents.filter(keep).to_numpy(zero_copy_only=False)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(kept_parents, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values.filter(keep))


def _user_properties(column: pa.Array, has_tags: pa.Array, has_keys: pa.Array) -> pa.Array:
    """Each row's ``properties`` map encoded (``name\\x01value\\x02``...), without null values, the
    names the sink sets itself, and TAGS/KEYS where the row's ``tags``/``keys`` column gives them."""
    entries = column.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
    flat = entries.flatten()
    parents = pc.list_parent_indices(entries)
    names, values = flat.field("key"), flat.field("value")
    if len(names) and int(pc.min(pc.binary_length(names)).as_py()) == 0:
        raise MessageValidationError("a 'properties' map has an empty name: a property needs a name")
    _check_no_separators(names, f"{PROPERTIES_COL} (a name)")
    _check_no_separators(pc.fill_null(values, ""), f"{PROPERTIES_COL} (a value)")
    overridden = pc.or_(pc.and_(pc.equal(names, TAGS), has_tags.take(parents)),
                        pc.and_(pc.equal(names, KEYS), has_keys.take(parents)))
    keep = pc.and_(pc.and_(pc.is_valid(values), pc.invert(pc.is_in(names, pa.array(SINK_SET_PROPERTIES)))),
                   pc.invert(overridden))
    encoded = pc.binary_join_element_wise(names, pc.binary_join_element_wise(values, "", PROPERTY_SEPARATOR),
                                          NAME_VALUE_SEPARATOR)
    return pc.binary_join(_regroup(len(column), parents, encoded, keep), "")


def _named(name: str, values: pa.Array, present: pa.Array) -> pa.Array:
    """``name\\x01value\\x02`` where ``present``, "" elsewhere."""
    encoded = pc.binary_join_element_wise(pa.scalar(name), pc.binary_join_element_wise(values, "", PROPERTY_SEPARATOR),
                                          NAME_VALUE_SEPARATOR)
    return pc.if_else(present, encoded, "")


def _uniq_tail(keys: np.ndarray) -> pa.Array:
    """``UNIQ_KEY\\x01<key>\\x02WAIT\\x01true\\x02`` per key, the tail the client's batch encoder writes."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(_UNIQ_KEY_LENGTH), len(keys),
                                                 [None, pa.py_buffer(np.ascontiguousarray(keys).tobytes())])
    head = UNIQ_KEY.encode() + _NV
    tail = _PS + WAIT_STORE_MSG_OK.encode() + _NV + b"true" + _PS
    return pc.binary_join_element_wise(pa.scalar(head), fixed.cast(pa.binary()), pa.scalar(tail), b"")


def _check_no_separators(values: pa.Array, column: str) -> None:
    bad = pc.sum(pc.match_substring_regex(values, _SEPARATORS)).as_py()
    if bad:
        raise MessageValidationError(f"{bad} value(s) of column {column!r} contain \\x01 or \\x02, which RocketMQ's "
                                     f"property encoding reserves: remove them")
