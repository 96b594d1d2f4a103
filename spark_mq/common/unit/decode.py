"""Units to one Python object each (:class:`StoredMessage`): the per-message API of the client,
the broker's request processors and the tests. Bulk readers take
:class:`~spark_mq.common.unit.batch.StoredBatch` or the Arrow decoder and skip the objects.

Thread-safety: pure functions; a StoredMessage is immutable (its properties are decoded once,
on first access, by whichever thread gets there first).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import itemgetter

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass, realize
from spark_mq.common.lazy_numpy import np
from spark_mq.common.properties import TAGS, decode_properties, keys_of
from spark_mq.common.unit.layout import (
    COMPRESSED_FLAG,
    HEADER_SIZE,
    HEADER_STRUCT,
    MESSAGE_MAGIC,
    MIN_UNIT_SIZE,
    unit_ranges_at,
)


@lazy_dataclass(frozen=True)
class StoredMessage(LazyDataclass):
    """One unit decoded into Python values (for APIs and tests, not for bulk reads); made at its first
    instance (a broker decodes none before it serves).

    Decoders leave ``properties`` as the stored bytes and decode them on first access (most
    consumers never look): to the caller it is an ordinary field, in equality, repr and
    ``dataclasses.replace`` too.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    body_crc: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int

    def __getattr__(self, name: str) -> dict[str, str]:
        """Only reached while ``properties`` is not decoded yet (or for a missing attribute).
        The raw bytes stay, so that threads racing here all get the one dict ``setdefault`` kept."""
        raw = self.__dict__.get("_raw_properties") if name == "properties" else None
        if raw is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.__dict__.setdefault("properties", decode_properties(raw))

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return keys_of(self.properties)


def decompress_bodies(bodies: list[bytes], sys_flags: np.ndarray) -> list[bytes]:
    """``bodies`` with every one whose sys flag has COMPRESSED_FLAG zlib-inflated, as consumers
    must see them (RocketMQ's producer deflates bodies over 4 KiB). A flagged body that is not a
    zlib stream is returned as stored."""
    flagged = np.flatnonzero(np.asarray(sys_flags) & COMPRESSED_FLAG)
    if not flagged.size:
        return bodies
    out = list(bodies)
    for i in flagged.tolist():
        out[i] = _inflate(out[i])
    return out


def _inflate(body: bytes) -> bytes:
    """A COMPRESSED_FLAG body inflated; as stored when it is not a zlib stream."""
    try:
        return zlib.decompress(body)
    except zlib.error:
        return body


def decode_message(unit: bytes | memoryview) -> StoredMessage:
    """Decode one unit (its CRC is not checked here: the store checks on recovery); a compressed
    body is inflated (``sys_flag`` keeps COMPRESSED_FLAG, ``body_crc`` is the stored body's)."""
    return decode_messages(bytes(unit), [0])[0]


# StoredMessage's fields in order, as decoders fill them (properties left undecoded)
_DECODED_FIELDS = ("topic", "queue_id", "queue_offset", "physical_offset", "body", "_raw_properties", "flag",
                   "sys_flag", "body_crc", "born_timestamp", "born_host", "store_timestamp", "store_host",
                   "reconsume_times")


def _new_messages(rows: Iterable[tuple], n: int) -> list[StoredMessage]:
    """``n`` StoredMessages of value tuples in ``_DECODED_FIELDS`` order, filled directly by C-level
    maps (a frozen dataclass's ``__init__`` alone would cost ~3 µs a message; a Python loop ~1.4)."""
    out = list(map(object.__new__, repeat(realize(StoredMessage), n)))  # made without its __init__
    deque(map(dict.update, map(vars, out), map(zip, repeat(_DECODED_FIELDS), rows)), maxlen=0)
    return out


def decode_messages(buf: bytes, starts: list[int]) -> list[StoredMessage]:
    """The units at ``starts`` of ``buf`` as StoredMessages (pull and query responses for the client
    API; bulk readers take a ``StoredBatch`` or the Arrow decoder, and skip the objects).
    One struct unpack of the fixed header per unit and slices for the rest: the vectorised
    decoder's fixed cost per call is far above a lone unit's (~80 µs vs ~4 µs), and for many units
    gathering columns first measured no faster (allocating the objects dominates). Properties stay
    bytes until read."""
    return _new_messages(_unpacked_units(buf, starts), len(starts))


def _unpacked_units(buf: bytes, starts: list[int]) -> Iterator[tuple]:
    """Each unit's values in ``_DECODED_FIELDS`` order: the header by its struct, the rest sliced
    where ``unit_ranges_at`` says."""
    unpack, ranges_at = HEADER_STRUCT.unpack_from, unit_ranges_at
    topics: dict[bytes, str] = {}
    for start in starts:
        (_total, _magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp,
         born_host, store_timestamp, store_host, reconsume_times, _prepared, body_len) = unpack(buf, start)
        body_start, body_end, topic_start, topic_end, props_start, props_end = ranges_at(buf, start, body_len)
        topic_bytes = buf[topic_start:topic_end]
        topic = topics.get(topic_bytes)
        if topic is None:
            topic = topics[topic_bytes] = topic_bytes.decode()
        body = buf[body_start:body_end]
        if sys_flag & COMPRESSED_FLAG:
            body = _inflate(body)
        yield (topic, queue_id, queue_offset, physical_offset, body, buf[props_start:props_end], flag, sys_flag,
               body_crc, born_timestamp, born_host, store_timestamp, store_host, reconsume_times)


def decode_whole_units(buf: bytes) -> list[StoredMessage] | None:
    """The units of ``buf`` back to back as StoredMessages, each checked as ``split_pull_body``
    checks it (the message magic, a size that fits, body, topic and properties lengths adding up to
    exactly that size, the last ending at the end of ``buf``); None at the first that is not, or at a
    topic that is not UTF-8 (the caller's splitter, or ``decode_messages``, then says what is wrong).
    One struct unpack per unit, no numpy: a long-polling consumer's answer of a few messages, whose
    headers splitting first and decoding after would read twice."""
    unpack, n, pos = HEADER_STRUCT.unpack_from, len(buf), 0
    topics: dict[bytes, str] = {}
    rows = []
    while pos < n:
        if n - pos < MIN_UNIT_SIZE:
            return None
        header = unpack(buf, pos)
        end = pos + header[_TOTAL]
        body_start = pos + HEADER_SIZE
        body_end = body_start + header[_BODY_LENGTH]
        if (header[_MAGIC] != MESSAGE_MAGIC or header[_TOTAL] < MIN_UNIT_SIZE or end > n or body_end < body_start
                or body_end >= end):
            return None
        topic_end = body_end + 1 + buf[body_end]  # a one-byte TOPIC length
        if topic_end + 2 > end or topic_end + 2 + (buf[topic_end] << 8 | buf[topic_end + 1]) != end:
            return None  # a two-byte PROPERTIES length; the properties end the unit
        topic_bytes = buf[body_end + 1 : topic_end]
        topic = topics.get(topic_bytes)
        if topic is None:
            try:
                topic = topics[topic_bytes] = topic_bytes.decode()
            except UnicodeDecodeError:
                return None
        body = buf[body_start:body_end]
        if header[_SYS_FLAG] & COMPRESSED_FLAG:
            body = _inflate(body)
        rows.append((topic, *_BEFORE_BODY(header), body, buf[topic_end + 2 : end], *_AFTER_PROPERTIES(header)))
        pos = end
    return _new_messages(rows, len(rows))


# HEADER_STRUCT's values by position, and those that fill a StoredMessage around its body and properties
_TOTAL, _MAGIC, _SYS_FLAG, _BODY_LENGTH = 0, 1, 7, 14
_BEFORE_BODY = itemgetter(3, 5, 6)  # queue id, queue offset, physical offset
# flag, sys flag, body CRC, born timestamp, born host, store timestamp, store host, reconsume times
_AFTER_PROPERTIES = itemgetter(4, 7, 2, 8, 9, 10, 11, 12)
