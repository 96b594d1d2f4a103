"""Refusing writes while the disk is full, and accepting them again once it has room.

A store refuses writes (reads go on) when a file it needs does not fit the disk: at start when
recovery could not create the consume queue or index files for the messages it found
(``rebuild_from``: their entries are built once space returns) or when there is no room for the
next commitlog file and its reserve; while running when a put's commitlog file could not be
allocated (``refuse``) or dispatch stalls on a consume queue or index file (the dispatcher's
``stalled``). ``check`` runs every ``DISK_CHECK_INTERVAL_S`` while writes are refused: it builds
the missing entries first, then accepts writes once the next commitlog file fits again.

Thread-safety: ``refuse`` is called from a put (under the put lock), ``start`` before the store
serves, ``check`` from the store's disk-space thread; ``reason`` may be read from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from spark_mq.common.errors import DiskFullError
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.disk_space import disk_full, free_bytes
from spark_mq.store.dispatch import Dispatcher

log = logging.getLogger(__name__)

DISK_CHECK_INTERVAL_S = 1.0  # while writes are refused for a full disk, how often free space is looked at


class FullDisk:
    """Thread-safety: see the module docstring; ``check`` takes the put lock for a rebuild."""

    def __init__(self, root: Path, commitlog: CommitLog, dispatcher: Dispatcher, lock: threading.Lock,
                 rebuild: Callable[[int], bool]) -> None:
        """``rebuild(offset)`` builds the entries recovery could not from ``offset`` (called with
        ``lock``, the put lock, held); False while the disk still cannot take them."""
        self.root = root
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.lock = lock
        self.rebuild = rebuild
        self.refused: str | None = None  # why writes are refused since a file did not fit the disk
        self.rebuild_from: int | None = None  # queue and index entries recovery could not build

    @property
    def reason(self) -> str | None:
        """Why writes are refused for a full disk (a file that could not be allocated), else None."""
        return self.refused or self.dispatcher.stalled

    def start(self, rebuild_from: int | None) -> None:
        """Whether the store starts read-only: entries recovery could not build (from
        ``rebuild_from``), or no room for the next commitlog file."""
        self.rebuild_from = rebuild_from
        need = self.commitlog.files.space_needed()
        if rebuild_from is not None:
            self.refused = (f"disk full: the store started without room for the consume queue and index files of the "
                            f"messages from commitlog offset {rebuild_from}; writes are refused until space is freed "
                            "(delete files on that disk or grow it), reads and pulls keep working")
        elif free_bytes(self.root) < need:
            self.refused = str(disk_full(self.root, need, "the next commitlog file and its reserve (checked at start)"))
        else:
            self.refused = None
        if self.refused is not None:
            log.error("starting read-only: %s", self.refused)

    def refuse(self, e: DiskFullError) -> None:
        """A put's file did not fit the disk: refuse writes from now on."""
        if self.refused is None:
            log.error("refusing writes: %s", e)
        self.refused = str(e)

    def check(self) -> None:
        """While refusing writes for a full disk: build the entries recovery left, then accept
        writes again once the next commitlog file (and the reserve kept with it) fits."""
        if self.refused is None:
            return
        if self.rebuild_from is not None:
            with self.lock:  # no put runs meanwhile anyway: they are refused until this is done
                if not self.rebuild(self.rebuild_from):
                    return
                self.rebuild_from = None
        need = self.commitlog.files.space_needed()
        free = free_bytes(self.root)
        if free >= need:
            log.warning("disk space is back (%d bytes free, %d needed for the next file): accepting writes again",
                        free, need)
            self.refused = None
