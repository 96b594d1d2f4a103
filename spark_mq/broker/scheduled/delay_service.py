"""Delay levels (RocketMQ's ``ScheduleMessageService``): messages sent with the ``DELAY`` property
are parked in ``SCHEDULE_TOPIC_XXXX`` and delivered to their real topic when due.

On the way in (:func:`park_delayed`, asked by the send path's ``send_runs``) a message with ``DELAY``
= level > 0 goes to queue ``level - 1`` of the schedule topic, its real topic and queue kept in the
properties ``REAL_TOPIC`` and ``REAL_QID`` (a level above the last is clamped to the last, and
``DELAY`` rewritten to it), as RocketMQ's ``CommitLog.asyncPutMessage`` does, so the files stay
compatible. The store writes each
entry's due time as its consume-queue tag code (``common/delay_levels.py``).

On the way out (:class:`ScheduleService`, master only) each level's queue is read from its
progress offset in bulk: the entries whose due time has come (one numpy comparison), their units
in one read, ``DELAY`` cut out of every property string in one vectorised pass, and the messages
stored in the real topic in runs of equal (topic, queue, born host) -- a few puts per pass, not one
Python object per message. Body, flag, sys flag, born time/host, reconsume times and every other
property (keys, tags, UNIQ_KEY, REAL_TOPIC/REAL_QID) are kept.

Progress per level is RocketMQ's ``delayOffset.json`` ``{"offsetTable": {level: offset}}``, written
once the commitlog is flushed past the copies a pass stored, at least every
``flushDelayOffsetInterval``, and at shutdown. A SIGKILL loses at most the progress since the last
write: those messages are delivered again (at least once, never lost). A slave delivers
nothing; it takes the master's table with GET_ALL_DELAY_OFFSET.

Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from spark_mq.broker.scheduled.real_topic import Stored, store_in_real_topics
from spark_mq.common.delay_levels import SCHEDULE_TOPIC
from spark_mq.common.errors import MessageValidationError, StoreNotWritableError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import DELAY, REAL_QUEUE_ID, REAL_TOPIC, JoinedProperties
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

DELAY_NEEDLE = f"{DELAY}\x01".encode()
POLL_S = 0.1  # how late a due message may be delivered
MAX_PER_PASS = 4096  # entries of one level read per pass (bounds one pass's memory)
NEVER = 2**63 - 1  # the due time of nothing left waiting


def delay_levels(props: JoinedProperties) -> np.ndarray:
    """The delay level of each message (0: none). Raises MessageValidationError for a DELAY value
    that is not a number (RocketMQ's ``Integer.parseInt`` refuses it too)."""
    levels = np.zeros(len(props), dtype=np.int64)
    rows, values = props.values(DELAY)
    for row, value in zip(rows.tolist(), values, strict=True):
        try:
            levels[row] = int(value)
        except (ValueError, OverflowError):  # not a number, or past int64 (Java's parseInt refuses both)
            raise MessageValidationError(f"DELAY property {value!r} is not a delay level number") from None
    return levels


def park_delayed(batch: MessageBatch, props: JoinedProperties, max_level: int) -> tuple[np.ndarray, list[bytes]] | None:
    """What the send path does with the delay-level runs of a send: each message's schedule queue (-1:
    not delayed), and the property strings with the real topic/queue appended to the delayed ones (a
    level past the last clamped to it). None when nothing is delayed (one C-level search of the
    properties, when none names DELAY)."""
    if batch.topic == SCHEDULE_TOPIC or not props.mentions(DELAY_NEEDLE):
        return None
    levels = delay_levels(props)
    if not (levels > 0).any():
        return None
    real = f"{REAL_TOPIC}\x01{batch.topic}\x02{REAL_QUEUE_ID}\x01{batch.queue_id}\x02".encode()
    clamped = real + f"{DELAY}\x01{max_level}\x02".encode()  # a later duplicate wins, as in Java's HashMap
    properties = [p if lv <= 0 else p + (clamped if lv > max_level else real)
                  for p, lv in zip(batch.properties, levels.tolist(), strict=True)]
    return np.where(levels > 0, np.minimum(levels, max_level) - 1, -1), properties


class ScheduleService:
    """Delivers due delayed messages level by level; keeps ``offsetTable`` in ``delayOffset.json``."""

    def __init__(self, store: MessageStore, file: JsonConfigFile, flush_interval_s: float, *,
                 on_stored: Stored | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.file = file
        self.delays_ms = store.delays_ms
        self.flush_interval_s = flush_interval_s
        self.on_stored = on_stored or (lambda topic, queue_id, next_offset: None)
        self.clock = clock
        self.offsets: dict[int, int] = {}  # level -> next schedule-queue offset to deliver
        self.delivered_total = 0
        self._persisted: dict[int, int] = {}
        # what the last complete pass saw: the levels' written offsets and when the earliest entry
        # it left falls due; while both hold, a pass has nothing to do and is skipped
        self._seen: tuple[int, ...] | None = None
        self._next_due_ms = NEVER

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    # -- persistence ---------------------------------------------------------------------------
    def load(self) -> None:
        raw = self.file.load({}) or {}
        self.offsets = {int(k): int(v) for k, v in (raw.get("offsetTable") or {}).items()}
        self._persisted = dict(self.offsets)

    def persist(self, table: dict[int, int] | None = None) -> None:
        """Write ``table`` (default: the current progress) unless the file already holds it."""
        table = dict(self.offsets) if table is None else table
        if table != self._persisted:
            self.file.persist({"offsetTable": {str(k): v for k, v in sorted(table.items())}})
            self._persisted = table

    def offset_table(self) -> dict[int, int]:
        return dict(self.offsets)

    def replace(self, table: dict[int, int]) -> None:
        """A slave takes its master's progress (written when it changed)."""
        self.offsets = dict(table)
        self.persist()

    def pending(self) -> dict[int, int]:
        """Messages waiting per level (metrics)."""
        return {level: max(0, self.store.get_max_offset(SCHEDULE_TOPIC, level - 1) - self.offsets.get(level, 0))
                for level in range(1, self.max_level + 1)}

    # -- delivery ------------------------------------------------------------------------------
    def deliver_due(self, now_ms: int | None = None) -> int:
        """Deliver every message due at ``now_ms`` (all levels); returns how many were delivered."""
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        written = self._written()
        self._next_due_ms = NEVER
        total = 0
        for queue_id in self.store.queue_ids(SCHEDULE_TOPIC):
            while (n := self._deliver_level(queue_id + 1, now)) > 0:
                total += n
        self.delivered_total += total
        self._seen = written
        return total

    def _written(self) -> tuple[int, ...]:
        return tuple(self.store.written_offset(SCHEDULE_TOPIC, q) for q in range(self.max_level))

    def idle(self, now_ms: int) -> bool:
        """True when a pass at ``now_ms`` would find nothing due: no delayed message was stored since
        the last pass and none it left falls due yet. Costs a few dict reads; a pass makes the store
        dispatch its backlog first (on the event loop, every poll, under any produce load)."""
        return now_ms < self._next_due_ms and self._seen == self._written()

    def _deliver_level(self, level: int, now: int) -> int:
        """Deliver the next run of due entries of ``level``; returns how many entries it passed."""
        queue_id = level - 1
        offset = max(self.offsets.get(level, 0), self.store.get_min_offset(SCHEDULE_TOPIC, queue_id))
        ent = self.store.get_queue_entries(SCHEDULE_TOPIC, queue_id, offset, MAX_PER_PASS)
        if not ent.size:
            return 0
        # RocketMQ's correctDeliverTimestamp: a due time past now + the level's delay is taken as now
        delay = self.delays_ms[min(queue_id, len(self.delays_ms) - 1)]
        due = np.minimum(ent["tag"].astype(np.int64), now + delay)
        not_due = np.flatnonzero(due > now)
        count = int(not_due[0]) if not_due.size else int(ent.size)
        if count == 0:
            self._next_due_ms = min(self._next_due_ms, int(due[0]))
            return 0
        got = self.store.get_messages(SCHEDULE_TOPIC, queue_id, offset, count)
        if got.count:
            store_in_real_topics(self.store, StoredBatch.decode(got.data, got.unit_starts()), (DELAY,),
                                 self.on_stored, "schedule")
        # past what was read (a read stops at its byte bound) and past units retention deleted meanwhile
        nxt = min(max(got.next_begin_offset, offset + got.count), offset + count)
        self.offsets[level] = nxt
        return nxt - offset

    async def run(self) -> None:
        """Deliver as messages fall due (every ``POLL_S``) until cancelled. Progress is written as soon
        as the commitlog is flushed past the copies a pass stored (so a crash repeats only the passes
        since; and a power loss cannot keep progress whose copies it lost), and at least every
        ``flush_interval_s`` (RocketMQ's flushDelayOffsetInterval)."""
        last_flush = time.monotonic()
        postponed: str | None = None
        unsaved: tuple[int, dict[int, int]] | None = None  # (commitlog end of the copies, progress)
        while True:
            await asyncio.sleep(POLL_S)
            try:
                if not self.idle(int(self.clock() * 1000)) and self.deliver_due():
                    unsaved = (self.store.commitlog.max_offset(), dict(self.offsets))
                postponed = None
            except StoreNotWritableError as e:
                if str(e) != postponed:  # once per reason, not every poll
                    log.warning("schedule: delivery postponed while the store refuses writes: %s", e)
                postponed = str(e)
            except Exception:  # retried at the next poll; the broker keeps serving
                log.exception("schedule: delivery failed")
            try:
                if unsaved is not None and self.store.commitlog.flushed_offset() >= unsaved[0]:
                    self.persist(unsaved[1])
                    unsaved = None
                if time.monotonic() - last_flush >= self.flush_interval_s:
                    last_flush = time.monotonic()
                    self.persist()
            except OSError as e:
                log.error("schedule: could not save %s: %s", self.file.path, e)
