"""Finding the units of a buffer: the TOTALSIZE chain followed from a start (``follow_chain``,
``walk_units``) or checked over a whole pull body at once (``chained_unit_starts``).

Following the chain is the one inherently sequential step of reading units; it is done without a
Python step per unit by testing every offset that holds the message magic and linking the
candidates with numpy. Used by the store (writes, recovery, replication), the remoting codec, the
client and the Arrow decoder.

Thread-safety: pure functions of their arguments (the buffers must not change meanwhile).
"""

from __future__ import annotations

from spark_mq.common.buffers import byte_positions, gather_records
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.check import crc_mismatch, lengths_fit
from spark_mq.common.unit.layout import (
    BLANK_MAGIC,
    MAGIC_OFFSET,
    MESSAGE_MAGIC,
    MIN_UNIT_SIZE,
    SIZE_MAGIC,
    size_magic_record,
)

_MAGIC_FIRST_BYTE = MESSAGE_MAGIC.to_bytes(4, "big", signed=True)[0]
_CHAIN_WINDOW = 1 << 24  # bytes of unit starts follow_chain links per vectorised step
_VECTOR_CHAIN_MIN_BYTES = 1 << 16  # below this a Python step per unit is cheaper than numpy's fixed costs


def chained_unit_starts(data: np.ndarray) -> np.ndarray | None:
    """Starts of the units of ``data`` (uint8) when it is units back to back (a pull body), found
    without a Python step per unit; None when this quick test cannot tell (walk the units then).

    Every offset whose MAGICCODE field holds the message magic is a candidate, and when each
    candidate's TOTALSIZE leads exactly to the next one (the first at 0, the last ending the
    buffer) the candidates are the units. Their inner lengths are not checked here."""
    if data.size < MIN_UNIT_SIZE:
        return None
    at, sizes = _magic_candidates(data, 0, data.size - SIZE_MAGIC.size + 1)
    ends = at + sizes
    if at.size and at[0] == 0 and ends[-1] == data.size and np.array_equal(ends[:-1], at[1:]):
        return at
    return None


def _magic_candidates(data: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets in ``[lo, hi)`` whose MAGICCODE field (4 bytes on) holds the message magic, and the
    TOTALSIZE (int64) at each: a superset of the unit starts there (a body may hold the magic)."""
    at = byte_positions(data[lo + MAGIC_OFFSET : hi + MAGIC_OFFSET], np.equal, _MAGIC_FIRST_BYTE) + lo
    heads = gather_records(data, at, size_magic_record())
    is_unit = heads["magic"] == MESSAGE_MAGIC
    return at[is_unit], heads["total_size"][is_unit].astype(np.int64)


def back_to_back_units(data: np.ndarray) -> np.ndarray | None:
    """``chained_unit_starts`` whose units are also self-consistent (body, topic and properties
    lengths add up to each unit's size), so ``decode_units`` may read them; None otherwise."""
    starts = chained_unit_starts(data)
    if starts is None:
        return None
    _, consistent = lengths_fit(data, starts, np.append(starts[1:], data.size))
    return starts if consistent.all() else None


@lazy_dataclass(frozen=True)
class WalkResult(LazyDataclass):
    """Where a walk over consecutive units stopped and why (made at its first instance: a clean restart walks
    nothing before it serves)."""

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
    ranges, consistent = lengths_fit(buf, starts, np.append(starts[1:], chain.end))
    bad = np.flatnonzero(~consistent)
    first_bad = int(bad[0]) if bad.size else starts.size
    why = f"unit at {int(starts[first_bad])} has inconsistent lengths" if bad.size else chain.reason
    if check_crc and first_bad:
        ok = slice(first_bad)
        wrong = np.flatnonzero(crc_mismatch(mv, starts[ok], ranges.body_start[ok], ranges.body_end[ok]))
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
        buf = None
        while count < max_units and pos < limit:
            if pos > limit - SIZE_MAGIC.size or SIZE_MAGIC.unpack_from(mv, pos)[1] != MESSAGE_MAGIC:
                break  # no unit starts here (a log's end): no window of candidates to scan (16 MiB of pages)
            if buf is None:
                buf = np.frombuffer(mv, dtype=np.uint8)
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
    hi = min(window_end, limit - SIZE_MAGIC.size + 1)  # a unit's size and magic must fit before the limit
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


def stop_reason(mv: memoryview, pos: int, limit: int) -> str | None:
    """Why the chain ends at ``pos`` (``follow_chain``'s rules for one unit), None when a unit starts there.
    A ``struct`` read: where a log ends (a clean start's recovery) it is answered without numpy."""
    if pos > limit - SIZE_MAGIC.size:  # a unit's size and magic must fit before the limit
        return "end"
    size, magic = SIZE_MAGIC.unpack_from(mv, pos)
    if magic != MESSAGE_MAGIC:
        return "blank" if magic == BLANK_MAGIC else ("zero" if size == 0 and magic == 0 else "bad magic")
    if size < MIN_UNIT_SIZE or pos + size > limit:
        return f"unit size {size} does not fit"
    return None


def _step_chain(mv: memoryview, start: int, limit: int, max_units: int) -> WalkResult:
    """``follow_chain`` one unit per Python step (``stop_reason`` says why it ends)."""
    found: list[int] = []
    append = found.append
    unpack = SIZE_MAGIC.unpack_from
    pos = start
    last = limit - SIZE_MAGIC.size  # a unit's size and magic must fit before the limit
    for _ in range(min(max_units, (limit - start) // MIN_UNIT_SIZE + 1)):
        if pos <= last:
            size, magic = unpack(mv, pos)
            if magic == MESSAGE_MAGIC and MIN_UNIT_SIZE <= size and pos + size <= limit:
                append(pos)
                pos += size
                continue
        reason = stop_reason(mv, pos, limit)
        break
    else:
        reason = "max" if pos <= last else "end"
    return WalkResult(np.array(found, dtype=np.int64), pos, reason)


