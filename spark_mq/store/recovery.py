"""Bringing a store back to a consistent state at start-up.

The checkpoint's safe offset says everything below it (commitlog units, consume queue and
index entries) is on disk. Recovery therefore:

1. cuts every consume queue back to its first entry at or past the safe offset,
2. walks the commitlog from the safe offset, checking each unit's lengths and body CRC, up
   to the first blank-free gap, torn or corrupt unit (the end),
3. truncates the commitlog there (zeroing the stale tail, deleting later files), and
4. rebuilds consume queue and index entries for the units between safe offset and end.

On a full disk step 4 may need a consume queue or index file that cannot be created
(``DiskFullError``): the walk then only finds the end (nothing acknowledged is cut) and the
report's ``rebuild_from`` tells the store to ``rebuild`` from there once space returns (a
rebuild is safe to repeat: queues skip entries they have, the index keys it has).

After a clean shutdown the safe offset is the end and steps 2-4 read nothing. After a crash
(abort file present) they replay the unflushed tail. Without a valid checkpoint the walk
starts at the first commitlog file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from spark_mq.common.errors import CorruptFileError, DiskFullError
from spark_mq.common.java_hash import java_hash, java_hashes
from spark_mq.common.message_unit import decode_units, walk_units
from spark_mq.store.checkpoint import Checkpoint
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.dispatch import QueueFor, QueueRun, build_entries, dispatch_info
from spark_mq.store.index_service import IndexService
from spark_mq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

WALK_CHUNK_UNITS = 500_000  # bounds memory while walking a large file


@dataclass(frozen=True)
class RecoveryReport:
    abnormal: bool
    start_offset: int
    end_offset: int
    units_replayed: int
    stop_reason: str
    seconds: float
    last_store_timestamp: int  # newest store time seen (keeps store times monotonic)
    rebuild_from: int | None = None  # a full disk stopped the rebuild: entries from here still to build


def recover(
    commitlog: CommitLog,
    queues: Iterable[ConsumeQueue],
    queue_for: QueueFor,
    index: IndexService | None,
    checkpoint: Checkpoint,
    abnormal: bool,
    check_crc: bool,
) -> RecoveryReport:
    t0 = time.perf_counter()
    queues = list(queues)
    safe = _safe_offset(commitlog, checkpoint)
    verify_from = _verify_from(commitlog, safe) if abnormal else safe
    index_done = index.end_phys() if index is not None else -1
    last_ts = checkpoint.physic_msg_timestamp

    # phase 1, after a crash: re-check the units of the last safe file below the safe offset
    # (their queue and index entries exist already, so nothing is rebuilt unless one is bad)
    end, replayed, reason = safe, 0, "empty"
    if verify_from < safe:
        end, _, reason, _ = _walk(commitlog, verify_from, safe, check_crc, None)
    # phase 2: replay what lies past the safe offset, rebuilding queue and index entries
    rebuild_from = None
    if end == safe:
        for cq in queues:
            _cut_queue(cq, safe)
        try:
            end, replayed, reason, ts = _walk(commitlog, safe, None, check_crc, _replayer(queue_for, index, index_done))
        except DiskFullError as e:
            log.error("recovery: %s; consume queue and index entries from commitlog offset %d are built once space "
                      "is freed", e, safe)
            end, replayed, reason, ts = _walk(commitlog, safe, None, check_crc, None)
            rebuild_from = safe
        last_ts = max(last_ts, ts)
    if reason not in ("blank", "end", "zero", "empty"):
        log.warning("recovery: commitlog ends at %d: %s; the tail after it is discarded", end, reason)
    commitlog.files.truncate(end)
    for cq in queues:
        cq.truncate_past(end)
    report = RecoveryReport(abnormal, verify_from, end, replayed, reason, time.perf_counter() - t0, last_ts,
                            rebuild_from)
    log.info("recovery %s", report)
    return report


def rebuild(commitlog: CommitLog, start: int, queue_for: QueueFor, index: IndexService | None,
            check_crc: bool) -> tuple[int, int]:
    """Build the consume queue and index entries of every unit from ``start`` to the end (what a
    full disk stopped at start); returns (end, newest store time). Raises ``DiskFullError``
    while the disk still cannot take their files."""
    index_done = index.end_phys() if index is not None else -1
    end, _, _, ts = _walk(commitlog, start, None, check_crc, _replayer(queue_for, index, index_done))
    return end, ts


def _replayer(queue_for: QueueFor, index: IndexService | None,
              index_done: int) -> Callable[[MappedFile, np.ndarray], int]:
    def replay(mf: MappedFile, starts: np.ndarray) -> int:
        return _replay(mf.buf, starts, mf.file_from_offset, queue_for, index, index_done)

    return replay


def _walk(
    commitlog: CommitLog,
    start: int,
    stop: int | None,
    check_crc: bool,
    on_units: Callable[[MappedFile, np.ndarray], int] | None,
) -> tuple[int, int, str, int]:
    """Walk valid units from ``start`` up to ``stop`` (or the first invalid one), file by file,
    handing each run of units to ``on_units``; returns (end, units, stop reason, newest store
    time reported by ``on_units``)."""
    end, count, reason, last_ts = start, 0, "empty", 0
    mf = commitlog.files.find(start)
    while mf is not None:
        pos = max(start - mf.file_from_offset, 0)
        limit = mf.size if stop is None else min(mf.size, stop - mf.file_from_offset)
        while True:
            walk = walk_units(mf.mv, pos, limit, check_crc, max_units=WALK_CHUNK_UNITS)
            if walk.starts.size:
                count += int(walk.starts.size)
                if on_units is not None:
                    last_ts = max(last_ts, on_units(mf, walk.starts))
            pos = walk.end
            if walk.reason != "max":
                break
        end, reason = mf.file_from_offset + pos, walk.reason
        if stop is not None and end >= stop:
            return stop, count, "end", last_ts
        if walk.reason not in ("blank", "end"):
            break
        mf.reset_to(mf.size)  # full: continue in the next file
        end = mf.file_from_offset + mf.size
        mf = commitlog.files.find(end)
    return end, count, reason, last_ts


def _safe_offset(commitlog: CommitLog, checkpoint: Checkpoint) -> int:
    """Where the checkpoint says everything below is durable and dispatched."""
    lo, hi = commitlog.min_offset(), commitlog.max_offset()
    if not checkpoint.valid:
        if hi > lo:
            log.warning("recovery: no valid checkpoint, scanning the whole commitlog from %d", lo)
        return lo
    safe = checkpoint.safe_offset
    if safe < lo:
        return lo
    if safe > hi:
        log.error("recovery: checkpoint offset %d is past the commitlog end %d (files missing?)", safe, hi)
        return lo
    return safe


def _verify_from(commitlog: CommitLog, safe: int) -> int:
    """After a crash, re-check the whole last safe file (the one holding the last byte below
    the safe offset), as RocketMQ does: a damaged unit there is never served."""
    last_safe = commitlog.files.find(safe - 1) if safe > commitlog.min_offset() else None
    return last_safe.file_from_offset if last_safe is not None else safe


def _cut_queue(cq: ConsumeQueue, safe: int) -> None:
    """Drop entries whose unit is at or past ``safe``: they are rebuilt from the commitlog."""
    if cq.last_phys() >= safe:
        cq.truncate(cq.first_offset_at_or_after(safe))


def _replay(
    buf: np.ndarray,
    starts: np.ndarray,
    file_from: int,
    queue_for: QueueFor,
    index: IndexService | None,
    index_done: int,
) -> int:
    """Rebuild consume queue and index entries for the units at ``starts`` of one file;
    returns the newest store timestamp among them."""
    cols = decode_units(buf, starts)
    head = cols.header
    phys = starts + file_from
    qids = head["queue_id"].astype(np.int64)
    topic_hash = java_hashes(buf, cols.topic_start, cols.topic_end).astype(np.int64)
    _, first, inverse = np.unique((topic_hash << 32) | qids, return_index=True, return_inverse=True)
    topics = [bytes(buf[cols.topic_start[i] : cols.topic_end[i]]).decode() for i in first.tolist()]
    _check_no_collision(buf, cols, first, inverse)
    prefix = np.array([java_hash(t + "#") for t in topics], dtype=np.int64)[inverse]
    need_keys = index is not None and int(phys[-1]) > index_done  # else all already indexed
    info = dispatch_info(buf, cols.props_start, cols.props_end, prefix, with_keys=need_keys)
    runs = []
    for g, topic in enumerate(topics):
        rows = np.flatnonzero(inverse == g)
        qoff = head["queue_offset"][rows].astype(np.int64)
        if qoff.size > 1 and not np.all(np.diff(qoff) == 1):
            bad = int(np.flatnonzero(np.diff(qoff) != 1)[0]) + 1
            raise CorruptFileError(
                "commitlog", int(phys[rows[bad]]), f"queue offsets of {topic}:{int(qids[rows[0]])} jump"
            )
        runs.append(QueueRun(topic, int(qids[rows[0]]), int(qoff[0]), rows))
    store_ts = head["store_timestamp"].astype(np.int64)
    build_entries(runs, phys, head["total_size"].astype(np.int64), store_ts, info, queue_for, index, index_done)
    return int(store_ts.max())


def _check_no_collision(buf: np.ndarray, cols, first: np.ndarray, inverse: np.ndarray) -> None:
    """Two topics with one Java hash would be grouped together: refuse rather than mix them."""
    lengths = cols.topic_end - cols.topic_start
    ref_len = lengths[first][inverse]
    if np.any(lengths != ref_len):
        raise CorruptFileError("commitlog", 0, "two topics share a hash in one recovery chunk")
    width = int(lengths.max())
    span = np.arange(width)
    mask = span[None, :] < lengths[:, None]
    cells = np.minimum(cols.topic_start[:, None] + span, buf.size - 1)
    mine = np.where(mask, buf[cells], 0)
    ref = mine[first][inverse]
    if np.any(mine != ref):
        raise CorruptFileError("commitlog", 0, "two topics share a hash in one recovery chunk")
