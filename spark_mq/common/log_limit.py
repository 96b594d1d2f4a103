"""Log lines a remote peer can cause, rate-limited per (peer, reason).

A client sending bad frames or bad requests as fast as it can must not turn into a log written as
fast as it can: each (peer host, reason) gets ``burst`` lines per ``interval_s`` window, and what
is held back is counted and reported in one summary line when the window ends (at its next line
or at the next ``flush``). The peer is the host without the port, since every new connection of
one client gets a new port.

Thread-safety: one event loop (or one thread) per limiter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass

DEFAULT_INTERVAL_S = 10.0
DEFAULT_BURST = 3
MAX_KEYS = 4096  # past this many live (peer, reason) windows, new peers share one window per reason
ANY_PEER = "*"


@lazy_dataclass
class _Window(LazyDataclass):
    start: float
    level: int
    logged: int = 0
    suppressed: int = 0


class LogLimiter:
    """At most ``burst`` lines per (peer, reason) per ``interval_s``; the rest summarised."""

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S, burst: int = DEFAULT_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval_s
        self._burst = burst
        self._clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}

    def log(self, level: int, peer: str, reason: str, msg: str, *args: object, exc_info: bool = False) -> None:
        """``logger.log(level, msg, *args)`` unless ``peer`` used up its lines for ``reason``."""
        if not self._logger.isEnabledFor(level):
            return
        now = self._clock()
        key = (peer, reason)
        window = self._windows.get(key)
        if window is not None and now - window.start >= self._interval:
            self._summarise(key, window)
            del self._windows[key]
            window = None
        if window is None:
            if len(self._windows) >= MAX_KEYS:
                self.flush()
                if len(self._windows) >= MAX_KEYS:
                    key = (ANY_PEER, reason)
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = _Window(now, level)
        if window.logged < self._burst:
            window.logged += 1
            self._logger.log(level, msg, *args, exc_info=exc_info)
        else:
            window.suppressed += 1

    def warning(self, peer: str, reason: str, msg: str, *args: object) -> None:
        self.log(logging.WARNING, peer, reason, msg, *args)

    def flush(self) -> None:
        """Report and forget every window that has ended (call it now and then, e.g. once a second)."""
        now = self._clock()
        for key, window in list(self._windows.items()):
            if now - window.start >= self._interval:
                self._summarise(key, window)
                del self._windows[key]

    def _summarise(self, key: tuple[str, str], window: _Window) -> None:
        if window.suppressed:
            self._logger.log(window.level, "%s: %d more %r messages suppressed (at most %d per %.0f s)",
                             key[0], window.suppressed, key[1], self._burst, self._interval)
