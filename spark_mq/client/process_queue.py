"""``ProcessQueue``: what a push consumer holds of one assigned queue (RocketMQ's ProcessQueue).

The messages pulled and not yet consumed, keyed and ordered by queue offset; their count and
body bytes for flow control (a queue's pulls pause while it holds more than
``threshold_count`` messages or ``threshold_bytes`` of bodies: 1000 and 100 MiB by default);
the offset to commit; the ``dropped`` flag a rebalance sets when the queue goes to another
member; timestamps of the last pull and consumption; the broker lock state for orderly use.

The commit offset is always the lowest offset still unfinished: a message stays here, taken or
not, until ``remove`` is called for it, so a slow message keeps the commit below itself however
many later messages finish first. With nothing unfinished it is the highest offset ever put
plus one (``-1`` before any put).

Orderly consumption ``take``s messages in offset order (at most one batch in flight per queue,
the caller's rule); concurrent consumption hands every put message to the listener and only
``remove``s them.

Thread-safety: not thread-safe; a push consumer uses it from its event loop only.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable

from spark_mq.common.unit.decode import StoredMessage

MiB = 1024 * 1024
DEFAULT_THRESHOLD_COUNT = 1000  # pullThresholdForQueue
DEFAULT_THRESHOLD_BYTES = 100 * MiB  # pullThresholdSizeForQueue
LOCK_MAX_LIVE_S = 30.0  # REBALANCE_LOCK_MAX_LIVE_TIME: an unrenewed lock is not trusted past this


class ProcessQueue:
    def __init__(self, threshold_count: int = DEFAULT_THRESHOLD_COUNT,
                 threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if threshold_count < 1 or threshold_bytes < 1:
            raise ValueError("flow-control thresholds must be positive")
        self.threshold_count = threshold_count
        self.threshold_bytes = threshold_bytes
        self.clock = clock
        self._msgs: dict[int, StoredMessage] = {}
        self._offsets: list[int] = []  # sorted keys of _msgs
        self._taken: set[int] = set()
        self._next_untaken = 0  # index into _offsets of the first message not taken
        self.size_bytes = 0
        self.max_offset = -1  # highest queue offset ever put
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = clock()
        self.last_consume_time = clock()

    # -- contents -------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self._msgs)

    def __len__(self) -> int:
        return len(self._msgs)

    def __contains__(self, offset: int) -> bool:
        return offset in self._msgs

    @property
    def in_flight(self) -> int:
        """Messages taken and not yet removed."""
        return len(self._taken)

    def flow_controlled(self) -> bool:
        """Whether the next pull should wait: over the message or the byte threshold."""
        return len(self._msgs) > self.threshold_count or self.size_bytes > self.threshold_bytes

    def put(self, messages: Iterable[StoredMessage]) -> list[StoredMessage]:
        """Add pulled messages; returns those that were new (an offset already held is ignored)."""
        added = []
        for m in messages:
            off = m.queue_offset
            if off in self._msgs:
                continue
            self._msgs[off] = m
            if not self._offsets or off > self._offsets[-1]:
                self._offsets.append(off)
            else:
                i = bisect.bisect_left(self._offsets, off)
                self._offsets.insert(i, off)
                if i < self._next_untaken:
                    self._next_untaken = self._first_untaken(i)
            self.size_bytes += len(m.body)
            self.max_offset = max(self.max_offset, off)
            added.append(m)
        self.last_pull_time = self.clock()
        return added

    def _first_untaken(self, start: int) -> int:
        i = start
        while i < len(self._offsets) and self._offsets[i] in self._taken:
            i += 1
        return i

    def take(self, n: int) -> list[StoredMessage]:
        """Up to ``n`` untaken messages in offset order, now marked in flight."""
        i = self._first_untaken(self._next_untaken)
        out = []
        while i < len(self._offsets) and len(out) < n:
            off = self._offsets[i]
            if off not in self._taken:
                self._taken.add(off)
                out.append(self._msgs[off])
            i += 1
        self._next_untaken = i
        return out

    def give_back(self, offsets: Iterable[int]) -> None:
        """Return taken messages to the untaken ones (they will be taken again, in order)."""
        for off in offsets:
            if off in self._taken:
                self._taken.discard(off)
                self._next_untaken = min(self._next_untaken, bisect.bisect_left(self._offsets, off))

    def remove(self, offsets: Iterable[int]) -> int:
        """Forget finished messages; returns the commit offset (see ``commit_offset``)."""
        gone = False
        for off in offsets:
            m = self._msgs.pop(off, None)
            if m is None:
                continue
            gone = True
            self.size_bytes -= len(m.body)
            self._taken.discard(off)
            i = bisect.bisect_left(self._offsets, off)
            del self._offsets[i]
            if i < self._next_untaken:
                self._next_untaken -= 1
        if gone:
            self.last_consume_time = self.clock()
        return self.commit_offset()

    def commit_offset(self) -> int:
        """The lowest unfinished offset; the highest put + 1 when none is left; -1 before any put."""
        if self._offsets:
            return self._offsets[0]
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    def messages(self) -> list[StoredMessage]:
        """Every held message in offset order (taken or not)."""
        return [self._msgs[o] for o in self._offsets]

    def clear(self) -> None:
        self._msgs.clear()
        self._offsets.clear()
        self._taken.clear()
        self._next_untaken = 0
        self.size_bytes = 0

    # -- orderly lock ---------------------------------------------------------------------------
    def set_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_time = self.clock()

    def lock_expired(self, max_live_s: float = LOCK_MAX_LIVE_S) -> bool:
        """Whether the broker lock is not (or no longer surely) ours: never taken, or not renewed
        within ``max_live_s`` (the broker's own expiry is longer)."""
        return not self.locked or self.clock() - self.last_lock_time > max_live_s
