"""The checkpoint file: how far the store is known to be durable.

RocketMQ's fields stay where RocketMQ puts them (so its tools read our file); our recovery
uses offsets, not timestamps, and keeps them at byte 64 behind a magic::

      0  physicMsgTimestamp (8)   store time of the last flushed commitlog unit
      8  logicsMsgTimestamp (8)   ... of the last unit whose consume queue entry is flushed
     16  indexMsgTimestamp (8)    ... of the last unit whose index entries are flushed
     64  magic "SPMQ" (4) | version (4)
     72  safe offset (8)          commitlog offset up to which units, consume queue entries
                                  and index entries are all on disk; recovery starts here

``Checkpointer`` takes one: dispatch caught up, commitlog, consume queues and index flushed,
then the dispatched offset recorded as safe (every ``flushConsumeQueueInterval`` ms, and when a
topic is deleted, a truncation is done, the store stops).

Thread-safety: ``Checkpoint`` is written under ``Checkpointer.lock`` only (the flush thread,
truncation, a topic deletion, shutdown).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue_store import ConsumeQueueStore
from spark_mq.store.disk_space import allocate
from spark_mq.store.dispatch import Dispatcher
from spark_mq.store.index_service import IndexService

FILE_SIZE = 4096
_RMQ = struct.Struct(">qqq")
_OURS = struct.Struct(">4siq")
_OURS_AT = 64
_MAGIC = b"SPMQ"
_VERSION = 1


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            existing = os.fstat(fd).st_size
            if existing < FILE_SIZE:  # written through mmap: its blocks must exist (see disk_space)
                allocate(fd, FILE_SIZE, path, empty=existing == 0)
            self._mm = mmap.mmap(fd, FILE_SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _RMQ.unpack_from(
            self._mm, 0
        )
        magic, version, safe = _OURS.unpack_from(self._mm, _OURS_AT)
        self.valid = magic == _MAGIC and version == _VERSION
        self.safe_offset = safe if self.valid else 0

    def update(self, safe_offset: int, last_store_timestamp: int) -> None:
        """Record that everything below ``safe_offset`` is durable, and make it durable too."""
        self.safe_offset = safe_offset
        if last_store_timestamp > 0:
            self.physic_msg_timestamp = self.logics_msg_timestamp = self.index_msg_timestamp = (
                last_store_timestamp
            )
        _RMQ.pack_into(
            self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        _OURS.pack_into(self._mm, _OURS_AT, _MAGIC, _VERSION, safe_offset)
        self.valid = True
        os.fdatasync(self._fd)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)


class Checkpointer:
    """Takes checkpoints of the store.

    Thread-safety: ``take`` may run on any thread (the flush-logic thread, a topic deletion,
    shutdown) and holds ``lock`` while it does; a truncation holds ``lock`` for all its steps
    (``lower``, then ``take_locked``). ``open`` and ``close`` run at start and stop."""

    def __init__(self, path: Path, dispatcher: Dispatcher, commitlog: CommitLog, queues: ConsumeQueueStore,
                 index: IndexService | None) -> None:
        self.path = path
        self.dispatcher = dispatcher
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.lock = threading.Lock()
        self.file: Checkpoint | None = None  # open while the store runs

    def open(self) -> Checkpoint:
        self.file = Checkpoint(self.path)
        return self.file

    def says(self, safe_offset: int) -> bool:
        """Whether the checkpoint already records ``safe_offset`` (a clean restart: a checkpoint taken
        now would say the same, and its fdatasyncs, which a busy disk can make slow, are skipped)."""
        return self.file is not None and self.file.valid and self.file.safe_offset == safe_offset

    def take(self) -> None:
        """Flush commitlog, queues and index, then record the dispatched offset as safe."""
        with self.lock:
            self.take_locked()

    def take_locked(self) -> None:
        """``take`` with ``lock`` held by the caller."""
        safe = self.dispatcher.catch_up()
        ts = self.dispatcher.last_store_timestamp
        self.commitlog.flush()
        self.queues.flush()
        if self.index is not None:
            self.index.flush()
        if self.file is not None:
            self.file.update(safe, ts)

    def lower(self, offset: int, last_store_timestamp: int) -> None:
        """A truncation's first step (``lock`` held): recovery after a crash from now on starts at
        or below ``offset``."""
        assert self.file is not None
        self.file.update(min(self.file.safe_offset, offset), last_store_timestamp)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
