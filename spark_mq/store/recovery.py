"""Bringing a store back to a consistent state at start-up, after a clean stop or a crash.

The checkpoint's safe offset says everything below it (commitlog units, consume queue and
index entries) is on disk. On every start recovery checks a region of the commitlog against
the consume queues: the last ``checkCRCOnRecoverFiles`` files (RocketMQ checks the last 3),
after a crash also the whole file holding the safe offset, and everything past the safe
offset. It

1. (after a crash) cuts every consume queue back to its first entry at or past the safe offset,
2. walks the region's TOTALSIZE/MAGICCODE chain up to a blank-free gap or a broken link (the
   end), and checks every unit (inner lengths, PHYSICALOFFSET, QUEUEID, body CRC) in batch;
   after a crash the body CRCs of the units below the safe offset are left to a background pass
   (``DeferredCrc``: the CRC is most of a check's cost, and those units' entries are durable),
   reads checking such units themselves until it is done,
3. (after a crash) treats damaged units past the safe offset with no intact unit behind them as
   a torn tail and ends the commitlog before them,
4. truncates the commitlog at the end (zeroing the stale tail, deleting later files), and
5. reconciles every topic queue with its units in the region: entries that already point at
   the right units stay (the common case: one vectorised comparison per queue), missing or
   wrong ones are rebuilt from the units (with index entries for units not yet indexed), and
   a damaged unit whose chain holds is quarantined: logged, counted, and its entry kept but
   marked (``QUARANTINED_TAG``), so reads skip it and its queue offset is never reused. A unit
   whose QUEUEOFFSET disagrees with the run of its queue's offsets is damaged too.

On a full disk step 5 may need a consume queue or index file that cannot be created
(``DiskFullError``): the walk has found the end all the same (nothing acknowledged is cut), and
the report's ``rebuild_from`` tells the store to ``rebuild`` from there once space returns (a
rebuild is step 5 again: entries already right stay, the index keys units it has not yet).

Without a valid checkpoint the region is the whole commitlog.

This module orders the steps; the walk and its checks (step 2) are ``unit_walk``'s, the CRCs left
for later ``deferred_crc``'s, and step 5 ``reconcile``'s. ``check_region`` runs steps 2 and 5 as
checks only while the store serves (``unit_checks``), ``rebuild`` step 5 again after a full disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import field

from spark_mq.common.config_dataclass import config_dataclass
from spark_mq.common.errors import DiskFullError
from spark_mq.common.lazy_numpy import np
from spark_mq.store.checkpoint import Checkpoint
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.deferred_crc import DeferredCrc
from spark_mq.store.dispatch import QueueFor
from spark_mq.store.index_service import IndexService
from spark_mq.store.reconcile import Reconcile
from spark_mq.store.unit_walk import CLEAN_ENDS, Chunk, walk

log = logging.getLogger(__name__)


@config_dataclass
class RecoveryReport:
    """What a store's start found and did (one per start: its methods shared, as a config's, not compiled)."""

    abnormal: bool
    start_offset: int  # where the checked region begins
    end_offset: int
    units_replayed: int  # consume queue entries written (rebuilt) by recovery
    stop_reason: str
    seconds: float
    last_store_timestamp: int  # newest store time seen (keeps store times monotonic)
    units_checked: int = 0
    quarantined: int = 0  # damaged units (and entries without a unit) found and quarantined
    damaged: tuple[int, ...] = field(default=(), repr=False, compare=False)  # their commitlog offsets
    safe_offset: int = 0  # the checkpoint's: units of unknown queues below it belong to deleted topics
    rebuild_from: int | None = None  # a full disk stopped step 5: entries from here still to build
    crc_later_below: int | None = None  # body CRCs of the units below it are checked in the background



def recover(
    commitlog: CommitLog,
    queues: Iterable[ConsumeQueue],
    queue_for: QueueFor,
    index: IndexService | None,
    checkpoint: Checkpoint,
    abnormal: bool,
    check_crc: bool,
    check_files: int,
    defer_crc: bool = False,
    replica: bool = False,
    delays_ms: tuple[int, ...] | None = None,
) -> tuple[RecoveryReport, DeferredCrc | None]:
    """The report, and with ``defer_crc`` (after a crash) the body CRCs of the units below the safe
    offset, left for the caller to check while serving (see ``DeferredCrc``; None if there are none).

    ``replica``: a slave's store. After a crash its last unit may be only the first bytes of one (a
    transfer from the master ends anywhere), the zeros after them where no check looks (the topic or
    the properties: the CRC covers the body only), and the checkpoint may be past it (the flush took
    what had arrived): the commitlog then ends before its last unit, which the master sends again.

    ``delays_ms``: the delay levels, for the due times of rebuilt schedule-topic entries."""
    t0 = time.perf_counter()
    queues = list(queues)
    safe = _safe_offset(commitlog, checkpoint)
    start = check_from(commitlog, safe, abnormal, check_files)
    if abnormal:
        for cq in queues:
            _cut_queue(cq, safe)
    deferred = DeferredCrc(safe) if defer_crc and check_crc and start < safe else None
    chunks, end, reason = walk(commitlog, start, None, check_crc, deferred=deferred)
    if reason not in CLEAN_ENDS:
        log.warning("recovery: commitlog ends at %d: %s; the tail after it is discarded", end, reason)
    if abnormal:
        end = _torn_tail(chunks, safe, end)
        if replica:
            end = _drop_last_unit(chunks, end)
            if deferred is not None:
                deferred.forget_from(end)
    commitlog.files.truncate(end)
    if index is not None:
        if abnormal:  # slots an insert had set when the crash came, before it published their entries
            index.repair_unpublished_heads()
        index.truncate_past(end)  # entries of units past the end (a torn tail, a truncation a crash cut short)
    rec = Reconcile(chunks, queue_for, index, start, safe, end, delays_ms)
    rebuild_from = None
    try:
        rec.run(queues)
    except DiskFullError as e:
        log.error("recovery: %s; consume queue and index entries from commitlog offset %d are built once space "
                  "is freed", e, start)
        rebuild_from = start
    for cq in queues:
        cq.truncate_past(end)
    last_ts = max(checkpoint.physic_msg_timestamp, rec.last_ts)
    if deferred is not None and not deferred.parts:
        deferred = None
    report = RecoveryReport(abnormal, start, end, rec.rebuilt, reason, time.perf_counter() - t0, last_ts,
                            sum(c.starts.size for c in chunks), rec.quarantined, rec.damaged(),
                            safe, rebuild_from, None if deferred is None else deferred.below)
    log.info("recovery %s", report)
    return report, deferred


def rebuild(commitlog: CommitLog, queues: Iterable[ConsumeQueue], start: int, safe: int, queue_for: QueueFor,
            index: IndexService | None, check_crc: bool, delays_ms: tuple[int, ...] | None = None
            ) -> tuple[int, int, tuple[int, ...]]:
    """Step 5 of ``recover`` again from ``start`` (what a full disk stopped at start-up), once the
    disk takes the files; returns (end, newest store time, damaged units' offsets). Raises
    ``DiskFullError`` while it still cannot."""
    chunks, end, _ = walk(commitlog, start, commitlog.max_offset(), check_crc)
    rec = Reconcile(chunks, queue_for, index, start, safe, end, delays_ms)
    rec.run(list(queues))
    return end, rec.last_ts, rec.damaged()


def check_region(
    commitlog: CommitLog, queues: Iterable[ConsumeQueue], start: int, end: int, check_crc: bool,
    stop: threading.Event,
) -> tuple[tuple[int, ...], bool]:
    """The checks of ``recover`` over ``[start, end)`` while the store runs (after a clean stop
    whose queues all ended where they had, see ``clean_stop``): damaged units and wrong entries
    are quarantined, nothing is rebuilt or truncated. Returns the commitlog offsets of the
    damaged units found and whether something needs the next start's rebuild (a broken chain,
    units without entries); an early return when ``stop`` is set."""
    t0 = time.perf_counter()
    chunks, _, reason = walk(commitlog, start, end, check_crc, stop)
    if stop.is_set():
        return (), False
    broken = reason not in CLEAN_ENDS
    if broken:
        log.error("start-up check: the commitlog unit chain breaks before %d: %s (the next start truncates there)",
                  end, reason)
    rec = Reconcile(chunks, None, None, start, end, end)
    rec.run(list(queues))
    log.info("start-up check of commitlog [%d, %d): %d units, %d quarantined, %.2f s", start, end,
             sum(c.starts.size for c in chunks), rec.quarantined, time.perf_counter() - t0)
    return rec.damaged(), broken or rec.unrepaired > 0


def _torn_tail(chunks: list[Chunk], safe: int, end: int) -> int:
    """After a crash, damaged units past the safe offset with no intact unit after them are a
    write torn by the crash, not data: the commitlog ends before the first of them."""
    cut = end
    while chunks:
        ch = chunks[-1]
        good = np.flatnonzero(~ch.damaged)
        tail = ch.starts[good[-1] + 1:] if good.size else ch.starts
        tail = tail[tail + ch.mf.file_from_offset >= safe]
        if tail.size == 0:
            break
        keep = ch.starts.size - tail.size
        cut = ch.mf.file_from_offset + int(tail[0])
        log.warning("recovery: %d damaged units at the end of %s from position %d are a torn write: discarded",
                    tail.size, ch.mf.path.name, int(tail[0]))
        if keep:
            chunks[-1] = ch.head(keep)
            break
        chunks.pop()
    return cut


def _drop_last_unit(chunks: list[Chunk], end: int) -> int:
    """A slave's store after a crash: the commitlog ends before its last unit (see ``recover``)."""
    while chunks and not chunks[-1].starts.size:
        chunks.pop()
    if not chunks:
        return end
    ch = chunks[-1]
    cut = ch.mf.file_from_offset + int(ch.starts[-1])
    log.info("recovery: a slave's last unit (commitlog offset %d) may hold only the first bytes a transfer cut off "
             "by the crash brought: dropped, its master sends it again", cut)
    if ch.starts.size > 1:
        chunks[-1] = ch.head(ch.starts.size - 1)
    else:
        chunks.pop()
    return cut


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


def check_from(commitlog: CommitLog, safe: int, abnormal: bool, check_files: int) -> int:
    """Start of the checked region: the last ``check_files`` commitlog files, after a crash also
    the whole file holding the last byte below the safe offset (as RocketMQ re-checks it), and
    everything past the safe offset."""
    start = safe
    files = commitlog.files.files
    if check_files > 0 and files:
        start = min(start, files[-min(check_files, len(files))].file_from_offset)
    if abnormal and safe > commitlog.min_offset():
        last_safe = commitlog.files.find(safe - 1)
        if last_safe is not None:
            start = min(start, last_safe.file_from_offset)
    return max(start, commitlog.min_offset())


def _cut_queue(cq: ConsumeQueue, safe: int) -> None:
    """Drop entries whose unit is at or past ``safe``: they are rebuilt from the commitlog."""
    if cq.last_phys() >= safe:
        cq.truncate(cq.first_offset_at_or_after(safe))
