"""The message model: one ``Message`` at the API edge, a columnar ``MessageBatch`` inside.

A batch is what the store appends in one call: one topic, one queue, many messages. Its
columns are numpy arrays and lists of ``bytes`` built by C-level calls, so encoding never
walks messages in Python bytecode.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.names import validate_topic
from spark_mq.common.one_row import one_row
from spark_mq.common.properties import (
    DELAY,
    KEY_SEPARATOR,
    KEYS,
    MAX_PROPERTIES_LENGTH,
    TAGS,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    encode_properties,
)

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
FEW_MESSAGES = 16  # up to this many, a batch's per-message lengths are checked without numpy (its fixed costs)
# topic names found valid, so that a put checks its topic's characters once, not every time (a
# regular expression: a tenth of a small batch's validation); bounded against a client inventing names
_VALID_TOPICS: set[str] = set()
_VALID_TOPICS_KEPT = 65_536


def pack_host(host: str, port: int) -> bytes:
    """IPv4 address and port as the 8 bytes RocketMQ stores for born/store host."""
    return socket.inet_aton(host) + struct.pack(">i", port)


def unpack_host(raw: bytes) -> str:
    return f"{socket.inet_ntoa(raw[:4])}:{struct.unpack('>i', raw[4:8])[0]}"


@lazy_dataclass
class Message(LazyDataclass):
    """One message as an application sees it."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0  # > 0: delivered after that level's delay (the broker's messageDelayLevel)
    deliver_time_ms: int = 0  # > 0: a timer message, delivered at this epoch ms (Java's setDeliverTimeMs)

    def all_properties(self) -> dict[str, str]:
        """User properties plus TAGS, KEYS, DELAY and TIMER_DELIVER_MS in RocketMQ's reserved names."""
        props = dict(self.properties)
        if self.delay_level > 0:
            props[DELAY] = str(self.delay_level)
        if self.deliver_time_ms > 0:
            props[TIMER_DELIVER_MS] = str(self.deliver_time_ms)
        if self.tags:
            props[TAGS] = self.tags
        if self.keys:
            keys = [self.keys] if isinstance(self.keys, str) else list(self.keys)
            props[KEYS] = KEY_SEPARATOR.join(keys)
        return props


class _Lengths:
    """A batch's byte lengths (int64) of the list column ``column``, counted at first use and kept in the
    instance, a plain attribute from then on (or set by a decoder that has them): ``functools.cached_property``
    without its lock, which costs a fresh batch ~0.7 µs a column on CPython 3.11 (every put's); a batch is
    built and read by one thread."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, batch: MessageBatch | None, owner: type | None = None) -> Any:
        if batch is None:
            return self
        values = getattr(batch, self.column)
        lengths = (one_row(len(values[0]), np.int64) if len(values) == 1  # a lone message's: shared, read-only
                   else np.fromiter(map(len, values), dtype=np.int64, count=len(values)))
        batch.__dict__[self.name] = lengths
        return lengths


@lazy_dataclass
class MessageBatch(LazyDataclass):
    """Messages of one topic bound for one queue, in columns.

    ``properties`` holds each message's already-encoded property string.
    """

    topic: str
    queue_id: int
    bodies: list[bytes]
    properties: list[bytes]
    flags: np.ndarray
    born_timestamps: np.ndarray
    sys_flags: np.ndarray
    reconsume_times: np.ndarray
    born_host: bytes = field(default=pack_host("127.0.0.1", 0))

    def __len__(self) -> int:
        return len(self.bodies)

    body_lengths = _Lengths("bodies")
    property_lengths = _Lengths("properties")

    @classmethod
    def of(
        cls,
        topic: str,
        queue_id: int,
        bodies: list[bytes],
        properties: list[bytes] | None = None,
        born_timestamp: int | None = None,
        born_host: bytes | None = None,
    ) -> MessageBatch:
        """A batch from bodies and encoded property strings, with default flags."""
        n = len(bodies)
        ts = int(time.time() * 1000) if born_timestamp is None else born_timestamp
        return cls(
            topic=topic,
            queue_id=queue_id,
            bodies=bodies,
            properties=properties if properties is not None else [b""] * n,
            flags=np.zeros(n, dtype=np.int32),
            born_timestamps=np.full(n, ts, dtype=np.int64),
            sys_flags=np.zeros(n, dtype=np.int32),
            reconsume_times=np.zeros(n, dtype=np.int32),
            born_host=born_host or pack_host("127.0.0.1", 0),
        )

    @classmethod
    def from_messages(cls, messages: Sequence[Message], queue_id: int, uniq_keys: Sequence[str] | None = None):
        """Columns from Message objects (the API edge); all must share one topic."""
        if not messages:
            raise MessageValidationError("a batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise MessageValidationError("every message of a batch must have the same topic")
        props = []
        for i, m in enumerate(messages):
            p = m.all_properties()
            if uniq_keys is not None:
                p[UNIQ_KEY] = uniq_keys[i]
            props.append(encode_properties(p))
        batch = cls.of(topic, queue_id, [m.body for m in messages], props)
        batch.flags = np.array([m.flag for m in messages], dtype=np.int32)
        return batch

    def slice(self, start: int, stop: int) -> MessageBatch:
        return MessageBatch(
            topic=self.topic,
            queue_id=self.queue_id,
            bodies=self.bodies[start:stop],
            properties=self.properties[start:stop],
            flags=self.flags[start:stop],
            born_timestamps=self.born_timestamps[start:stop],
            sys_flags=self.sys_flags[start:stop],
            reconsume_times=self.reconsume_times[start:stop],
            born_host=self.born_host,
        )

    def validate(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        """Raise before anything is written if any message is unstorable."""
        if self.topic not in _VALID_TOPICS:
            validate_topic(self.topic)
            if len(_VALID_TOPICS) < _VALID_TOPICS_KEPT:
                _VALID_TOPICS.add(self.topic)
        n = len(self.bodies)
        if n == 0:
            raise MessageValidationError("a batch needs at least one message")
        if not (len(self.properties) == self.flags.size == self.born_timestamps.size == self.sys_flags.size
                == self.reconsume_times.size == n):
            raise MessageValidationError("batch columns have different lengths")
        if not 0 <= self.queue_id < 2**31:
            raise MessageValidationError(f"queue id {self.queue_id} is out of range")
        # a few messages (a network send's usual one): the builtin max over their lengths, ~0.3 us, where a ufunc's
        # reduce has ~1 us of fixed cost (more cache-cold, once a send); a larger batch: the ufunc's own reduce over
        # the lengths (cached: the encoder needs them too), where the builtin takes ~1.6 us for a hundred and the
        # array's .max() method ~3 us (its Python layers)
        few = n <= FEW_MESSAGES
        longest_body = max(map(len, self.bodies)) if few else int(np.maximum.reduce(self.body_lengths))
        if longest_body > max_message_size:
            body_len = self.body_lengths
            i = int(np.argmax(body_len > max_message_size))
            raise MessageValidationError(
                f"message {i} body is {int(body_len[i])} bytes, over maxMessageSize {max_message_size}: "
                "split it or raise maxMessageSize"
            )
        longest_props = max(map(len, self.properties)) if few else int(np.maximum.reduce(self.property_lengths))
        if longest_props > MAX_PROPERTIES_LENGTH:
            prop_len = self.property_lengths
            i = int(np.argmax(prop_len > MAX_PROPERTIES_LENGTH))
            raise MessageValidationError(
                f"message {i} properties are {int(prop_len[i])} bytes, over the {MAX_PROPERTIES_LENGTH} limit"
            )
