"""What a producer puts on the wire: messages checked by RocketMQ's rules (``Validators``) and
encoded, one at a time (:func:`prepare`) or a whole batch in columns (:func:`prepare_batch`).

Every message gets a UNIQ_KEY (kept if it has one) and ``WAIT=true``, as Java's ``Message``
constructor and ``MessageClientIDSetter`` give it. A single message of at least the compress
threshold is zlib-deflated; a batch never is (RocketMQ does not compress batches).

A batch is validated and encoded with one pass of C-level calls per column (``map`` with
``attrgetter``, numpy): the keys come from ``uniq_keys(n)`` in one numpy call and are appended
to each message's encoded user properties (a batch of plain messages has its property strings
written side by side in one numpy buffer), so it costs well under a microsecond per message
instead of a dict, a key and an object each. A batch of at most ``SMALL_BATCH`` messages (what a
paced producer sends: the few that fell due during the last send) is checked and encoded one
message at a time instead: the same checks, errors and bytes, without numpy's fixed costs (~20 us
a batch, most of a few messages' time), its SEND_BATCH_MESSAGE body encoded right away (once,
whatever the attempts) and its columns kept as lists.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, eq

import numpy as np

from spark_mq.client.ids import UNIQ_KEY_LENGTH, few_uniq_keys, uniq_key, uniq_keys
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.names import AUTO_CREATE_TOPIC, RETRY_GROUP_TOPIC_PREFIX, validate_topic
from spark_mq.common.properties import (
    MAX_PROPERTIES_LENGTH,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    encode_properties_checked,
)
from spark_mq.common.unit.layout import COMPRESSED_FLAG
from spark_mq.remoting.message_batch_codec import MIN_RECORD_SIZE, encode_records

COMPRESS_LEVEL = 5  # RocketMQ's rocketmq.message.compressLevel default
# what follows a batch message's own properties: its UNIQ_KEY, then WAIT (the order a dict gave)
_KEY_HEAD = f"{UNIQ_KEY}\x01".encode()
_KEY_TAIL = f"\x02{WAIT_STORE_MSG_OK}\x01true\x02".encode()
_PLAIN_PROPERTIES_LENGTH = len(_KEY_HEAD) + UNIQ_KEY_LENGTH + len(_KEY_TAIL)
_RESERVED = frozenset({UNIQ_KEY, WAIT_STORE_MSG_OK})
# a message's fields read for a whole batch by C-level maps
_TOPIC, _BODY, _FLAG = attrgetter("topic"), attrgetter("body"), attrgetter("flag")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
SMALL_BATCH = 16  # messages: a batch of at most this many is prepared one message at a time


@dataclass(frozen=True)
class Prepared:
    """One validated message as it goes on the wire (SEND_MESSAGE_V2)."""

    topic: str
    body: bytes
    properties: bytes  # encoded, with UNIQ_KEY and WAIT
    flag: int
    sys_flag: int
    uniq_key: str


@dataclass(frozen=True)
class PreparedBatch:
    """Validated messages of one topic in columns, as they go into SEND_BATCH_MESSAGE bodies."""

    topic: str
    bodies: list[bytes]
    properties: list[bytes]  # encoded, each with its UNIQ_KEY and WAIT
    flags: np.ndarray | list[int]  # int32 (a list for a small batch: no numpy on its path)
    record_sizes: np.ndarray | list[int]  # int64: each message's size inside a batch body
    uniq_keys: list[bytes]  # each message's UNIQ_KEY (ASCII)
    body: bytes | None = None  # the SEND_BATCH_MESSAGE body, encoded once when prepared (a small batch)

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def size(self) -> int:
        """Encoded bytes of the whole batch body."""
        return len(self.body) if self.body is not None else int(np.sum(self.record_sizes))

    def split(self, max_bytes: int) -> list[PreparedBatch]:
        """Consecutive groups of at most ``max_bytes`` encoded (a lone larger message is a group
        of its own), found by binary search on the running size, not per message."""
        n = len(self)
        ends = np.cumsum(self.record_sizes)
        groups: list[PreparedBatch] = []
        start = 0
        while start < n:
            before = int(ends[start - 1]) if start else 0
            stop = max(start + 1, int(np.searchsorted(ends, before + max_bytes, side="right")))
            groups.append(self if start == 0 and stop >= n else self._slice(start, stop))
            start = stop
        return groups

    def _slice(self, start: int, stop: int) -> PreparedBatch:
        return PreparedBatch(self.topic, self.bodies[start:stop], self.properties[start:stop],
                             self.flags[start:stop], self.record_sizes[start:stop], self.uniq_keys[start:stop])

    @property
    def msg_id(self) -> str:
        """The UNIQ_KEYs joined by commas: a batch SendResult's ``msg_id``, as Java's."""
        return b",".join(self.uniq_keys).decode()

    def to_message_batch(self, queue_id: int) -> MessageBatch:
        batch = MessageBatch.of(self.topic, queue_id, self.bodies, self.properties)
        batch.flags = np.asarray(self.flags, dtype=np.int32)
        return batch


def check_topic(topic: str) -> None:
    validate_topic(topic)
    if topic == AUTO_CREATE_TOPIC:
        raise MessageValidationError(f"topic {AUTO_CREATE_TOPIC} is the default topic for auto-creation: "
                                     "sending to it is not allowed")


def _body_error(body: object, topic: str, max_message_size: int) -> MessageValidationError | None:
    if not isinstance(body, bytes | bytearray | memoryview):
        return MessageValidationError(f"message body must be bytes, not {type(body).__name__}")
    if not len(body):
        return MessageValidationError(f"message body for topic {topic} is empty: a body needs at least one byte")
    if len(body) > max_message_size:
        return MessageValidationError(f"message body is {len(body)} bytes, over max_message_size "
                                      f"{max_message_size}: split the message or raise the limit")
    return None


def _check_flag(flag: int) -> None:
    if not INT32_MIN <= flag <= INT32_MAX:
        raise MessageValidationError(f"message flag {flag} does not fit a 32-bit int")


def prepare(msg: Message, max_message_size: int, compress_threshold: int) -> Prepared:
    """Validate ``msg`` and encode what goes on the wire, deflating a large body."""
    if not isinstance(msg, Message):
        raise MessageValidationError(f"expected a spark_mq Message, got {type(msg).__name__}")
    check_topic(msg.topic)
    error = _body_error(msg.body, msg.topic, max_message_size)
    if error is not None:
        raise error
    _check_flag(msg.flag)
    body = bytes(msg.body)
    props = msg.all_properties()
    props.setdefault(UNIQ_KEY, uniq_key())
    props.setdefault(WAIT_STORE_MSG_OK, "true")
    encoded = encode_properties_checked(props)
    sys_flag = 0
    if len(body) >= compress_threshold:
        deflated = zlib.compress(body, COMPRESS_LEVEL)
        if len(deflated) < len(body):  # never send a body that compression made bigger
            body, sys_flag = deflated, COMPRESSED_FLAG
    return Prepared(msg.topic, body, encoded, msg.flag, sys_flag, props[UNIQ_KEY])


def prepare_batch(messages: Sequence[Message], max_message_size: int) -> PreparedBatch:
    """Validate a batch by RocketMQ's rules (one topic, no retry topic, every message storable) and
    encode it in columns. Delay levels are allowed (RocketMQ refuses them in a batch; this broker
    schedules each message by its own level)."""
    messages = list(messages)
    if not messages:
        raise MessageValidationError("a batch needs at least one message")
    if set(map(type, messages)) != {Message} and not all(isinstance(m, Message) for m in messages):
        raise MessageValidationError("every element of a batch must be a spark_mq Message")
    topic = messages[0].topic
    if not all(map(eq, repeat(topic), map(_TOPIC, messages))):
        raise MessageValidationError(f"every message of a batch must have the same topic (the first is {topic})")
    check_topic(topic)
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise MessageValidationError(f"retry topic {topic} is not supported in a batch")
    if len(messages) <= SMALL_BATCH:
        return _prepare_few(messages, topic, max_message_size)

    bodies = list(map(_BODY, messages))
    if set(map(type, bodies)) != {bytes}:
        for b in bodies:
            error = _body_error(b, topic, max_message_size)
            if error is not None:
                raise error
        bodies = [bytes(b) for b in bodies]
    body_lengths = np.fromiter(map(len, bodies), dtype=np.int64, count=len(bodies))
    if int(body_lengths.min()) == 0 or int(body_lengths.max()) > max_message_size:
        i = int(np.flatnonzero((body_lengths == 0) | (body_lengths > max_message_size))[0])
        raise _body_error(bodies[i], topic, max_message_size)  # type: ignore[misc]  # not None: it failed
    flags = np.fromiter(map(_FLAG, messages), dtype=np.int64, count=len(messages))
    if int(flags.min()) < INT32_MIN or int(flags.max()) > INT32_MAX:
        _check_flag(int(flags[(flags < INT32_MIN) | (flags > INT32_MAX)][0]))

    properties, keys, property_lengths = _batch_properties(messages)
    if int(property_lengths.max()) > MAX_PROPERTIES_LENGTH:
        i = int(np.argmax(property_lengths > MAX_PROPERTIES_LENGTH))
        raise _properties_error(i, int(property_lengths[i]))
    return PreparedBatch(topic, bodies, properties, flags.astype(np.int32),
                         MIN_RECORD_SIZE + body_lengths + property_lengths, keys)


def _prepare_few(messages: list[Message], topic: str, max_message_size: int) -> PreparedBatch:
    """``prepare_batch``'s column checks and encoding for a small batch, message by message: the
    same first error, the same PreparedBatch. The usual batch (bytes bodies that fit, flags that
    fit) is checked by a few C-level calls; any doubt goes through the checks one by one."""
    bodies = list(map(_BODY, messages))
    if set(map(type, bodies)) != {bytes} or not all(bodies) or max(map(len, bodies)) > max_message_size:
        for b in bodies:
            error = _body_error(b, topic, max_message_size)
            if error is not None:
                raise error
        bodies = [bytes(b) for b in bodies]
    flags = list(map(_FLAG, messages))
    if min(flags) < INT32_MIN or max(flags) > INT32_MAX:
        for flag in flags:
            _check_flag(flag)
    keys = few_uniq_keys(len(messages))
    properties = _each_properties(messages, keys)
    if max(map(len, properties)) > MAX_PROPERTIES_LENGTH:
        for i, p in enumerate(properties):
            if len(p) > MAX_PROPERTIES_LENGTH:
                raise _properties_error(i, len(p))
    sizes = [MIN_RECORD_SIZE + len(b) + len(p) for b, p in zip(bodies, properties, strict=True)]
    return PreparedBatch(topic, bodies, properties, flags, sizes, keys, encode_records(bodies, properties, flags))


def _properties_error(i: int, length: int) -> MessageValidationError:
    return MessageValidationError(f"message {i} properties are {length} bytes encoded, over "
                                  f"the {MAX_PROPERTIES_LENGTH} limit: use fewer or shorter keys and properties")


def _batch_properties(messages: list[Message]) -> tuple[list[bytes], list[bytes], np.ndarray]:
    """Each message's encoded properties, ending with a fresh UNIQ_KEY and WAIT=true, its key, and
    the properties' lengths.

    When no message has tags, keys, properties, a delay or a deliver time (the common case), the
    strings are written side by side into one numpy buffer, the fresh keys copied in as a column;
    otherwise a plain message costs one concatenation, and one that already names UNIQ_KEY or WAIT
    keeps its own values (``setdefault``, as ``prepare``).
    """
    n = len(messages)
    fresh = uniq_keys(n)
    if not any(m.properties or m.tags or m.keys or m.delay_level or m.deliver_time_ms for m in messages):
        raw = np.empty((n, _PLAIN_PROPERTIES_LENGTH), dtype=np.uint8)
        raw[:] = np.frombuffer(_KEY_HEAD + bytes(UNIQ_KEY_LENGTH) + _KEY_TAIL, dtype=np.uint8)
        raw[:, len(_KEY_HEAD) : len(_KEY_HEAD) + UNIQ_KEY_LENGTH] = fresh.view(np.uint8).reshape(n, UNIQ_KEY_LENGTH)
        # an S item drops trailing NULs: these end with _KEY_TAIL's separator
        return (raw.view(f"S{_PLAIN_PROPERTIES_LENGTH}").reshape(n).tolist(), fresh.tolist(),
                np.full(n, _PLAIN_PROPERTIES_LENGTH, dtype=np.int64))
    keys = fresh.tolist()
    out = _each_properties(messages, keys)
    return out, keys, np.fromiter(map(len, out), dtype=np.int64, count=n)


def _each_properties(messages: list[Message], keys: list[bytes]) -> list[bytes]:
    """Each message's encoded properties ending with its fresh key from ``keys`` and WAIT=true, one
    concatenation for a plain message; a message naming its own UNIQ_KEY keeps it (in ``keys`` too)."""
    out = []
    for i, (m, key) in enumerate(zip(messages, keys, strict=True)):
        if not (m.properties or m.tags or m.keys or m.delay_level or m.deliver_time_ms):
            out.append(_KEY_HEAD + key + _KEY_TAIL)
            continue
        props = m.all_properties()
        if _RESERVED.isdisjoint(props):
            out.append(encode_properties_checked(props) + _KEY_HEAD + key + _KEY_TAIL)
            continue
        keys[i] = props.setdefault(UNIQ_KEY, key.decode()).encode()
        props.setdefault(WAIT_STORE_MSG_OK, "true")
        out.append(encode_properties_checked(props))
    return out
