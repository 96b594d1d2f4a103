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

The fixed part (everything before the BODY bytes) is :data:`HEADER_FIELDS`; the ``struct`` formats
(:func:`header_struct`) and the numpy record (:func:`header_record`, made on first use) are derived
from it. The variable part is three length-prefixed fields: BODY's prefix is the header's last field,
TOPIC's and PROPERTIES' are :data:`TOPIC_LENGTH_CODE` and :data:`PROPS_LENGTH_CODE`. Where they lie is
computed by :func:`unit_ranges` (many units, vectorised) or :func:`unit_ranges_at` (one unit of
bytes, for the per-message decoder), nowhere else.

Thread-safety: constants and pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

from spark_mq.common.buffers import at_every_byte
from spark_mq.common.columns import Columns
from spark_mq.common.lazy_numpy import np

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

def _struct_code(type_code: str) -> str:
    """A numpy type code of :data:`HEADER_FIELDS` as a ``struct`` code (big-endian, as every field)."""
    if type_code.startswith("V"):
        return f"{type_code[1:]}s"
    return {">i4": "i", ">i8": "q", "u1": "B", ">u2": "H"}[type_code]


def fields_struct(fields: tuple[tuple[str, str], ...], only: tuple[str, ...] | None = None) -> struct.Struct:
    """``(field, numpy type)`` pairs as a big-endian ``struct.Struct``; with ``only``, the other fields
    are pad bytes (packed as zeros, skipped by unpack)."""
    codes = (_struct_code(code) if only is None or name in only else f"{struct.calcsize(_struct_code(code))}x"
             for name, code in fields)
    return struct.Struct(">" + "".join(codes))


def header_struct(only: tuple[str, ...] | None = None) -> struct.Struct:
    """The fixed header as one struct (for a lone unit, where numpy's fixed costs dominate); with
    ``only``, just those fields."""
    return fields_struct(HEADER_FIELDS, only)


_FIELD_OFFSETS = {name: fields_struct(HEADER_FIELDS[:i]).size for i, (name, _) in enumerate(HEADER_FIELDS)}
_FIELD_CODES = dict(HEADER_FIELDS)
TOPIC_LENGTH_CODE = "u1"  # the prefix of TOPIC
PROPS_LENGTH_CODE = ">u2"  # the prefix of PROPERTIES
HEADER_STRUCT = header_struct()
HEADER_SIZE = HEADER_STRUCT.size  # 88: everything before the body bytes
TOPIC_LENGTH_STRUCT = fields_struct((("topic_length", TOPIC_LENGTH_CODE),))
PROPS_LENGTH_STRUCT = fields_struct((("props_length", PROPS_LENGTH_CODE),))
HOST_SIZE = struct.calcsize(_struct_code(_FIELD_CODES["born_host"]))  # 8: BORNHOST's and STOREHOSTADDRESS's bytes
MIN_UNIT_SIZE = HEADER_SIZE + TOPIC_LENGTH_STRUCT.size + PROPS_LENGTH_STRUCT.size  # empty body, topic and properties

MESSAGE_MAGIC = -626843481  # 0xDAA320A7 as Java's signed int
BLANK_MAGIC = -875286124  # 0xCBD43194
CRC_MASK = 0x7FFFFFFF  # BODYCRC is RocketMQ's UtilAll.crc32: zlib CRC-32 masked to a non-negative int

# sys flags (MessageSysFlag)
COMPRESSED_FLAG = 0x1
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOST_V6_FLAG = 0x1 << 5


def field_offset(name: str) -> int:
    """Where header field ``name`` begins in a unit."""
    return _FIELD_OFFSETS[name]


STORE_TIMESTAMP_OFFSET = field_offset("store_timestamp")
PHYSICAL_OFFSET_OFFSET = field_offset("physical_offset")
MAGIC_OFFSET = field_offset("magic")
SIZE_MAGIC = fields_struct(HEADER_FIELDS[:2])  # how every unit (and the blank tail) begins
END_FILE_MIN_BLANK_LENGTH = SIZE_MAGIC.size  # a file always keeps room for a blank unit's size + magic
INT64 = fields_struct((("physical_offset", _FIELD_CODES["physical_offset"]),))  # QUEUEOFFSET, PHYSICALOFFSET, times
_TOPIC_LENGTH_AT = TOPIC_LENGTH_STRUCT.unpack_from
_PROPS_LENGTH_AT = PROPS_LENGTH_STRUCT.unpack_from
_BODY_LENGTH_STRUCT = fields_struct((("body_length", _FIELD_CODES["body_length"]),))
_BODY_LENGTH_AT = _BODY_LENGTH_STRUCT.unpack_from
_BODY_LENGTH_OFFSET = HEADER_SIZE - _BODY_LENGTH_STRUCT.size


@cache
def header_record() -> np.dtype:
    """The fixed header as a numpy record (made on first use: numpy is imported when needed)."""
    return np.dtype(list(HEADER_FIELDS))


@cache
def size_magic_record() -> np.dtype:
    """The record every unit (and the blank tail) begins with: TOTALSIZE and MAGICCODE."""
    return np.dtype(list(HEADER_FIELDS[:2]))


@cache
def _length_type(type_code: str) -> np.dtype:
    return np.dtype(type_code)


def header_field(buf: np.ndarray, starts: np.ndarray, name: str) -> np.ndarray:
    """Header field ``name`` of the units at ``starts`` of ``buf`` (uint8), as int64, one gather:
    for a reader that needs a field or two, not the whole header (``gather_records`` with :func:`header_record`)."""
    return at_every_byte(buf, header_record()[name])[starts + field_offset(name)].astype(np.int64)


def tail_record(topic_size: int) -> np.dtype:
    """What follows BODY up to the PROPERTIES bytes, for a topic of ``topic_size`` bytes."""
    return np.dtype([("topic_length", TOPIC_LENGTH_CODE), ("topic", f"V{topic_size}"),
                     ("props_length", PROPS_LENGTH_CODE)])


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
    props_start = topic_end + PROPS_LENGTH_STRUCT.size
    props_end = props_start + _prefix(buf, topic_end, PROPS_LENGTH_CODE)
    return UnitRanges(starts, body_start, body_end, topic_start, topic_end, props_start, props_end)


def topic_ranges(buf: np.ndarray, body_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[start, end)`` of the TOPIC bytes of units whose BODY ends at ``body_end`` (where the
    TOPIC length prefix is), the prefix read clamped into ``buf``."""
    topic_start = body_end + TOPIC_LENGTH_STRUCT.size
    return topic_start, topic_start + _prefix(buf, body_end, TOPIC_LENGTH_CODE)


def _prefix(buf: np.ndarray, at: np.ndarray, type_code: str) -> np.ndarray:
    """The length prefixes of numpy type ``type_code`` at ``at``, each read clamped into ``buf``."""
    dtype = _length_type(type_code)
    return at_every_byte(buf, dtype)[np.clip(at, 0, max(buf.size - dtype.itemsize, 0))]


def unit_ranges_at(buf: bytes, start: int, body_length: int) -> tuple[int, int, int, int, int, int]:
    """:func:`unit_ranges` of one whole unit of ``buf`` (its lengths trusted), without numpy's fixed
    costs: ``(body_start, body_end, topic_start, topic_end, props_start, props_end)``."""
    body_start = start + HEADER_SIZE
    body_end = body_start + body_length
    topic_start = body_end + TOPIC_LENGTH_STRUCT.size
    topic_end = topic_start + _TOPIC_LENGTH_AT(buf, body_end)[0]
    props_start = topic_end + PROPS_LENGTH_STRUCT.size
    return body_start, body_end, topic_start, topic_end, props_start, props_start + _PROPS_LENGTH_AT(buf, topic_end)[0]


def unit_fits_at(buf: bytes | memoryview, start: int, end: int) -> bool:
    """:meth:`UnitRanges.fit` of one unit ``[start, end)`` of ``buf`` (at least a header long), without
    numpy's fixed costs: whether its body, topic and properties lengths add up to exactly its size
    (each prefix is read only once the lengths before it put it inside the unit)."""
    body_end = start + HEADER_SIZE + _BODY_LENGTH_AT(buf, start + _BODY_LENGTH_OFFSET)[0]
    if body_end < start + HEADER_SIZE or body_end + TOPIC_LENGTH_STRUCT.size > end:
        return False
    topic_end = body_end + TOPIC_LENGTH_STRUCT.size + _TOPIC_LENGTH_AT(buf, body_end)[0]
    if topic_end + PROPS_LENGTH_STRUCT.size > end:
        return False
    return topic_end + PROPS_LENGTH_STRUCT.size + _PROPS_LENGTH_AT(buf, topic_end)[0] == end
