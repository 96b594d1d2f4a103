"""A slave's append records: the units its master's bytes brought, read back in bulk.

A slave appends raw commitlog bytes (``CommitLog.append_raw``) and has no ``AppendRecord`` of a
put to hand its ``Dispatcher``. ``read_replicated`` makes them from the bytes: it follows the
unit chain over the new stretch (``follow_chain``), checks every unit as recovery does
(``unit_faults``: inner lengths, PHYSICALOFFSET, QUEUEID, body CRC) and cuts the units into runs
of one topic queue with consecutive queue offsets and one store time (a master's put batch
is one such run), all in a few vectorised passes per file, never a Python step per unit. The
Dispatcher then builds their entries exactly as it builds a master's.

The bytes are new, at the slave's end, so nothing about existing entries is checked; only
that each run continues its queue (``next_offset``). Whatever is out of line (a damaged unit, a
broken chain, a run that does not continue its queue) is left to the caller as ``trouble``,
with ``end`` where the good units stop: recovery's ``rebuild`` then quarantines or reports it
like a start-up would, rather than this path building entries for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from spark_mq.common.buffers import ranges_equal
from spark_mq.common.java_hash import java_hashes
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.chain import follow_chain
from spark_mq.common.unit.check import unit_faults
from spark_mq.common.unit.layout import MESSAGE_MAGIC, MIN_UNIT_SIZE, SIZE_MAGIC, UnitRanges
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.dispatch import AppendRecord
from spark_mq.store.mapped_file import MappedFile


@lazy_dataclass
class ReplicatedUnits(LazyDataclass):
    records: list[AppendRecord] = field(default_factory=list)
    end: int = 0  # commitlog offset after the last unit read (where the next read starts)
    trouble: str | None = None  # why the units from ``end`` need recovery's rebuild (None: none do)


def read_replicated(commitlog: CommitLog, start: int, end: int, next_offset: Mapping[tuple[str, int], int],
                    check_crc: bool) -> ReplicatedUnits:
    """Append records of the whole units in ``[start, end)`` (``start`` begins a unit or a file's
    blank; a unit the bytes end inside waits for the next call). ``next_offset`` gives each known
    topic queue's next queue offset."""
    out = ReplicatedUnits(end=start)
    expected = dict(next_offset)  # moved on by the runs read here
    while out.end < end and out.trouble is None:
        mf = commitlog.files.find(out.end)
        if mf is None:
            break
        base = mf.file_from_offset
        limit = min(mf.size, end - base)
        chain = follow_chain(mf.mv, out.end - base, limit)
        if chain.starts.size:
            faults = unit_faults(mf.mv, chain.starts, chain.end, base, check_crc)
            if faults.damaged.any():
                out.trouble = f"damaged units in the replicated bytes from commitlog offset {out.end}"
                break
            runs = _runs(mf, chain.starts, faults.header, faults.ranges, expected)
            if runs is None:
                out.trouble = f"queue offsets out of line in the replicated bytes from commitlog offset {out.end}"
                break
            out.records += runs
        out.end = base + (mf.size if chain.reason == "blank" else chain.end)
        if out.end == base + mf.size:
            continue  # the file is closed (its blank read): the next unit opens the next file
        if limit == mf.size or not _unit_waits(mf, chain.end, limit):
            out.trouble = f"the unit chain breaks at commitlog offset {out.end}: {chain.reason}"
        break  # else the bytes end inside a unit: it waits for the rest
    return out


def _runs(mf: MappedFile, starts: np.ndarray, head: np.ndarray, ranges: UnitRanges,
          expected: dict[tuple[str, int], int]) -> list[AppendRecord] | None:
    """One record per run of units of one queue, consecutive queue offsets and one store time
    (intact units of one file, in commitlog order); None when a run does not continue its queue."""
    buf = mf.buf
    size = head["total_size"].astype(np.int64)
    qid = head["queue_id"].astype(np.int64)
    qoff = head["queue_offset"].astype(np.int64)
    ts = head["store_timestamp"].astype(np.int64)
    topic_start, topic_end = ranges.topic_start, ranges.topic_end
    props_len = ranges.props_end - ranges.props_start
    key = (java_hashes(buf, topic_start, topic_end).astype(np.int64) << 32) | qid
    topics = _topics(buf, key, topic_start, topic_end)
    if topics is None:
        return None
    bounds = np.flatnonzero((key[1:] != key[:-1]) | (ts[1:] != ts[:-1]) | (qoff[1:] != qoff[:-1] + 1)) + 1
    phys = starts + mf.file_from_offset
    records = []
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), starts.size], strict=True):
        name = (topics[int(key[lo])], int(qid[lo]))
        first = int(qoff[lo])
        if expected.get(name, first) != first:
            return None
        expected[name] = first + hi - lo
        records.append(AppendRecord(name[0], name[1], first, phys[lo:hi], size[lo:hi],
                                    bytes(mf.mv[int(starts[lo]):int(starts[hi - 1] + size[hi - 1])]),
                                    props_len[lo:hi], int(ts[lo])))
    return records


def _topics(buf: np.ndarray, key: np.ndarray, topic_start: np.ndarray, topic_end: np.ndarray) -> dict[int, str] | None:
    """The topic of each queue key (its topic's hash and queue id); None when two topics share a
    hash (never grouped together: the caller leaves such units to recovery)."""
    keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    topics: dict[int, str] = {}
    for k, (value, row) in enumerate(zip(keys.tolist(), first.tolist(), strict=True)):
        name = bytes(buf[int(topic_start[row]):int(topic_end[row])])
        rows = np.flatnonzero(inverse == k) if keys.size > 1 else slice(None)
        if not ranges_equal(buf, topic_start[rows], topic_end[rows], name).all():
            return None
        topics[value] = name.decode("utf-8", "replace")
    return topics


def _unit_waits(mf: MappedFile, pos: int, limit: int) -> bool:
    """Whether the bytes from ``pos`` to ``limit`` may begin a unit the next transfer completes: a
    message unit whose size fits in the file (or too few bytes yet to tell)."""
    if limit - pos < SIZE_MAGIC.size:
        return True
    size, magic = SIZE_MAGIC.unpack_from(mf.mv, pos)
    return magic == MESSAGE_MAGIC and MIN_UNIT_SIZE <= size <= mf.size - pos
