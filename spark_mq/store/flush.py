"""Durability in the background: commitlog flushes (ASYNC_FLUSH on an interval, SYNC_FLUSH
by group commit) and a periodic checkpoint of consume queues and index.

Group commit: a put under SYNC_FLUSH waits until the commitlog is flushed past its end. One
flusher thread serves every waiter: while one ``fdatasync`` runs (GIL released), new waiters
pile up and share the next one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from spark_mq.common.errors import StoreNotWritableError

log = logging.getLogger(__name__)


class GroupCommit:
    """Waiters block (or hold a future) until ``flushed >= their offset``; one thread flushes
    for all of them."""

    def __init__(self, flush: Callable[[], int]) -> None:
        self._flush = flush
        self._cond = threading.Condition()
        self._wanted = 0
        self._waiters: list[tuple[int, Future[None]]] = []
        self.flushed = 0
        self.flush_count = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)

    def start(self, flushed: int) -> None:
        self.flushed = flushed
        self._thread.start()

    def future(self, offset: int) -> Future[None]:
        """A future that completes once ``offset`` is durable (for asyncio callers)."""
        fut: Future[None] = Future()
        with self._cond:
            if self.flushed >= offset:
                fut.set_result(None)
                return fut
            if self._stop:
                fut.set_exception(StoreNotWritableError("store shut down before the flush"))
                return fut
            self._waiters.append((offset, fut))
            if offset > self._wanted:
                self._wanted = offset
                self._cond.notify_all()
        return fut

    def wait(self, offset: int, timeout: float) -> bool:
        """Block until ``offset`` is durable; False if ``timeout`` seconds pass first."""
        try:
            self.future(offset).result(timeout)
        except (FutureTimeout, StoreNotWritableError):
            return False
        return True

    def truncated(self, offset: int) -> None:
        """The commitlog was cut back to ``offset``: what lies past it is flushed no longer, and a
        waiter for it fails (its write is gone)."""
        with self._cond:
            self.flushed = min(self.flushed, offset)
            self._wanted = min(self._wanted, offset)
            gone = [f for o, f in self._waiters if o > offset]
            self._waiters = [(o, f) for o, f in self._waiters if o <= offset]
        for f in gone:
            f.set_exception(StoreNotWritableError(f"the commitlog was truncated to offset {offset} before this "
                                                  "write became durable: it is not stored"))

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted > self.flushed or self._stop)
                if self._stop:
                    return
            try:
                done = self._flush()
            except Exception:  # keep serving: a waiter times out rather than hanging forever
                log.exception("group commit flush failed")
                continue
            with self._cond:
                self.flushed = max(self.flushed, done)
                self.flush_count += 1
                ready = [f for o, f in self._waiters if o <= self.flushed]
                self._waiters = [(o, f) for o, f in self._waiters if o > self.flushed]
            for f in ready:
                f.set_result(None)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            left, self._waiters = self._waiters, []
            self._cond.notify_all()
        for _, f in left:
            f.set_exception(StoreNotWritableError("store shut down before the flush"))
        if self._thread.is_alive():
            self._thread.join()


class PeriodicTask:
    """Run ``task`` every ``interval_s`` seconds on a daemon thread until stopped."""

    def __init__(self, name: str, interval_s: float, task: Callable[[], object]) -> None:
        self._task = task
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._task()
            except Exception:
                log.exception("%s failed; retrying next interval", self._thread.name)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
