"""The commitlog message unit: RocketMQ 4.x's byte layout, encoded and decoded in batches.

A unit, big-endian, IPv4 hosts (RocketMQ ``CommitLog.calMsgLength``)::

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

Encoding builds all fixed headers as one numpy structured array and joins header, body and
tail pieces with ``bytes.join`` over C iterators: no Python bytecode runs per message.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, fields
from functools import cached_property
from itertools import chain, repeat

import numpy as np

from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import TAGS, decode_properties, keys_of

MESSAGE_MAGIC = -626843481  # 0xDAA320A7 as Java's signed int
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # a file always keeps room for a blank unit's size + magic
CRC_MASK = 0x7FFFFFFF

HEADER = np.dtype(
    [
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
    ]
)
HEADER_SIZE = HEADER.itemsize  # 88: everything before the body bytes
MIN_UNIT_SIZE = HEADER_SIZE + 1 + 2  # empty body, topic and properties
STORE_TIMESTAMP_OFFSET = HEADER.fields["store_timestamp"][1]
QUEUE_OFFSET_OFFSET = HEADER.fields["queue_offset"][1]
PHYSICAL_OFFSET_OFFSET = HEADER.fields["physical_offset"][1]

SIZE_MAGIC = struct.Struct(">ii")
_SIZE_MAGIC_RECORD = np.dtype([("total_size", ">i4"), ("magic", ">i4")])  # how every unit begins
_MAGIC_AT = HEADER.fields["magic"][1]
_BODY_CRC_AT = HEADER.fields["body_crc"][1]
_MAGIC_FIRST_BYTE = MESSAGE_MAGIC.to_bytes(4, "big", signed=True)[0]
_SCAN_CHUNK = 1 << 22  # bytes tested per numpy call when searching a buffer (see byte_positions)
_CHAIN_WINDOW = 1 << 24  # bytes of unit starts follow_chain links per vectorised step
_VECTOR_CHAIN_MIN_BYTES = 1 << 16  # below this a Python step per unit is cheaper than numpy's fixed costs
_HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")  # HEADER as one struct, for a lone message
assert _HEADER.size == HEADER.itemsize
# HEADER with only the batch-wide fields set: magic, queue id, born host, store time, store host
_HEADER_TEMPLATE = struct.Struct(">4xi4xi4x8x8x4x8x8sq8s4x8x4x")
assert _HEADER_TEMPLATE.size == HEADER.itemsize
BODY_CRC = struct.Struct(">i")
INT64 = struct.Struct(">q")
PROPS_LENGTH = struct.Struct(">H")

# sys flags (MessageSysFlag)
COMPRESSED_FLAG = 0x1
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOST_V6_FLAG = 0x1 << 5


def body_crc(data: bytes | memoryview) -> int:
    """RocketMQ's UtilAll.crc32: zlib CRC-32 masked to a non-negative int."""
    return zlib.crc32(data) & CRC_MASK


def blank_unit(remaining: int) -> bytes:
    """The 8 bytes that mark the unused tail of a commitlog file."""
    return SIZE_MAGIC.pack(remaining, BLANK_MAGIC)


def unit_sizes(batch: MessageBatch) -> np.ndarray:
    """Encoded size of every message of ``batch``."""
    return MIN_UNIT_SIZE + len(batch.topic.encode()) + batch.body_lengths + batch.property_lengths


@dataclass(frozen=True)
class EncodedBatch:
    data: bytes
    sizes: np.ndarray  # int64, one per unit
    physical_offsets: np.ndarray  # int64, one per unit


def encode_batch(
    batch: MessageBatch,
    physical_offset: int,
    queue_offset: int,
    store_timestamp: int,
    store_host: bytes,
    sizes: np.ndarray | None = None,
) -> EncodedBatch:
    """Encode every message of ``batch`` as consecutive units starting at ``physical_offset``."""
    n = len(batch)
    topic = batch.topic.encode()
    if sizes is None:
        sizes = unit_sizes(batch)
    if n == 1:  # a lone message (most network sends): one struct.pack beats ~25 numpy calls
        return _encode_one(batch, topic, int(sizes[0]), physical_offset, queue_offset, store_timestamp, store_host)
    phys = np.empty(n, dtype=np.int64)
    phys[0] = physical_offset
    np.cumsum(sizes[:-1], out=phys[1:])
    phys[1:] += physical_offset

    props_len = batch.property_lengths
    # fields shared by the whole batch are packed once and repeated; the rest are columns
    template = _HEADER_TEMPLATE.pack(MESSAGE_MAGIC, batch.queue_id, batch.born_host, store_timestamp, store_host)
    head = np.frombuffer(bytearray(template * n), dtype=HEADER)
    head["total_size"] = sizes
    head["body_crc"] = np.fromiter(map(zlib.crc32, batch.bodies), dtype=np.int64, count=n) & CRC_MASK
    head["flag"] = batch.flags
    head["queue_offset"] = np.arange(queue_offset, queue_offset + n, dtype=np.int64)
    head["physical_offset"] = phys
    head["sys_flag"] = batch.sys_flags & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    head["born_timestamp"] = batch.born_timestamps
    head["reconsume_times"] = batch.reconsume_times
    head["body_length"] = sizes - (MIN_UNIT_SIZE + len(topic)) - props_len

    tail_type = np.dtype([("topic_length", "u1"), ("topic", f"V{len(topic)}"), ("props_length", ">u2")])
    tail_template = np.zeros(1, dtype=tail_type)
    tail_template["topic_length"] = len(topic)
    tail_template["topic"] = np.frombuffer(topic, dtype=f"V{len(topic)}")[0]
    tail = np.repeat(tail_template, n)
    tail["props_length"] = props_len

    pieces = zip(
        head.view(f"V{HEADER_SIZE}").tolist(),
        batch.bodies,
        tail.view(f"V{tail_type.itemsize}").tolist(),
        batch.properties,
        strict=True,
    )
    return EncodedBatch(b"".join(chain.from_iterable(pieces)), sizes, phys)


def _encode_one(
    batch: MessageBatch, topic: bytes, size: int, physical_offset: int, queue_offset: int,
    store_timestamp: int, store_host: bytes,
) -> EncodedBatch:
    body, props = batch.bodies[0], batch.properties[0]
    head = _HEADER.pack(
        size, MESSAGE_MAGIC, zlib.crc32(body) & CRC_MASK, batch.queue_id, int(batch.flags[0]), queue_offset,
        physical_offset, int(batch.sys_flags[0]) & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG),
        int(batch.born_timestamps[0]), batch.born_host, store_timestamp, store_host, int(batch.reconsume_times[0]),
        0, len(body),
    )
    data = b"".join((head, body, bytes((len(topic),)), topic, PROPS_LENGTH.pack(len(props)), props))
    return EncodedBatch(data, np.array([size], dtype=np.int64), np.array([physical_offset], dtype=np.int64))


@dataclass(frozen=True)
class UnitColumns:
    """Decoded units: the fixed header as a structured array plus byte ranges of the rest."""

    header: np.ndarray  # HEADER records
    starts: np.ndarray
    body_start: np.ndarray
    body_end: np.ndarray
    topic_start: np.ndarray
    topic_end: np.ndarray
    props_start: np.ndarray
    props_end: np.ndarray

    def __len__(self) -> int:
        return self.starts.size

    def take(self, rows: np.ndarray) -> UnitColumns:
        """The units at ``rows``, in that order."""
        return UnitColumns(*(getattr(self, f.name)[rows] for f in fields(self)))


def decode_units(buf: np.ndarray, starts: np.ndarray) -> UnitColumns:
    """Decode the units beginning at ``starts`` in ``buf`` (uint8) without a per-unit loop.

    The caller has established that these are whole units (by walking or from the consume
    queue); lengths are taken from the units themselves.
    """
    starts = np.asarray(starts, dtype=np.int64)
    head = gather_records(buf, starts, HEADER)
    body_start = starts + HEADER_SIZE
    body_end = body_start + head["body_length"].astype(np.int64)
    topic_start = body_end + 1
    topic_end = topic_start + buf[body_end].astype(np.int64)
    props_start = topic_end + 2
    props_end = props_start + (buf[topic_end].astype(np.int64) << 8 | buf[topic_end + 1])
    return UnitColumns(head, starts, body_start, body_end, topic_start, topic_end, props_start, props_end)


def at_every_byte(data: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """A zero-copy view of ``data`` with a (mutually overlapping) ``dtype`` value at every byte
    offset: indexing it with offsets gathers the fields there in one numpy take."""
    dtype = np.dtype(dtype)
    return np.ndarray((max(data.size - dtype.itemsize + 1, 0),), dtype=dtype, buffer=data, strides=(1,))


def ranges_equal(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, value: bytes) -> np.ndarray:
    """Whether each ``[start, end)`` of ``buf`` holds exactly ``value`` (a topic name): compared 8
    bytes at a time, a few gathers rather than one per byte, the last word overlapping."""
    width = len(value)
    ok = ((ends - starts) == width) & (starts + width <= buf.size)
    at = np.where(ok, starts, 0)  # never gather past the buffer
    if width >= 8:
        words = at_every_byte(buf, "<u8")
        for k in [*range(0, width - 7, 8), width - 8]:
            ok &= words[at + k] == int.from_bytes(value[k:k + 8], "little")
    else:
        for k in range(width):
            ok &= buf[at + k] == value[k]
    return ok


def gather_records(data: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records at offsets ``at``, gathered as opaque items (a plain memcpy each,
    several times faster than gathering structured records field by field), then viewed."""
    return at_every_byte(data, f"V{dtype.itemsize}")[at].view(dtype)


def byte_positions(data: np.ndarray, test: np.ufunc, value: int) -> np.ndarray:
    """Offsets (ascending int64) of the bytes ``b`` of ``data`` where ``test(b, value)`` holds. Tested
    a chunk at a time into one reused mask: a fresh mask as large as a 275 MB body costs more in
    page faults than the compares themselves."""
    mask = np.empty(min(_SCAN_CHUNK, data.size), dtype=bool)
    found = [np.empty(0, dtype=np.int64)]
    for lo in range(0, data.size, _SCAN_CHUNK):  # one step per 4 MiB, not per message
        chunk = data[lo : lo + _SCAN_CHUNK]
        test(chunk, value, out=mask[: chunk.size])
        found.append(np.flatnonzero(mask[: chunk.size]) + lo)
    return np.concatenate(found)


def chained_unit_starts(data: np.ndarray) -> np.ndarray | None:
    """Starts of the units of ``data`` (uint8) when it is units back to back (a pull body), found
    without a Python step per unit; None when this quick test cannot tell (walk the units then).

    Every offset whose MAGICCODE field holds the message magic is a candidate, and when each
    candidate's TOTALSIZE leads exactly to the next one (the first at 0, the last ending the
    buffer) the candidates are the units. Their inner lengths are not checked here."""
    if data.size < MIN_UNIT_SIZE:
        return None
    at, sizes = _magic_candidates(data, 0, data.size - 7)
    ends = at + sizes
    if at.size and at[0] == 0 and ends[-1] == data.size and np.array_equal(ends[:-1], at[1:]):
        return at
    return None


def _magic_candidates(data: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in ``[lo, hi)`` whose MAGICCODE field (4 bytes on) holds the message magic, and the
    TOTALSIZE (int64) at each: a superset of the unit starts there (a body may hold the magic)."""
    at = byte_positions(data[lo + _MAGIC_AT : hi + _MAGIC_AT], np.equal, _MAGIC_FIRST_BYTE) + lo
    heads = gather_records(data, at, _SIZE_MAGIC_RECORD)
    is_unit = heads["magic"] == MESSAGE_MAGIC
    return at[is_unit], heads["total_size"][is_unit].astype(np.int64)


def back_to_back_units(data: np.ndarray) -> np.ndarray | None:
    """``chained_unit_starts`` whose units are also self-consistent (body, topic and properties
    lengths add up to each unit's size), so ``decode_units`` may read them; None otherwise."""
    starts = chained_unit_starts(data)
    if starts is None:
        return None
    _, _, consistent = _check_lengths(data, starts, np.append(starts[1:], data.size))
    return starts if consistent.all() else None


@dataclass(frozen=True)
class WalkResult:
    """Where a walk over consecutive units stopped and why."""

    starts: np.ndarray  # start of every whole, valid unit found
    end: int  # offset just past the last valid unit
    reason: str  # "end" (ran out of bytes), "blank", "zero", "max", or what was wrong


def walk_units(
    mv: memoryview, start: int, limit: int, check_crc: bool = True, max_units: int = 1 << 62
) -> WalkResult:
    """Follow units from ``start`` until ``limit``, a blank unit, the first bad unit, or
    ``max_units`` units (reason "max": call again from ``end``).

    Phase one follows the TOTALSIZE chain (the one inherently sequential step); phase two
    checks every unit's internal lengths with numpy and its body CRC with C-level maps.
    """
    chain = follow_chain(mv, start, limit, max_units)
    starts = chain.starts
    if not starts.size:
        return chain
    buf = np.frombuffer(mv, dtype=np.uint8)
    body_start, body_end, consistent = _check_lengths(buf, starts, np.append(starts[1:], chain.end))
    bad = np.flatnonzero(~consistent)
    first_bad = int(bad[0]) if bad.size else starts.size
    why = f"unit at {int(starts[first_bad])} has inconsistent lengths" if bad.size else chain.reason
    if check_crc and first_bad:
        wrong = np.flatnonzero(crc_mismatch(mv, starts[:first_bad], body_start[:first_bad], body_end[:first_bad]))
        if wrong.size:
            first_bad = int(wrong[0])
            why = f"unit at {int(starts[first_bad])} fails its body CRC"
    if first_bad < starts.size:
        return WalkResult(starts[:first_bad], int(starts[first_bad]), why)
    return chain


def follow_chain(mv: memoryview, start: int, limit: int, max_units: int = 1 << 62) -> WalkResult:
    """The units whose TOTALSIZE/MAGICCODE chain leads from ``start`` towards ``limit`` (nothing
    inside a unit is checked): stops at a blank or zero unit, a wrong magic, a size that does not
    fit, or after ``max_units`` units (reason "max").

    A long stretch is followed ``_CHAIN_WINDOW`` bytes at a time without a Python step per unit
    (``_linked_run``); the last few units and the reason the chain ends come from
    ``_step_chain``, the same rules one unit at a time."""
    runs: list[np.ndarray] = []
    pos, count = start, 0
    if limit - start >= _VECTOR_CHAIN_MIN_BYTES:
        buf = np.frombuffer(mv, dtype=np.uint8)
        while count < max_units and pos < limit:
            run, end = _linked_run(buf, pos, min(limit, pos + _CHAIN_WINDOW), limit)
            if not run.size:
                break
            if run.size > max_units - count:
                run = run[: max_units - count]
                end = int(run[-1]) + SIZE_MAGIC.unpack_from(mv, int(run[-1]))[0]
            runs.append(run)
            count += run.size
            pos = end
    tail = _step_chain(mv, pos, limit, max_units - count)
    return WalkResult(np.concatenate([*runs, tail.starts]) if runs else tail.starts, tail.end, tail.reason)


def _linked_run(buf: np.ndarray, pos: int, window_end: int, limit: int) -> tuple[np.ndarray, int]:
    """The chain from ``pos`` through the units starting before ``window_end`` (``follow_chain``'s
    rules), and the offset after its last unit: ``(empty, pos)`` when no unit starts at ``pos``.

    Candidates (``_magic_candidates`` with a size that fits) form a graph, each pointing at the
    candidate where its TOTALSIZE leads; the chain is the path from ``pos``. Where every candidate
    leads to the next one (no magic inside a body) the path takes them in bulk; one Python step
    per remaining break (a body holding a magic, or the end)."""
    hi = min(window_end, limit - 7)  # a unit's size and magic must fit before the limit
    empty = np.zeros(0, dtype=np.int64)
    if hi <= pos:
        return empty, pos
    at, sizes = _magic_candidates(buf, pos, hi)
    fits = (sizes >= MIN_UNIT_SIZE) & (at + sizes <= limit)
    at, nxt = at[fits], (at + sizes)[fits]
    if not at.size or at[0] != pos:
        return empty, pos
    succ = np.searchsorted(at, nxt)
    linked = succ < at.size
    linked[linked] = at[succ[linked]] == nxt[linked]
    succ[~linked] = -1
    breaks = np.flatnonzero(succ != np.arange(1, at.size + 1))  # the last candidate is always one
    pieces, i = [], 0
    while i >= 0:
        b = int(breaks[np.searchsorted(breaks, i)])
        pieces.append(at[i : b + 1])
        i, end = int(succ[b]), int(nxt[b])
    return (pieces[0] if len(pieces) == 1 else np.concatenate(pieces)), end


def _step_chain(mv: memoryview, start: int, limit: int, max_units: int) -> WalkResult:
    """``follow_chain`` one unit per Python step."""
    found: list[int] = []
    append = found.append
    unpack = SIZE_MAGIC.unpack_from
    pos = start
    last = limit - 8  # a unit's size and magic must fit before the limit
    for _ in range(min(max_units, (limit - start) // MIN_UNIT_SIZE + 1)):
        if pos > last:
            reason = "end"
            break
        size, magic = unpack(mv, pos)
        if magic != MESSAGE_MAGIC:
            reason = "blank" if magic == BLANK_MAGIC else ("zero" if size == 0 and magic == 0 else "bad magic")
            break
        if size < MIN_UNIT_SIZE or pos + size > limit:
            reason = f"unit size {size} does not fit"
            break
        append(pos)
        pos += size
    else:
        reason = "max" if pos <= last else "end"
    return WalkResult(np.array(found, dtype=np.int64), pos, reason)


def crc_mismatch(mv: memoryview, starts: np.ndarray, body_start: np.ndarray, body_end: np.ndarray) -> np.ndarray:
    """Whether each unit's stored BODYCRC differs from its body's CRC (one C-level crc32 a unit)."""
    stored = _be_int(np.frombuffer(mv, dtype=np.uint8), starts + _BODY_CRC_AT, 4)
    return body_crc_mismatch(mv, stored, body_start, body_end)


def body_crc_mismatch(mv: memoryview, stored: np.ndarray, body_start: np.ndarray, body_end: np.ndarray) -> np.ndarray:
    """``crc_mismatch`` with the units' BODYCRC fields (``stored``) gathered already."""
    crcs = np.fromiter(
        map(zlib.crc32, map(mv.__getitem__, map(slice, body_start.tolist(), body_end.tolist()))),
        dtype=np.int64,
        count=body_start.size,
    ) & CRC_MASK
    return crcs != stored


@dataclass(frozen=True)
class UnitFaults:
    """What ``unit_faults`` found, with the fixed headers it read (callers take their columns
    from them instead of gathering the fields again)."""

    damaged: np.ndarray  # bool per unit
    readable: np.ndarray  # bool per unit: inner lengths hold, so the topic can be located
    header: np.ndarray  # HEADER records
    body_end: np.ndarray  # where each readable unit's topic length byte is


def unit_faults(mv: memoryview, starts: np.ndarray, end: int, base: int, check_crc: bool) -> UnitFaults:
    """The faults of every unit of a chain (``follow_chain``: ``starts`` and its ``end``) of a
    buffer whose byte 0 is commitlog offset ``base``. Damaged although the chain holds: inner
    lengths that do not add up (then not readable either: its topic cannot be located), a
    PHYSICALOFFSET other than the unit's position, a negative QUEUEID, or (with ``check_crc``) a
    wrong body CRC. All vectorised but the crc32 calls; the headers are gathered once."""
    buf = np.frombuffer(mv, dtype=np.uint8)
    head = gather_records(buf, starts, HEADER)
    body_start, body_end, readable = _check_lengths(buf, starts, np.append(starts[1:], end),
                                                    head["body_length"].astype(np.int64))
    damaged = ~readable
    damaged |= head["physical_offset"] != starts + base
    damaged |= head["queue_id"] < 0
    if check_crc:
        damaged |= body_crc_mismatch(mv, head["body_crc"], body_start, body_end)
    return UnitFaults(damaged, readable, head, body_end)


def served_faults(
    data: bytes, sizes: np.ndarray, queue_id: int, queue_offsets: np.ndarray, phys: np.ndarray
) -> np.ndarray:
    """Which of the units back to back in ``data`` (a read's result) are damaged: a header other
    than their consume queue entries promise (MAGICCODE, TOTALSIZE, QUEUEID, QUEUEOFFSET,
    PHYSICALOFFSET), inner lengths that do not add up, or a wrong body CRC."""
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    buf = np.frombuffer(data, dtype=np.uint8)
    head = gather_records(buf, starts, HEADER)
    bad = ((head["magic"] != MESSAGE_MAGIC) | (head["total_size"] != sizes) | (head["queue_id"] != queue_id)
           | (head["queue_offset"] != queue_offsets) | (head["physical_offset"] != phys))
    body_start, body_end, readable = _check_lengths(buf, starts, starts + sizes, head["body_length"].astype(np.int64))
    return bad | ~readable | body_crc_mismatch(memoryview(data), head["body_crc"], body_start, body_end)


def _be_int(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned ints (int64) of ``width`` (2 or 4) bytes at each offset ``at``."""
    return at_every_byte(buf, f">u{width}")[at].astype(np.int64)


def _check_lengths(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, body_len: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Body ranges of units ``[starts, ends)`` and whether body, topic and properties lengths
    add up to each unit's size (never reading outside the unit, whatever the bytes say).
    ``body_len``: the units' BODY length fields, when the caller has gathered them already."""
    body_start = starts + HEADER_SIZE
    if body_len is None:
        body_len = _be_int(buf, starts + HEADER.fields["body_length"][1], 4)
    ok = (body_len >= 0) & (body_len <= (ends - starts) - MIN_UNIT_SIZE)
    topic_at = np.where(ok, body_start + body_len, starts)
    props_at = topic_at + 1 + buf[topic_at]
    ok &= props_at + 2 <= ends
    props_at = np.where(ok, props_at, starts)
    ok &= props_at + 2 + _be_int(buf, props_at, 2) == ends
    return body_start, np.where(ok, body_start + body_len, body_start), ok


@dataclass(frozen=True)
class StoredMessage:
    """One unit decoded into Python values (for APIs and tests, not for bulk reads).

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
    out = list(map(object.__new__, repeat(StoredMessage, n)))
    deque(map(dict.update, map(vars, out), map(zip, repeat(_DECODED_FIELDS), rows)), maxlen=0)
    return out


def decode_messages(buf: bytes, starts: list[int]) -> list[StoredMessage]:
    """The units at ``starts`` of ``buf`` as StoredMessages (pull and query responses for the client
    API; bulk readers take a :class:`StoredBatch` or the Arrow decoder, and skip the objects).
    One struct unpack of the fixed header per unit and slices for the rest: the vectorised
    decoder's fixed cost per call is far above a lone unit's (~80 µs vs ~4 µs), and for many units
    gathering columns first measured no faster (allocating the objects dominates). Properties stay
    bytes until read."""
    return _new_messages(_unpacked_units(buf, starts), len(starts))


def _unpacked_units(buf: bytes, starts: list[int]) -> Iterator[tuple]:
    unpack = _HEADER.unpack_from
    topics: dict[bytes, str] = {}
    for start in starts:
        (_total, _magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp,
         born_host, store_timestamp, store_host, reconsume_times, _prepared, body_len) = unpack(buf, start)
        body_start = start + HEADER_SIZE
        topic_at = body_start + body_len
        topic_end = topic_at + 1 + buf[topic_at]
        props_end = topic_end + 2 + (buf[topic_end] << 8 | buf[topic_end + 1])
        topic_bytes = buf[topic_at + 1:topic_end]
        topic = topics.get(topic_bytes)
        if topic is None:
            topic = topics[topic_bytes] = topic_bytes.decode()
        body = buf[body_start:topic_at]
        if sys_flag & COMPRESSED_FLAG:
            body = _inflate(body)
        yield (topic, queue_id, queue_offset, physical_offset, body, buf[topic_end + 2:props_end], flag, sys_flag,
               body_crc, born_timestamp, born_host, store_timestamp, store_host, reconsume_times)


@dataclass(frozen=True, eq=False)
class StoredBatch:
    """Many units of one buffer as columns: the way to consume messages by the thousand.

    The fixed header of every unit is one numpy gather (``units.header``, big-endian ``HEADER``
    records; its fields are also native numpy columns); bodies, topics and hosts are lists
    built on first access by C-level maps (no Python bytecode per message); properties are
    decoded only when asked for. Row ``i`` holds the values ``decode_messages`` gives the unit at
    ``starts[i]`` (``batch[i]``, ``batch.messages()`` are those StoredMessages).

    Build one with :meth:`decode` or ``PullResult.batch()``. Immutable once built; columns are
    cached, so treat the returned arrays and lists as read-only.
    """

    buf: bytes
    units: UnitColumns

    @classmethod
    def decode(cls, buf: bytes, starts: np.ndarray | list[int]) -> StoredBatch:
        """The whole, self-consistent units of ``buf`` at ``starts`` (walked or from
        :func:`back_to_back_units`: lengths are read from the units unchecked)."""
        return cls(buf, decode_units(np.frombuffer(buf, dtype=np.uint8), np.asarray(starts, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, i: int) -> StoredMessage:
        return decode_messages(self.buf, [int(self.units.starts[i])])[0]

    def messages(self) -> list[StoredMessage]:
        """Every row as a StoredMessage (the per-message API, at its per-message cost)."""
        return decode_messages(self.buf, self.units.starts.tolist())

    def take(self, rows: np.ndarray | list[int]) -> StoredBatch:
        """The batch of ``rows`` only (e.g. the messages a filter kept), in the order given."""
        return StoredBatch(self.buf, self.units.take(np.asarray(rows, dtype=np.int64)))

    def with_tags(self, tags: Collection[str] | None) -> StoredBatch:
        """The messages whose TAGS property is one of ``tags`` (all of them when None)."""
        if tags is None:
            return self
        return self.take([i for i, tag in enumerate(self.tags) if tag in tags])

    def _slices(self, start: np.ndarray, end: np.ndarray) -> list[bytes]:
        return list(map(self.buf.__getitem__, map(slice, start.tolist(), end.tolist())))

    def _column(self, name: str, dtype: type = np.int64) -> np.ndarray:
        return self.units.header[name].astype(dtype)

    @cached_property
    def bodies(self) -> list[bytes]:
        """Every body as the consumer must see it (compressed ones inflated)."""
        return decompress_bodies(self._slices(self.units.body_start, self.units.body_end), self.sys_flags)

    @cached_property
    def topics(self) -> list[str]:
        """Every unit's topic (one decode per distinct topic: a pull holds one)."""
        raw = self._slices(self.units.topic_start, self.units.topic_end)
        names = {t: t.decode() for t in dict.fromkeys(raw)}
        return list(map(names.__getitem__, raw))

    @cached_property
    def properties(self) -> list[dict[str, str]]:
        """Every unit's properties, decoded on first access."""
        return list(map(decode_properties, self._slices(self.units.props_start, self.units.props_end)))

    @cached_property
    def tags(self) -> list[str | None]:
        return [p.get(TAGS) for p in self.properties]

    @property
    def keys(self) -> list[list[str]]:
        return list(map(keys_of, self.properties))

    @cached_property
    def queue_ids(self) -> np.ndarray:
        return self._column("queue_id", np.int32)

    @cached_property
    def queue_offsets(self) -> np.ndarray:
        return self._column("queue_offset")

    @cached_property
    def physical_offsets(self) -> np.ndarray:
        return self._column("physical_offset")

    @cached_property
    def flags(self) -> np.ndarray:
        return self._column("flag", np.int32)

    @cached_property
    def sys_flags(self) -> np.ndarray:
        return self._column("sys_flag", np.int32)

    @cached_property
    def body_crcs(self) -> np.ndarray:
        return self._column("body_crc", np.int32)

    @cached_property
    def born_timestamps(self) -> np.ndarray:
        return self._column("born_timestamp")

    @cached_property
    def store_timestamps(self) -> np.ndarray:
        return self._column("store_timestamp")

    @cached_property
    def reconsume_times(self) -> np.ndarray:
        return self._column("reconsume_times", np.int32)

    @cached_property
    def born_hosts(self) -> list[bytes]:
        """8-byte hosts (IPv4 + big-endian port), as ``StoredMessage.born_host``."""
        return self.units.header["born_host"].tolist()

    @cached_property
    def store_hosts(self) -> list[bytes]:
        return self.units.header["store_host"].tolist()
