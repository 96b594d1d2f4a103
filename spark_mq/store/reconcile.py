"""Making every consume queue agree with the units of a checked region (recovery's step 5).

Entries that already point at the right units stay (the common case: one vectorised comparison
per queue); missing or wrong ones are rebuilt from the units, with index entries for units not
yet indexed; a damaged unit whose chain holds is quarantined: logged, counted, and its entry kept
but marked (``QUARANTINED_TAG``), so reads skip it and its queue offset is never reused. A unit
whose QUEUEOFFSET disagrees with the run of its queue's offsets is damaged too. Without a
``queue_for`` it only checks (the store runs): it quarantines, never creates or rebuilds.

Thread-safety: one ``Reconcile`` per pass, at start, in a rebuild under the put lock, or on the
start-up check's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from spark_mq.common.buffers import ranges_equal
from spark_mq.common.columns import Columns
from spark_mq.common.delay_levels import SCHEDULE_TOPIC, due_tag_codes
from spark_mq.common.errors import CorruptFileError
from spark_mq.common.java_hash import java_hash, java_hashes
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.batch import decode_units
from spark_mq.common.unit.layout import topic_ranges
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.dispatch import QueueFor, dispatch_info
from spark_mq.store.index_service import IndexService
from spark_mq.store.unit_walk import Chunk

log = logging.getLogger(__name__)


@lazy_dataclass(frozen=True)
class _Units(LazyDataclass, Columns):
    """Readable units of the region (all, or one queue's), commitlog order."""

    chunk_of: np.ndarray  # which Chunk
    phys: np.ndarray
    qoff: np.ndarray
    size: np.ndarray
    damaged: np.ndarray
    qid: np.ndarray
    body_end: np.ndarray  # in the chunk's file: where the topic length byte is


class Reconcile:
    """Makes every consume queue agree with the units of the checked region."""

    def __init__(self, chunks: list[Chunk], queue_for: QueueFor | None, index: IndexService | None, start: int,
                 safe: int, end: int, delays_ms: tuple[int, ...] | None = None) -> None:
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

    def _by_chunk(self, u: _Units, rows: np.ndarray) -> Iterator[tuple[Chunk, np.ndarray]]:
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
            ok[part] = ranges_equal(ch.mf.buf, *topic_ranges(ch.mf.buf, u.body_end[rows[part]]), topic)
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
        before = cq.entry(e0 - 1)
        last = -1 if before is None else before[0]
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

    def damaged(self) -> tuple[int, ...]:
        """Commitlog offsets of the damaged units found (each once, in order)."""
        return tuple(np.unique(np.concatenate(self._damaged)).tolist()) if self._damaged else ()

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

