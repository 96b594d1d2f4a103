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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

import numpy as np

from spark_mq.common.buffers import ranges_equal
from spark_mq.common.columns import Columns
from spark_mq.common.delay_levels import SCHEDULE_TOPIC, due_tag_codes
from spark_mq.common.errors import CorruptFileError, DiskFullError
from spark_mq.common.java_hash import java_hash, java_hashes
from spark_mq.common.unit.batch import decode_units
from spark_mq.common.unit.chain import follow_chain
from spark_mq.common.unit.check import UnitFaults, body_crc_mismatch, unit_faults
from spark_mq.common.unit.layout import HEADER_SIZE, SIZE_MAGIC
from spark_mq.store.checkpoint import Checkpoint
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.dispatch import QueueFor, dispatch_info
from spark_mq.store.index_service import IndexService
from spark_mq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

WALK_CHUNK_UNITS = 500_000  # bounds memory while walking a large file
CRC_BATCH_UNITS = 20_000  # body CRCs a background check computes per step (~5 ms holding the GIL)


@dataclass(frozen=True)
class RecoveryReport:
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


@dataclass(frozen=True)
class _Units(Columns):
    """Readable units of the region (all, or one queue's), commitlog order."""

    chunk_of: np.ndarray  # which _Chunk
    phys: np.ndarray
    qoff: np.ndarray
    size: np.ndarray
    damaged: np.ndarray
    qid: np.ndarray
    body_end: np.ndarray  # in the chunk's file: where the topic length byte is


@dataclass
class _Chunk:
    """Units of one mapped file found by one walk step, with the header fields reconciling needs
    (taken from the headers ``unit_faults`` gathered: the units are read once)."""

    mf: MappedFile
    starts: np.ndarray  # positions in the file
    damaged: np.ndarray  # bool per unit
    readable: np.ndarray  # bool per unit: inner lengths hold, so the topic can be read
    qoff: np.ndarray
    size: np.ndarray
    qid: np.ndarray
    body_end: np.ndarray  # in the file; where readable, the topic length byte is there
    last_ts: int  # newest store time of the readable units

    @classmethod
    def of(cls, mf: MappedFile, starts: np.ndarray, faults: UnitFaults) -> _Chunk:
        head = faults.header
        ts = head["store_timestamp"][faults.readable]
        return cls(mf, starts, faults.damaged, faults.readable, head["queue_offset"].astype(np.int64),
                   head["total_size"].astype(np.int32), head["queue_id"].astype(np.int32), faults.body_end,
                   int(ts.max()) if ts.size else 0)

    def head(self, keep: int) -> _Chunk:
        """The first ``keep`` units only."""
        return _Chunk(self.mf, *(getattr(self, f.name)[:keep] for f in fields(self)[1:-1]), self.last_ts)


@dataclass
class DeferredCrc:
    """The body CRCs a start after a crash leaves to a background pass: those of the units below
    the checkpoint's safe offset (everything else about them is checked before serving). Reads
    check such units themselves until the pass is done, so none is ever served unchecked."""

    below: int  # commitlog offset: units before it are deferred
    parts: list[tuple[MappedFile, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    # (file, unit starts, body ends, stored BODYCRCs) of the units found intact otherwise

    def split(self, mf: MappedFile, starts: np.ndarray, faults: UnitFaults) -> None:
        """Keep the CRCs of the units of ``starts`` (``faults`` found without CRCs) below ``below``
        for later, check the others' now (into ``faults.damaged``)."""
        n = int(np.searchsorted(starts, self.below - mf.file_from_offset))
        if n:
            ok = ~faults.damaged[:n]  # damaged already: nothing left to find
            self.parts.append((mf, starts[:n][ok], faults.body_end[:n][ok],
                               faults.header["body_crc"][:n][ok].astype(np.int64)))  # a copy: the headers go
        if n < starts.size:
            faults.damaged[n:] |= body_crc_mismatch(mf.mv, faults.header["body_crc"][n:], starts[n:] + HEADER_SIZE,
                                                    faults.body_end[n:])

    def forget_from(self, offset: int) -> None:
        """The units at and after ``offset`` are gone (a slave's dropped last unit): none to check."""
        self.parts = [(mf, starts[keep], body_end[keep], stored[keep]) for mf, starts, body_end, stored in self.parts
                      for keep in (starts + mf.file_from_offset < offset,)]

    def check(self, commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue],
              stop: threading.Event) -> np.ndarray | None:
        """Check the deferred CRCs ``CRC_BATCH_UNITS`` at a time (a batch holds the GIL, a running
        broker's event loop waits that long) and quarantine the entries of the damaged units;
        returns their commitlog offsets (None when ``stop`` cut it short)."""
        found: list[np.ndarray] = []
        for mf, starts, body_end, stored in self.parts:
            mv = mf.mv  # held: a file retention deletes meanwhile stays mapped until this view goes
            if len(mv) == 0:  # deleted already: nothing of it is served any more
                continue
            for lo in range(0, starts.size, CRC_BATCH_UNITS):
                if stop.is_set():
                    return None
                hi = lo + CRC_BATCH_UNITS
                bad = body_crc_mismatch(mv, stored[lo:hi], starts[lo:hi] + HEADER_SIZE, body_end[lo:hi])
                found.append(starts[lo:hi][bad] + mf.file_from_offset)
        self.parts.clear()
        damaged = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        for phys in damaged.tolist():
            _quarantine_entry(commitlog, queues, phys)
        return damaged


def _quarantine_entry(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], phys: int) -> None:
    """Mark the consume queue entry that points at the damaged unit at ``phys`` (whose lengths
    hold: the walk found it readable), if one does."""
    head = commitlog.read(phys, 8)
    unit = commitlog.read(phys, SIZE_MAGIC.unpack(head)[0]) if head is not None else None
    if unit is None:  # deleted by retention meanwhile
        return
    cols = decode_units(np.frombuffer(unit, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    topic = bytes(unit[int(cols.topic_start[0]):int(cols.topic_end[0])]).decode("utf-8", "replace")
    qid, qoff = int(cols.header["queue_id"][0]), int(cols.header["queue_offset"][0])
    cq = queues.get((topic, qid))
    entry = cq.get(qoff, 1) if cq is not None and cq.min_offset <= qoff < cq.max_offset else None
    if cq is not None and entry is not None and entry.size and int(entry["phys"][0]) == phys:
        cq.quarantine(np.array([qoff], dtype=np.int64))
    log.warning("start-up check: the unit at commitlog offset %d (%s:%d@%d) fails its body CRC: quarantined, "
                "never served", phys, topic, qid, qoff)


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
    delays_ms: np.ndarray | None = None,
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
    chunks, end, reason = _walk(commitlog, start, None, check_crc, deferred=deferred)
    if reason not in ("blank", "end", "zero", "empty"):
        log.warning("recovery: commitlog ends at %d: %s; the tail after it is discarded", end, reason)
    if abnormal:
        end = _torn_tail(chunks, safe, end)
        if replica:
            end = _drop_last_unit(chunks, end)
            if deferred is not None:
                deferred.forget_from(end)
    commitlog.files.truncate(end)
    if index is not None:  # entries of units past the end (a torn tail, a truncation a crash cut short)
        index.truncate_past(end)
    rec = _Reconcile(chunks, queue_for, index, start, safe, end, delays_ms)
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
                            sum(c.starts.size for c in chunks), rec.quarantined, tuple(rec.damaged().tolist()),
                            safe, rebuild_from, None if deferred is None else deferred.below)
    log.info("recovery %s", report)
    return report, deferred


def rebuild(commitlog: CommitLog, queues: Iterable[ConsumeQueue], start: int, safe: int, queue_for: QueueFor,
            index: IndexService | None, check_crc: bool, delays_ms: np.ndarray | None = None
            ) -> tuple[int, int, np.ndarray]:
    """Step 5 of ``recover`` again from ``start`` (what a full disk stopped at start-up), once the
    disk takes the files; returns (end, newest store time, damaged units' offsets). Raises
    ``DiskFullError`` while it still cannot."""
    chunks, end, _ = _walk(commitlog, start, commitlog.max_offset(), check_crc)
    rec = _Reconcile(chunks, queue_for, index, start, safe, end, delays_ms)
    rec.run(list(queues))
    return end, rec.last_ts, rec.damaged()


def check_region(
    commitlog: CommitLog, queues: Iterable[ConsumeQueue], start: int, end: int, check_crc: bool,
    stop: threading.Event,
) -> tuple[np.ndarray, bool]:
    """The checks of ``recover`` over ``[start, end)`` while the store runs (after a clean stop
    whose queues all ended where they had, see ``clean_stop``): damaged units and wrong entries
    are quarantined, nothing is rebuilt or truncated. Returns the commitlog offsets of the
    damaged units found and whether something needs the next start's rebuild (a broken chain,
    units without entries); an early return when ``stop`` is set."""
    t0 = time.perf_counter()
    chunks, _, reason = _walk(commitlog, start, end, check_crc, stop)
    if stop.is_set():
        return np.zeros(0, dtype=np.int64), False
    broken = reason not in ("blank", "end", "zero", "empty")
    if broken:
        log.error("start-up check: the commitlog unit chain breaks before %d: %s (the next start truncates there)",
                  end, reason)
    rec = _Reconcile(chunks, None, None, start, end, end)
    rec.run(list(queues))
    log.info("start-up check of commitlog [%d, %d): %d units, %d quarantined, %.2f s", start, end,
             sum(c.starts.size for c in chunks), rec.quarantined, time.perf_counter() - t0)
    return rec.damaged(), broken or rec.unrepaired > 0


def _walk(
    commitlog: CommitLog, start: int, stop_at: int | None, check_crc: bool, stop: threading.Event | None = None,
    deferred: DeferredCrc | None = None,
) -> tuple[list[_Chunk], int, str]:
    """Follow the unit chain from ``start`` (up to ``stop_at``, else to its end, making the files
    it walks through full), file by file, checking every unit found (but the body CRCs
    ``deferred`` takes); returns the chunks, where the chain ends and why."""
    chunks: list[_Chunk] = []
    end, reason = start, "empty"
    mf = commitlog.files.find(start)
    while mf is not None and (stop is None or not stop.is_set()):
        pos = max(start - mf.file_from_offset, 0)
        limit = mf.size if stop_at is None else min(mf.size, stop_at - mf.file_from_offset)
        while True:
            chain = follow_chain(mf.mv, pos, limit, WALK_CHUNK_UNITS)
            if chain.starts.size:
                faults = unit_faults(mf.mv, chain.starts, chain.end, mf.file_from_offset,
                                     check_crc and deferred is None)
                if deferred is not None:  # only made with check_crc (see recover)
                    deferred.split(mf, chain.starts, faults)
                chunks.append(_Chunk.of(mf, chain.starts, faults))
            pos = chain.end
            if chain.reason != "max":
                break
        end, reason = mf.file_from_offset + pos, chain.reason
        if chain.reason not in ("blank", "end") or (stop_at is not None and end >= stop_at):
            break
        if chain.reason == "end" and limit < mf.size:  # a unit's first bytes before stop_at, not the file's end
            break
        if stop_at is None:
            mf.reset_to(mf.size)  # full: continue in the next file
        end = mf.file_from_offset + mf.size
        mf = commitlog.files.find(end)
    return chunks, end, reason


def _torn_tail(chunks: list[_Chunk], safe: int, end: int) -> int:
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


def _drop_last_unit(chunks: list[_Chunk], end: int) -> int:
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


class _Reconcile:
    """Makes every consume queue agree with the units of the checked region."""

    def __init__(self, chunks: list[_Chunk], queue_for: QueueFor | None, index: IndexService | None, start: int,
                 safe: int, end: int, delays_ms: np.ndarray | None = None) -> None:
        """``queue_for`` None: check only (the store runs), never create, rebuild or append."""
        self.delays_ms = delays_ms
        self.chunks = chunks
        self.queue_for = queue_for
        self.index = index
        self.index_done = index.end_phys() if index is not None else -1
        self.start = start
        self.safe = safe
        self.end = end
        self._damaged: list[np.ndarray] = []
        self._index_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (hashes, phys, times)
        self.rebuilt = 0
        self.unrepaired = 0  # units a check-only pass found without entries
        self.quarantined = 0
        self.last_ts = 0

    def run(self, loaded: list[ConsumeQueue]) -> None:
        """Check every loaded queue's entries into the region (no per-unit hashing: entries find
        their units by commitlog offset), then give the units no entry points at to their
        queues (replay past the safe offset, lost consume queue tails)."""
        if self.start >= self.end:
            return  # nothing checked (a clean start checking in the background): no binary search per queue
        u = self._units()
        self.last_ts = max((ch.last_ts for ch in self.chunks), default=0)
        referenced = np.zeros(u.phys.size, dtype=bool)
        last = {(cq.topic, cq.queue_id): self._check_entries(cq, u, referenced) for cq in loaded}
        rest = np.flatnonzero(~referenced)
        if rest.size:
            by_name = {(cq.topic, cq.queue_id): cq for cq in loaded}
            lost = int(sum(int((~c.readable).sum()) for c in self.chunks))
            key, topics = self._queue_keys(u, rest)
            order = np.argsort(key, kind="stable")  # by queue, commitlog order within
            for group in np.split(order, np.flatnonzero(np.diff(key[order])) + 1):
                name = (topics[int(key[group[0]])], int(key[group[0]] & 0xFFFFFFFF))
                rows = rest[group]
                cq = by_name.get(name)
                if cq is None:  # a queue first written past the safe offset, or a deleted topic's units
                    rows = rows[u.phys[rows] >= self.safe]
                    if not rows.size or self.queue_for is None:
                        continue
                    cq = by_name[name] = self.queue_for(*name)
                rows = rows[u.phys[rows] > last.get(name, -1)]  # older ones: units no entry wants (deleted topic)
                if rows.size:
                    self._append(cq, u.take(rows), lost)
        self._put_index()
        self._report_unreadable()

    def _put_index(self) -> None:
        """The index entries of every queue's units in one insert, in commitlog order (the order
        dispatch keeps: an index truncation finds the entries past a cut at the end)."""
        if not self._index_parts:
            return
        assert self.index is not None
        hashes, phys, ts = (np.concatenate(col) for col in zip(*self._index_parts, strict=True))
        order = np.argsort(phys, kind="stable")
        self.index.put_batch(hashes[order], phys[order], ts[order])  # whole or not at all on a full disk
        self._index_parts = []

    # -- the units of the region as columns -------------------------------------------------
    def _units(self) -> _Units:
        """The readable units of every chunk as one set of columns."""
        parts = []
        for c, ch in enumerate(self.chunks):
            cols = (ch.starts, ch.qoff, ch.size, ch.damaged, ch.qid, ch.body_end)
            if not ch.readable.all():
                cols = tuple(col[ch.readable] for col in cols)
            pos, *rest = cols
            if pos.size:
                parts.append((np.full(pos.size, c, dtype=np.int32), pos + ch.mf.file_from_offset, *rest))
        if not parts:
            none = np.zeros(0, dtype=np.int64)
            return _Units(none, none, none, none, np.zeros(0, dtype=bool), none, none)
        if len(parts) == 1:
            return _Units(*parts[0])
        return _Units(*(np.concatenate(col) for col in zip(*parts, strict=True)))

    def _by_chunk(self, u: _Units, rows: np.ndarray) -> Iterator[tuple[_Chunk, np.ndarray]]:
        """``rows`` (indexes into ``u``, commitlog order) split by the chunk they are in."""
        for part in np.split(np.arange(rows.size), np.flatnonzero(np.diff(u.chunk_of[rows])) + 1):
            if part.size:
                yield self.chunks[int(u.chunk_of[rows[part[0]]])], part

    def _queue_keys(self, u: _Units, rows: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
        """(topic hash << 32 | queue id) of the units at ``rows``, and the topic of each key."""
        key = np.zeros(rows.size, dtype=np.int64)
        topics: dict[int, str] = {}
        for ch, part in self._by_chunk(u, rows):
            cols = decode_units(ch.mf.buf, u.phys[rows[part]] - ch.mf.file_from_offset)
            topic_hash = java_hashes(ch.mf.buf, cols.topic_start, cols.topic_end).astype(np.int64)
            key[part] = (topic_hash << 32) | u.qid[rows[part]]
            _, first, inverse = np.unique(key[part], return_index=True, return_inverse=True)
            _check_no_collision(ch.mf.buf, cols, first, inverse)
            for i in first.tolist():
                name = bytes(ch.mf.buf[cols.topic_start[i]:cols.topic_end[i]])
                topics.setdefault(int(key[part][i]), name.decode("utf-8", "replace"))
        return key, topics

    def _topic_is(self, u: _Units, rows: np.ndarray, topic: bytes) -> np.ndarray:
        """Whether the units at ``rows`` carry ``topic``."""
        ok = np.zeros(rows.size, dtype=bool)
        for ch, part in self._by_chunk(u, rows):
            length_at = u.body_end[rows[part]]
            ok[part] = ranges_equal(ch.mf.buf, length_at + 1, length_at + 1 + ch.mf.buf[length_at], topic)
        return ok

    # -- one queue ------------------------------------------------------------------------
    def _append(self, cq: ConsumeQueue, u: _Units, lost: int) -> None:
        """Entries for units of ``cq`` past its last entry (commitlog order)."""
        if self.queue_for is None:
            log.error("start-up check: %s:%d has no entries for %d units from commitlog offset %d "
                      "(the next start rebuilds them)", cq.topic, cq.queue_id, u.phys.size, int(u.phys[0]))
            self.unrepaired += u.phys.size
            return
        if cq.files.files:
            first = cq.max_offset
        else:  # a new queue (or one whose files are all gone) starts where its units say
            intact = np.flatnonzero(~u.damaged)
            first = int(u.qoff[intact[0]]) - int(intact[0]) if intact.size else 0
        n = u.qoff.size
        if not u.damaged.any() and u.qoff[0] == first and (n == 1 or np.all(np.diff(u.qoff) == 1)):
            rows, quar = np.arange(n), np.zeros(n, dtype=bool)  # the usual case
        else:
            rows, quar = _positions(u.qoff, u.damaged, first, lost)
        cq.put_batch(first, u.phys[rows], u.size[rows], self._tags(u, rows, cq.topic, cq.queue_id))
        cq.quarantine(first + np.flatnonzero(quar))
        self.rebuilt += rows.size
        self._log_quarantined(cq, first + np.flatnonzero(quar), u.phys[rows][quar], "damaged units")

    def _check_entries(self, cq: ConsumeQueue, u: _Units, referenced: np.ndarray) -> int:
        """Quarantine entries pointing into the region at anything but an intact unit of the queue
        holding their queue offset, and mark the units they point at as ``referenced``; returns
        the commitlog offset of the last entry that points at one of the queue's units (-1)."""
        e0 = cq.first_offset_at_or_after(self.start)
        e1 = cq.first_offset_at_or_after(self.end)  # entries past the end are truncated or newer
        before = cq.get(e0 - 1, 1) if e0 > cq.min_offset else None
        last = int(before["phys"][0]) if before is not None and before.size else -1
        if e0 >= e1:
            return last
        ent = cq.get(e0, e1 - e0)
        n = u.phys.size
        at = np.minimum(np.searchsorted(u.phys, ent["phys"]), max(n - 1, 0))
        if n:
            hit = (u.phys[at] == ent["phys"]) & (u.size[at] == ent["size"]) & (u.qid[at] == cq.queue_id)
            hit[hit] = self._topic_is(u, at[hit], cq.topic.encode())
            referenced[at[hit]] = True
            good = hit & ~u.damaged[at] & (u.qoff[at] == e0 + np.arange(ent.size))
        else:
            hit = good = np.zeros(ent.size, dtype=bool)
        bad = np.flatnonzero(~good)
        if bad.size:
            cq.quarantine(e0 + bad)
            self._log_quarantined(cq, e0 + bad, ent["phys"][bad], "entries without an intact unit")
        hit = np.flatnonzero(hit)
        return int(ent["phys"][hit[-1]]) if hit.size else last

    def _tags(self, u: _Units, rows: np.ndarray, topic: str, queue_id: int) -> np.ndarray:
        """Tag codes of the units at ``rows`` (one queue's, commitlog order; due times in the
        schedule topic), adding index entries for those not yet indexed."""
        schedule = topic == SCHEDULE_TOPIC and self.delays_ms is not None
        tags = np.zeros(rows.size, dtype=np.int64)
        prefix = java_hash(topic + "#")
        repeat = np.zeros(rows.size, dtype=bool)  # a unit standing in for lost ones: indexed once
        repeat[1:] = rows[1:] == rows[:-1]
        for ch, part in self._by_chunk(u, rows):
            phys = u.phys[rows[part]]
            cols = decode_units(ch.mf.buf, phys - ch.mf.file_from_offset)
            need_keys = self.index is not None and int(phys[-1]) > self.index_done
            info = dispatch_info(ch.mf.buf, cols.props_start, cols.props_end, prefix, with_keys=need_keys)
            tags[part] = info.tag_codes
            if schedule:
                tags[part] = due_tag_codes(self.delays_ms, queue_id, cols.header["store_timestamp"])
            if need_keys and info.key_rows.size:
                key_phys = phys[info.key_rows]
                todo = (key_phys > self.index_done) & ~repeat[part][info.key_rows]
                ts = cols.header["store_timestamp"][info.key_rows].astype(np.int64)
                self._index_parts.append((info.key_hashes[todo], key_phys[todo], ts[todo]))
        return tags

    def _log_quarantined(self, cq: ConsumeQueue, offsets: np.ndarray, phys: np.ndarray, why: str) -> None:
        if not offsets.size:
            return
        self.quarantined += int(offsets.size)
        self._damaged.append(np.asarray(phys, dtype=np.int64))
        shown = ", ".join(f"{int(o)}@{int(p)}" for o, p in zip(offsets[:20].tolist(), phys[:20].tolist(), strict=True))
        log.warning("recovery: %s:%d: %d %s quarantined, never served (queue offset@commitlog offset: %s%s)",
                    cq.topic, cq.queue_id, offsets.size, why, shown, ", ..." if offsets.size > 20 else "")

    def damaged(self) -> np.ndarray:
        """Commitlog offsets of the damaged units found (each once)."""
        return np.unique(np.concatenate(self._damaged)) if self._damaged else np.zeros(0, dtype=np.int64)

    def _report_unreadable(self) -> None:
        """Log units whose queue cannot be read; count those past the safe offset (the entries of
        the others were counted when checked)."""
        for ch in self.chunks:
            bad = np.flatnonzero(~ch.readable)
            if bad.size:
                self.quarantined += int(np.count_nonzero(ch.starts[bad] + ch.mf.file_from_offset >= self.safe))
                self._damaged.append(ch.starts[bad] + ch.mf.file_from_offset)
                log.warning("recovery: %s: %d units with inconsistent lengths skipped, never served (positions %s)",
                            ch.mf.path.name, bad.size, ch.starts[bad[:20]].tolist())


def _positions(qoff: np.ndarray, damaged: np.ndarray, first: int, lost: int) -> tuple[np.ndarray, np.ndarray]:
    """Queue position of each unit of one queue (commitlog order) when the fast check failed:
    ``(row per position, quarantined per position)``. A unit keeps its own QUEUEOFFSET when it is
    intact, part of a run of consecutive offsets and not behind the positions given out already;
    a gap before it may be at most ``lost`` (units whose queue could not be read) long, except
    before the first unit. Any other unit takes the next position, quarantined."""
    n = qoff.size
    run = np.zeros(n, dtype=bool)
    if n == 1:
        run[0] = True
    else:
        step = np.diff(qoff) == 1
        run[1:] |= step
        run[:-1] |= step
    run &= ~damaged
    rows: list[int] = []
    quar: list[bool] = []
    nxt = first
    for i, (q, ok) in enumerate(zip(qoff.tolist(), run.tolist(), strict=True)):
        if ok and q >= nxt and (q - nxt <= lost or not rows):
            rows += [i] * (q - nxt + 1)
            quar += [True] * (q - nxt) + [False]
            nxt = q + 1
        else:
            rows.append(i)
            quar.append(True)
            nxt += 1
    return np.array(rows, dtype=np.int64), np.array(quar, dtype=bool)


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
