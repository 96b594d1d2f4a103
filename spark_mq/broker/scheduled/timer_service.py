"""Timer messages on the way out (RocketMQ 5's ``TimerMessageStore``), master only.

Each pass (every ``POLL_S``, none while no timer is pending and none arrived) first delivers, then
enqueues:

- **deliver**: every wheel slot whose time has come (``read time`` up to now, one slot per
  ``timerPrecisionMs``; after a pause the wheel is scanned for the next slot holding anything) has its
  chain of timer-log records walked, the parked units read from the commitlog in bulk and stored in
  their real topics (``real_topic.py``; ``REAL_TOPIC``/``REAL_QID`` cut, ``TIMER_OUT_MS`` kept).
- **enqueue**: the timer topic's consume queue is read on from the enqueue offset, thousands of units at
  a time; their ``TIMER_OUT_MS`` (one vectorised property scan) gives each one's slot. A slot already
  passed is delivered at once; the others get a timer-log record each, linked into the wheel in one
  numpy pass. A slot beyond the wheel's span of the read time (only after a pause longer than the max
  delay) waits until delivery has caught up.

Progress is ``config/timercheck.json``: ``readTimeMs`` (every slot before it delivered), ``queueOffset``
(every consume-queue entry before it enqueued), ``logEnd`` (the timer-log records those need), and
``firstQueueOffset`` (no entry before it is pending). It is written once the timer log and the commitlog
are flushed past what it counts (so a crash never keeps progress whose copies it lost), at most every
``timerFlushIntervalMs`` (a few writes a second, even under SYNC_FLUSH), and at shutdown. At start the log
is cut back to ``logEnd`` and the wheel rebuilt from it; the consume queue is enqueued again from
``queueOffset``. A SIGKILL thus repeats at
most the passes since the last write: those messages are delivered again (at least once, never lost).

A slave runs none of this; it takes its master's progress (``synced``). Promoted (controller mode
restarts the broker as master), it has no timer log of its own that matches: it enqueues the consume
queue again from ``firstQueueOffset``, skipping what the master delivered (a slot before ``readTimeMs``
of an entry before its ``queueOffset``).

Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import cached_property

from spark_mq.broker.metrics import LATENESS_BUCKETS_MS
from spark_mq.broker.scheduled.real_topic import Stored, store_in_real_topics
from spark_mq.common.errors import StoreNotWritableError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.common.lazy_numpy import np
from spark_mq.common.names import TIMER_TOPIC
from spark_mq.common.properties import REAL_QUEUE_ID, REAL_TOPIC, TIMER_OUT_MS, scan_properties
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus
from spark_mq.store.timer_log import TimerLog, records
from spark_mq.store.timer_wheel import TimerWheel, slot_times

log = logging.getLogger(__name__)

POLL_S = 0.05  # how late past its slot a timer may be delivered
READ_BATCH = 4096  # consume-queue entries read, or records delivered, per step
MAX_PER_PASS = 65536  # entries enqueued, or timers delivered, per pass (bounds one pass's time)
CATCH_UP_SLOTS = 64  # read time this many slots behind: jump to the next slot holding anything
CUT_ON_DELIVERY = (REAL_TOPIC, REAL_QUEUE_ID)


class TimerMessageService:
    """Enqueues parked timer messages into the timer log and wheel, delivers them when due."""

    def __init__(self, store: MessageStore, timer_log: TimerLog, wheel: TimerWheel, file: JsonConfigFile,
                 flush_interval_s: float, *, on_stored: Stored | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.log = timer_log
        self.wheel = wheel
        self.file = file
        self.precision_ms = wheel.precision_ms
        self.flush_interval_s = flush_interval_s
        self.on_stored = on_stored or (lambda topic, queue_id, next_offset: None)
        self.clock = clock
        self.read_time_ms = 0  # every slot before it is delivered
        self.queue_offset = 0  # every timer-topic entry before it is enqueued
        self.skip_below = 0  # a promoted slave: entries before it due before read_time_ms were delivered
        self.pending = 0  # timers in the wheel
        self.delivered_total = 0
        self.lateness_sum_ms = 0
        self._saved: dict[str, int] = {}

    @cached_property
    def lateness(self) -> np.ndarray:
        """Delivered per bucket (made at the first delivery or scrape: a start imports no numpy)."""
        return np.zeros(len(LATENESS_BUCKETS_MS) + 1, dtype=np.int64)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- persistence ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read the progress, cut the timer log back to it and rebuild the wheel from the log."""
        raw = self.file.load({}) or {}
        self.read_time_ms = int(raw.get("readTimeMs", self._now_ms() // self.precision_ms * self.precision_ms))
        self.queue_offset = int(raw.get("queueOffset", 0))
        self.skip_below = int(raw.get("skipBelow", 0))
        log_end = int(raw.get("logEnd", 0))
        self.log.load(log_end)
        if raw.get("synced") or self.log.end < log_end:
            why = "progress taken from the master" if raw.get("synced") else f"timer log ends before {log_end}"
            self.skip_below = self.queue_offset
            self.queue_offset = int(raw.get("firstQueueOffset", 0))
            log.warning("timer: %s: timer log rebuilt from the consume queue from offset %d (entries before %d "
                        "due before %d were delivered)", why, self.queue_offset, self.skip_below, self.read_time_ms)
            self.log.clear()
        self.pending = self.wheel.rebuild(self.log.chunks(self.log.min_index, self.log.end), self.read_time_ms)
        self._saved = raw
        log.info("timer: %d pending, delivered up to %d, enqueued up to offset %d", self.pending, self.read_time_ms,
                 self.queue_offset)

    def checkpoint(self) -> dict[str, int]:
        """The progress last written (a slave takes it: its copies are flushed)."""
        return dict(self._saved)

    def progress(self) -> dict[str, int]:
        first = self.log.first_queue_offset()
        return {"readTimeMs": self.read_time_ms, "queueOffset": self.queue_offset, "logEnd": self.log.end,
                "firstQueueOffset": self.queue_offset if first is None else min(first, self.queue_offset),
                "skipBelow": self.skip_below}

    def persist(self, progress: dict[str, int] | None = None) -> None:
        """Write ``progress`` (default: the current one, at shutdown) unless the file holds it; then delete
        the timer-log files it no longer needs."""
        progress = self.progress() if progress is None else progress
        self.log.flush()
        if progress != self._saved:
            self.file.persist(progress)
            self._saved = progress
        # a record due at or before readTimeMs - precision had its slot delivered
        self.log.delete_files_before(progress["readTimeMs"] - self.precision_ms + 1)

    def close(self) -> None:
        self.log.close()
        self.wheel.close()

    # -- delivery ------------------------------------------------------------------------------
    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver what is due, then enqueue what arrived; returns how many were delivered."""
        now = self._now_ms() if now_ms is None else now_ms
        delivered = self._dequeue(now)
        return delivered + self._enqueue(now)

    def _dequeue(self, now: int) -> int:
        p = self.precision_ms
        delivered = 0
        while self.read_time_ms <= now and delivered < MAX_PER_PASS:
            if now - self.read_time_ms > CATCH_UP_SLOTS * p:
                nxt = self.wheel.next_pending(self.read_time_ms)
                if nxt is None or nxt > now:
                    self.read_time_ms = (now // p + 1) * p
                    break
                self.read_time_ms = nxt
            last, count = self.wheel.slot(self.read_time_ms)
            if count:
                chain = self.log.chain(last, count)
                for start in range(0, chain.size, READ_BATCH):
                    self._deliver_records(self.log.read(chain[start:start + READ_BATCH]), now)
                self.wheel.delivered(self.read_time_ms)
                self.pending -= count
                delivered += count
            self.read_time_ms += p
        return delivered

    def _deliver_records(self, recs: np.ndarray, now: int) -> None:
        phys, sizes = recs["offset_py"], recs["size_py"].astype(np.int64)
        kept = phys >= self.store.commitlog.min_offset()
        if not kept.all():
            log.error("timer: %d timer messages lost: retention deleted their commitlog files before they were "
                      "due (raise fileReservedTime above timerMaxDelaySec)", int((~kept).sum()))
            recs, phys, sizes = recs[kept], phys[kept], sizes[kept]
        if not recs.size:
            return
        data = self.store.commitlog.read_units(phys, sizes)
        starts = np.zeros(sizes.size, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        self._deliver(StoredBatch.decode(data, starts), recs["deliver_ms"], now)

    def _deliver(self, units: StoredBatch, due: np.ndarray, now: int) -> None:
        store_in_real_topics(self.store, units, CUT_ON_DELIVERY, self.on_stored, "timer")
        late = now - due
        self.delivered_total += len(units)
        self.lateness += np.bincount(np.searchsorted(LATENESS_BUCKETS_MS, late, side="left"),
                                     minlength=self.lateness.size)
        self.lateness_sum_ms += int(late.sum())

    def _arrived(self) -> bool:
        """Whether timer messages were stored past the enqueue offset: read without dispatching, which a
        read of the consume queue would make the store do first (on the event loop, every poll)."""
        return self.store.written_offset(TIMER_TOPIC, 0) != self.queue_offset

    def idle(self) -> bool:
        """True when a pass has nothing to do: no timer in the wheel, none arrived. The read time then
        stays behind; the next pass's delivery step moves it on to now before anything is enqueued."""
        return self.pending == 0 and not self._arrived()

    def _enqueue(self, now: int) -> int:
        """Move new timer-topic entries into the log and wheel; returns how many were delivered at once."""
        if not self._arrived():
            return 0
        done = delivered = 0
        while done < MAX_PER_PASS:
            got = self.store.get_messages(TIMER_TOPIC, 0, self.queue_offset, READ_BATCH)
            if got.status == GetStatus.OFFSET_TOO_SMALL:
                log.error("timer: timer messages at offsets %d..%d of %s were deleted by retention before they "
                          "were enqueued", self.queue_offset, got.next_begin_offset - 1, TIMER_TOPIC)
            if got.status != GetStatus.FOUND:
                # moved on past units deleted or damaged, or back to the end of a queue recovery shortened
                skip = got.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_FOUND_NULL,
                                      GetStatus.OFFSET_OVERFLOW_BADLY)
                if skip and got.next_begin_offset != self.queue_offset:
                    self.queue_offset = got.next_begin_offset
                    continue
                break
            units = StoredBatch.decode(got.data, got.unit_starts())
            due = self._due_times(units, now)
            times = slot_times(due, self.precision_ms)
            beyond = np.flatnonzero(times >= self.read_time_ms + self.wheel.span_ms)
            take = int(beyond[0]) if beyond.size else len(units)
            if take == 0:
                break  # delivery catches up first
            qoffs = got.queue_offsets[:take]
            times, due = times[:take], due[:take]
            passed = times < self.read_time_ms
            now_due = np.flatnonzero(passed & (qoffs >= self.skip_below))
            if now_due.size:
                self._deliver(units.take(now_due), due[now_due], now)
                delivered += int(now_due.size)
            later = np.flatnonzero(~passed)
            if later.size:
                self._append(times[later], due[later], qoffs[later],
                             units.units.header["physical_offset"][:take][later].astype(np.int64),
                             got.sizes[:take][later])
            self.queue_offset = int(got.queue_offsets[take]) if take < len(units) else got.next_begin_offset
            done += take
            if take < len(units):
                break
        return delivered

    def _append(self, times: np.ndarray, due: np.ndarray, qoffs: np.ndarray, phys: np.ndarray,
                sizes: np.ndarray) -> None:
        first = self.log.end
        prev = self.wheel.link(times, first)
        try:
            self.log.append(records(phys, sizes, due, qoffs, prev))
        except BaseException:  # the wheel links records that are not there: back to what the log holds
            self.pending = self.wheel.rebuild(self.log.chunks(self.log.min_index, self.log.end), self.read_time_ms)
            raise
        self.pending += int(times.size)

    def _due_times(self, units: StoredBatch, now: int) -> np.ndarray:
        """``TIMER_OUT_MS`` of each unit (``now`` where it is missing or not a number: delivered at once)."""
        u = units.units
        s, e = scan_properties(np.frombuffer(units.buf, dtype=np.uint8), u.props_start, u.props_end).find(TIMER_OUT_MS)
        due = np.full(len(units), now, dtype=np.int64)
        rows = np.flatnonzero(s >= 0)
        raw = units.buf
        values = [raw[a:b] for a, b in zip(s[rows].tolist(), e[rows].tolist(), strict=True)]
        try:
            due[rows] = list(map(int, values))
        except ValueError:
            for r, v in zip(rows.tolist(), values, strict=True):
                due[r] = int(v) if v.isdigit() else now
        if rows.size < len(units):
            log.warning("timer: %d units in %s without %s: delivered at once", len(units) - rows.size, TIMER_TOPIC,
                        TIMER_OUT_MS)
        return due

    async def run(self) -> None:
        """Pass every ``POLL_S`` until cancelled; progress written as described in the module docstring."""
        last_flush = time.monotonic()
        postponed: str | None = None
        unsaved: tuple[int, dict[str, int]] | None = None  # (commitlog end of the copies, progress)
        moved = False  # progress not yet in ``unsaved`` (an idle service makes no pass that would take it)
        while True:
            await asyncio.sleep(POLL_S)
            try:
                if not self.idle():
                    before = (self.read_time_ms, self.queue_offset)
                    self.run_once()
                    moved = moved or (self.read_time_ms, self.queue_offset) != before
                if unsaved is None and moved:
                    unsaved, moved = (self.store.commitlog.max_offset(), self.progress()), False
                postponed = None
            except StoreNotWritableError as e:
                if str(e) != postponed:
                    log.warning("timer: delivery postponed while the store refuses writes: %s", e)
                postponed = str(e)
            except Exception:  # retried at the next poll; the broker keeps serving
                log.exception("timer: delivery failed")
            try:
                if time.monotonic() - last_flush >= self.flush_interval_s and unsaved is not None \
                        and self.store.commitlog.flushed_offset() >= unsaved[0]:
                    last_flush = time.monotonic()
                    self.persist(unsaved[1])
                    unsaved = None
            except OSError as e:
                log.error("timer: could not save %s: %s", self.file.path, e)
