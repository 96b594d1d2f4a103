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

log = logging.getLogger(__name__)


class GroupCommit:
    """Waiters block until ``flushed >= their offset``; one thread flushes for all of them."""

    def __init__(self, flush: Callable[[], int]) -> None:
        self._flush = flush
        self._cond = threading.Condition()
        self._wanted = 0
        self.flushed = 0
        self.flush_count = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)

    def start(self, flushed: int) -> None:
        self.flushed = flushed
        self._thread.start()

    def wait(self, offset: int, timeout: float) -> bool:
        """Block until ``offset`` is durable; False if ``timeout`` seconds pass first."""
        with self._cond:
            if self.flushed >= offset:
                return True
            if offset > self._wanted:
                self._wanted = offset
                self._cond.notify_all()
            return self._cond.wait_for(lambda: self.flushed >= offset or self._stop, timeout) and (
                self.flushed >= offset
            )

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
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
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
