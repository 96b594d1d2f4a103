"""The commitlog message unit's byte layout, declared once: every encoder, chain walker, checker and
decoder (numpy, struct, Arrow) takes its offsets from here, so a layout fix is one edit.

A unit, big-endian, IPv4 hosts (RocketMQ ``CommitLog.calMsgLength``, ``MessageDecoder``)::

    off  size  field
      0     4  TOTALSIZE
      4     4  MAGICCODE              0xDAA320A7 (0xCBD43194 marks the blank file tail)
      8     4  BODYCRC                crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG
     20     8  QUEUEOFFSET
     28     8  PHYSICALOFFSET
     36     4  SYSFLAG
     40     8  BORNTIMESTAMP
     48     8  BORNHOST               ip(4) + port(4)
     56     8  STORETIMESTAMP
     64     8  STOREHOSTADDRESS       ip(4) + port(4)
     72     4  RECONSUMETIMES
     76     8  PREPAREDTRANSACTIONOFFSET
     84     4  BODY length, then BODY
      .     1  TOPIC length, then TOPIC
      .     2  PROPERTIES length, then PROPERTIES

The fixed part (everything before the BODY bytes) is :data:`HEADER_FIELDS`; the numpy record
(:data:`HEADER`) and the ``struct`` formats (:func:`header_struct`) are derived from it. The
variable part is three length-prefixed fields: BODY's prefix is the header's last field,
TOPIC's and PROPERTIES' are :data:`TOPIC_LENGTH` and :data:`PROPS_LENGTH`. Where they lie is
computed by :func:`unit_ranges` (many units, vectorised) or :func:`unit_ranges_at` (one unit of
bytes, for the per-message decoder), nowhere else.

Thread-safety: constants and pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from spark_mq.common.buffers import at_every_byte
from spark_mq.common.columns import Columns

# (field, numpy type) of the fixed header in byte order, as drawn above
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_size", ">i4"),
    ("magic", ">i4"),
    ("body_crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("physical_offset", ">i8"),
    ("sys_flag", ">i4"),
    ("born_timestamp", ">i8"),
    ("born_host", "V8"),
    ("store_timestamp", ">i8"),
    ("store_host", "V8"),
    ("reconsume_times", ">i4"),
    ("prepared_transaction_offset", ">i8"),
    ("body_length", ">i4"),
)
HEADER = np.dtype(list(HEADER_FIELDS))
HEADER_SIZE = HEADER.itemsize  # 88: everything before the body bytes
TOPIC_LENGTH = np.dtype("u1")  # the prefix of TOPIC
PROPS_LENGTH = np.dtype(">u2")  # the prefix of PROPERTIES
MIN_UNIT_SIZE = HEADER_SIZE + TOPIC_LENGTH.itemsize + PROPS_LENGTH.itemsize  # empty body, topic and properties

MESSAGE_MAGIC = -626843481  # 0xDAA320A7 as Java's signed int
BLANK_MAGIC = -875286124  # 0xCBD43194
CRC_MASK = 0x7FFFFFFF  # BODYCRC is RocketMQ's UtilAll.crc32: zlib CRC-32 masked to a non-negative int

# sys flags (MessageSysFlag)
COMPRESSED_FLAG = 0x1
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOST_V6_FLAG = 0x1 << 5


def field_offset(name: str) -> int:
    """Where header field ``name`` begins in a unit."""
    return HEADER.fields[name][1]


STORE_TIMESTAMP_OFFSET = field_offset("store_timestamp")
PHYSICAL_OFFSET_OFFSET = field_offset("physical_offset")
MAGIC_OFFSET = field_offset("magic")
SIZE_MAGIC_RECORD = np.dtype(list(HEADER_FIELDS[:2]))  # how every unit (and the blank tail) begins
END_FILE_MIN_BLANK_LENGTH = SIZE_MAGIC_RECORD.itemsize  # a file always keeps room for a blank unit's size + magic


def _struct_code(dtype: np.dtype) -> str:
    if dtype.kind == "V":
        return f"{dtype.itemsize}s"
    return {("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H"}[dtype.kind, dtype.itemsize]


def struct_of(dtype: np.dtype, only: tuple[str, ...] | None = None) -> struct.Struct:
    """``dtype`` (a field type, or a record of them) as a big-endian ``struct.Struct``; with
    ``only``, the record's other fields are pad bytes (packed as zeros, skipped by unpack)."""
    if dtype.names is None:
        return struct.Struct(">" + _struct_code(dtype))
    codes = (_struct_code(dtype[name]) if only is None or name in only else f"{dtype[name].itemsize}x"
             for name in dtype.names)
    return struct.Struct(">" + "".join(codes))


def header_struct(only: tuple[str, ...] | None = None) -> struct.Struct:
    """The fixed header as one struct (for a lone unit, where numpy's fixed costs dominate); with
    ``only``, just those fields."""
    return struct_of(HEADER, only)


HEADER_STRUCT = header_struct()
SIZE_MAGIC = struct_of(SIZE_MAGIC_RECORD)
INT64 = struct_of(HEADER["physical_offset"])  # QUEUEOFFSET, PHYSICALOFFSET and the timestamps
TOPIC_LENGTH_STRUCT = struct_of(TOPIC_LENGTH)
PROPS_LENGTH_STRUCT = struct_of(PROPS_LENGTH)
_TOPIC_LENGTH_AT = TOPIC_LENGTH_STRUCT.unpack_from
_PROPS_LENGTH_AT = PROPS_LENGTH_STRUCT.unpack_from
_BODY_LENGTH_AT = struct_of(HEADER["body_length"]).unpack_from
_BODY_LENGTH_OFFSET = HEADER_SIZE - HEADER["body_length"].itemsize


def header_field(buf: np.ndarray, starts: np.ndarray, name: str) -> np.ndarray:
    """Header field ``name`` of the units at ``starts`` of ``buf`` (uint8), as int64, one gather:
    for a reader that needs a field or two, not the whole header (``gather_records`` with HEADER)."""
    return at_every_byte(buf, HEADER[name])[starts + field_offset(name)].astype(np.int64)


def tail_record(topic_size: int) -> np.dtype:
    """What follows BODY up to the PROPERTIES bytes, for a topic of ``topic_size`` bytes."""
    return np.dtype([("topic_length", TOPIC_LENGTH), ("topic", f"V{topic_size}"), ("props_length", PROPS_LENGTH)])


@dataclass(frozen=True)
class UnitRanges(Columns):
    """Where the units of one buffer and their variable parts lie: ``[x_start, x_end)`` per unit
    for BODY, TOPIC and PROPERTIES (each after its length prefix)."""

    starts: np.ndarray
    body_start: np.ndarray
    body_end: np.ndarray  # where the TOPIC length is
    topic_start: np.ndarray
    topic_end: np.ndarray  # where the PROPERTIES length is
    props_start: np.ndarray
    props_end: np.ndarray  # the unit's end when its lengths add up

    def __len__(self) -> int:
        return self.starts.size

    def fit(self, ends: np.ndarray) -> np.ndarray:
        """Whether each unit's body, topic and properties lengths add up to exactly ``[start,
        end)``; then every prefix :func:`unit_ranges` read was inside the unit."""
        return (self.body_end >= self.body_start) & (self.props_end == ends)


def unit_ranges(buf: np.ndarray, starts: np.ndarray, body_length: np.ndarray) -> UnitRanges:
    """The variable parts of the units at ``starts`` (int64) of ``buf`` (uint8), from their BODY
    length fields (``body_length``, int64) and the TOPIC and PROPERTIES length prefixes, in one
    gather per prefix. Every prefix is read clamped into ``buf``, so any bytes are safe: a unit
    whose lengths do not add up gets ranges that do not end at its end (:meth:`UnitRanges.fit`)."""
    body_start = starts + HEADER_SIZE
    body_end = body_start + body_length
    topic_start, topic_end = topic_ranges(buf, body_end)
    props_start = topic_end + PROPS_LENGTH.itemsize
    props_end = props_start + _prefix(buf, topic_end, PROPS_LENGTH)
    return UnitRanges(starts, body_start, body_end, topic_start, topic_end, props_start, props_end)


def topic_ranges(buf: np.ndarray, body_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[start, end)`` of the TOPIC bytes of units whose BODY ends at ``body_end`` (where the
    TOPIC length prefix is), the prefix read clamped into ``buf``."""
    topic_start = body_end + TOPIC_LENGTH.itemsize
    return topic_start, topic_start + _prefix(buf, body_end, TOPIC_LENGTH)


def _prefix(buf: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` length prefixes at ``at``, each read clamped into ``buf``."""
    return at_every_byte(buf, dtype)[np.clip(at, 0, max(buf.size - dtype.itemsize, 0))]


def unit_ranges_at(buf: bytes, start: int, body_length: int) -> tuple[int, int, int, int, int, int]:
    """:func:`unit_ranges` of one whole unit of ``buf`` (its lengths trusted), without numpy's fixed
    costs: ``(body_start, body_end, topic_start, topic_end, props_start, props_end)``."""
    body_start = start + HEADER_SIZE
    body_end = body_start + body_length
    topic_start = body_end + TOPIC_LENGTH.itemsize
    topic_end = topic_start + _TOPIC_LENGTH_AT(buf, body_end)[0]
    props_start = topic_end + PROPS_LENGTH.itemsize
    return body_start, body_end, topic_start, topic_end, props_start, props_start + _PROPS_LENGTH_AT(buf, topic_end)[0]


def unit_fits_at(buf: bytes | memoryview, start: int, end: int) -> bool:
    """:meth:`UnitRanges.fit` of one unit ``[start, end)`` of ``buf`` (at least a header long), without
    numpy's fixed costs: whether its body, topic and properties lengths add up to exactly its size
    (each prefix is read only once the lengths before it put it inside the unit)."""
    body_end = start + HEADER_SIZE + _BODY_LENGTH_AT(buf, start + _BODY_LENGTH_OFFSET)[0]
    if body_end < start + HEADER_SIZE or body_end + TOPIC_LENGTH.itemsize > end:
        return False
    topic_end = body_end + TOPIC_LENGTH.itemsize + _TOPIC_LENGTH_AT(buf, body_end)[0]
    if topic_end + PROPS_LENGTH.itemsize > end:
        return False
    return topic_end + PROPS_LENGTH.itemsize + _PROPS_LENGTH_AT(buf, topic_end)[0] == end
