"""The store directory lock: one broker process per store, enforced with ``flock``.

The kernel drops the lock when the process dies, so a SIGKILLed broker never leaves a stale
lock behind (unlike a pid file).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from spark_mq.common.errors import StoreLockedError


class StoreLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.path.parent} is in use by another broker (pid {holder} holds the lock "
                f"file {self.path}): "
                "stop that broker or point storePathRootDir elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
