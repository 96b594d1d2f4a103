"""Whether units are whole and intact: inner lengths, header fields and body CRCs, all vectorised
(the CRCs of small bodies in one native call, else one C-level crc32 call a unit); a read of a few units
is checked one unit at a time with ``struct`` (``served_fault_at``).

Used where bytes come from a disk or a peer and must be trusted before they are served: the chain
walker, the store's recovery and replication, and the store's check of what a read returns.

Thread-safety: pure functions of their arguments (the buffers must not change meanwhile).
"""

from __future__ import annotations

from spark_mq.common.buffers import gather_records
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit import native
from spark_mq.common.unit.crc import body_crc, body_crcs
from spark_mq.common.unit.encode import NATIVE_MAX_MEAN_BODY
from spark_mq.common.unit.layout import (
    CRC_MASK,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    MIN_UNIT_SIZE,
    UnitRanges,
    header_field,
    header_record,
    header_struct,
    unit_fits_at,
    unit_ranges,
)


def lengths_fit(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, body_length: np.ndarray | None = None
) -> tuple[UnitRanges, np.ndarray]:
    """Where the parts of units ``[starts, ends)`` of ``buf`` (uint8) lie, and whether body, topic
    and properties lengths add up to each unit's size (whatever the bytes say, nothing is read
    outside ``buf``). ``body_length``: the units' BODY length fields (int64), when the caller has
    gathered them already."""
    if body_length is None:
        body_length = header_field(buf, starts, "body_length")
    ranges = unit_ranges(buf, starts, body_length)
    return ranges, ranges.fit(ends)


def _body_ends(ranges: UnitRanges, fit: np.ndarray) -> np.ndarray:
    """Where each body ends, or an empty body where the lengths do not fit (a CRC over it stays cheap)."""
    return np.where(fit, ranges.body_end, ranges.body_start)


def crc_mismatch(mv: memoryview, starts: np.ndarray, body_start: np.ndarray, body_end: np.ndarray) -> np.ndarray:
    """Whether each unit's stored BODYCRC differs from its body's CRC (one C-level crc32 a unit)."""
    stored = header_field(np.frombuffer(mv, dtype=np.uint8), starts, "body_crc")
    return body_crc_mismatch(mv, stored, body_start, body_end)


def body_crc_mismatch(mv: memoryview, stored: np.ndarray, body_start: np.ndarray, body_end: np.ndarray) -> np.ndarray:
    """``crc_mismatch`` with the units' BODYCRC fields (``stored``) gathered already. Small bodies
    (a mean up to the native encoder's bound) in one call of the native library when it is built
    (no Python step a body); larger ones by ISA-L's SIMD crc32, one call a body."""
    n = body_start.size
    if native.BODY_CRCS is not None and n and int((body_end - body_start).sum()) <= n * NATIVE_MAX_MEAN_BODY:
        buf = np.frombuffer(mv, dtype=np.uint8)
        crcs = np.empty(n, dtype=np.int64)
        if native.BODY_CRCS(buf.ctypes.data, buf.size, np.ascontiguousarray(body_start, dtype=np.int64).tobytes(),
                            np.ascontiguousarray(body_end, dtype=np.int64).tobytes(), n,
                            crcs.ctypes.data, CRC_MASK) == 0:
            return crcs != stored
    bodies = map(mv.__getitem__, map(slice, body_start.tolist(), body_end.tolist()))
    return body_crcs(bodies, n) != stored


@lazy_dataclass(frozen=True)
class UnitFaults(LazyDataclass):
    """What ``unit_faults`` found, with the fixed headers it read (callers take their columns
    from them instead of gathering the fields again)."""

    damaged: np.ndarray  # bool per unit
    readable: np.ndarray  # bool per unit: inner lengths hold, so the topic can be located
    header: np.ndarray  # header_record() records
    body_end: np.ndarray  # where each readable unit's topic length byte is
    ranges: UnitRanges  # where each unit's parts lie (meaningful where readable)


def unit_faults(mv: memoryview, starts: np.ndarray, end: int, base: int, check_crc: bool) -> UnitFaults:
    """The faults of every unit of a chain (``follow_chain``: ``starts`` and its ``end``) of a
    buffer whose byte 0 is commitlog offset ``base``. Damaged although the chain holds: inner
    lengths that do not add up (then not readable either: its topic cannot be located), a
    PHYSICALOFFSET other than the unit's position, a negative QUEUEID, or (with ``check_crc``) a
    wrong body CRC. All vectorised but the crc32 calls; the headers are gathered once."""
    buf = np.frombuffer(mv, dtype=np.uint8)
    head = gather_records(buf, starts, header_record())
    ranges, readable = lengths_fit(buf, starts, np.append(starts[1:], end), head["body_length"].astype(np.int64))
    body_end = _body_ends(ranges, readable)
    damaged = ~readable
    damaged |= head["physical_offset"] != starts + base
    damaged |= head["queue_id"] < 0
    if check_crc:
        damaged |= body_crc_mismatch(mv, head["body_crc"], ranges.body_start, body_end)
    return UnitFaults(damaged, readable, head, body_end, ranges)


_SERVED_FIELDS = header_struct(("total_size", "magic", "body_crc", "queue_id", "queue_offset", "physical_offset",
                                "body_length"))


def served_fault_at(data: bytes, start: int, size: int, queue_id: int, queue_offset: int, phys: int) -> bool:
    """``served_faults`` of the one unit at ``start`` of ``data``, with ``struct`` and one CRC call (a read of a
    few units: no numpy's fixed costs)."""
    if size < MIN_UNIT_SIZE or start + size > len(data):
        return True
    total, magic, stored_crc, qid, qoff, at, body_length = _SERVED_FIELDS.unpack_from(data, start)
    if (magic != MESSAGE_MAGIC or total != size or qid != queue_id or qoff != queue_offset or at != phys
            or not unit_fits_at(data, start, start + size)):
        return True
    body_start = start + HEADER_SIZE
    return body_crc(memoryview(data)[body_start : body_start + body_length]) != stored_crc


def served_faults(
    data: bytes, sizes: np.ndarray, queue_id: int, queue_offsets: np.ndarray, phys: np.ndarray
) -> np.ndarray:
    """Which of the units back to back in ``data`` (a read's result) are damaged: a header other
    than their consume queue entries promise (MAGICCODE, TOTALSIZE, QUEUEID, QUEUEOFFSET,
    PHYSICALOFFSET), inner lengths that do not add up, or a wrong body CRC."""
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    buf = np.frombuffer(data, dtype=np.uint8)
    head = gather_records(buf, starts, header_record())
    bad = ((head["magic"] != MESSAGE_MAGIC) | (head["total_size"] != sizes) | (head["queue_id"] != queue_id)
           | (head["queue_offset"] != queue_offsets) | (head["physical_offset"] != phys))
    ranges, readable = lengths_fit(buf, starts, starts + sizes, head["body_length"].astype(np.int64))
    crc_wrong = body_crc_mismatch(memoryview(data), head["body_crc"], ranges.body_start, _body_ends(ranges, readable))
    return bad | ~readable | crc_wrong
