"""Many timeouts behind one event-loop timer.

A request or a held pull that is answered long before its timeout still paid ``loop.call_later`` and
``TimerHandle.cancel`` (a handle object, and Python-level ``__lt__`` compares to push it on the loop's heap):
several microseconds on the latency row's every produce-to-consume cycle, in each of the three processes.
Here a timeout is a (deadline, token) tuple on a plain heap (compared in C) and its callback in a dict;
removing it drops the dict entry only. One loop timer stands for the earliest deadline; when it fires, every
due callback runs and the timer moves to the next live deadline. Stale heap entries (removed timeouts) are
dropped when they reach the top, and the heap is rebuilt once they outnumber the live ones.

Thread-safety: one event loop's, like the loop's own timers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

COMPACT_SLACK = 64  # stale heap entries always tolerated before a rebuild (rebuilding a tiny heap is waste)


class Deadlines:
    """Timeouts of one event loop: ``add`` returns a token for ``remove``; a callback not removed runs once
    its deadline passes, from the loop, as ``loop.call_later``'s would."""

    __slots__ = ("_due", "_heap", "_loop", "_timer", "_timer_at", "_tokens")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop  # None: the loop running at the first ``add``
        self._heap: list[tuple[float, int]] = []
        self._due: dict[int, tuple[Callable[..., Any], tuple[Any, ...]]] = {}  # live timeouts by token
        self._tokens = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        return len(self._due)

    def add(self, delay: float, callback: Callable[..., Any], *args: Any) -> int:
        """Run ``callback(*args)`` ``delay`` seconds from now unless ``remove``d first."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        token = next(self._tokens)
        at = loop.time() + delay
        self._due[token] = (callback, args)
        heap = self._heap
        if len(heap) > 2 * len(self._due) + COMPACT_SLACK:
            self._compact()
        heapq.heappush(heap, (at, token))
        if self._timer is None or at < self._timer_at:
            self._arm(at)
        return token

    def remove(self, token: int) -> None:
        """Drop a timeout (gone or run already: nothing). Its timer stays armed: it finds nothing due."""
        self._due.pop(token, None)

    def close(self) -> None:
        """Drop every timeout and the loop timer (the owner is closing)."""
        self._due.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _compact(self) -> None:
        """The removed timeouts out of the heap, in place (``_fire`` may be walking it: a callback's ``add``)."""
        due, heap = self._due, self._heap
        heap[:] = [entry for entry in heap if entry[1] in due]
        heapq.heapify(heap)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap, due = self._heap, self._due
        now = self._loop.time()
        while heap and (heap[0][0] <= now or heap[0][1] not in due):
            entry = due.pop(heapq.heappop(heap)[1], None)
            if entry is not None:
                callback, args = entry
                try:
                    callback(*args)  # may add or remove timeouts: the loop re-reads the heap
                except Exception as e:  # as the loop treats a failing timer callback: reported, the others run
                    self._loop.call_exception_handler({"message": "a timeout's callback failed", "exception": e})
        if heap and (self._timer is None or heap[0][0] < self._timer_at):
            self._arm(heap[0][0])
