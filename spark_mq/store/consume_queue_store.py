"""The table of consume queues, one per topic queue under ``consumequeue/<topic>/<queueId>/``
(RocketMQ's ``ConsumeQueueStore``): loaded at start, grown by dispatch as queues first get a
message, shrunk when a topic is deleted or a truncation empties a queue.

Thread-safety: the table is copied on write under one lock, so readers (gets, retention, the
start-up check) look a queue up or iterate a snapshot without taking it. Queues are added from
the dispatch pass (any thread) and removed under the store's put lock.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from pathlib import Path

from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.store_paths import CONSUME_QUEUE_DIR, store_path

QueueKey = tuple[str, int]
"""(topic, queue id)."""

_QUEUE_DIR = re.compile(r"^\d+$")


class ConsumeQueueStore(Mapping[QueueKey, ConsumeQueue]):
    """A read-only mapping of (topic, queue id) to its consume queue, plus the calls that change it.

    Thread-safety: lookups and iteration need no lock (each sees one snapshot of the table);
    ``for_write`` may be called from any thread; ``remove_topic``/``remove`` under the store's put
    lock; ``load`` and ``close`` while no other thread runs."""

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self._table: dict[QueueKey, ConsumeQueue] = {}
        self._lock = threading.Lock()

    # -- the table as a read-only mapping (a snapshot per call) ----------------------------
    def __getitem__(self, key: QueueKey) -> ConsumeQueue:
        return self._table[key]

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def get(self, key: QueueKey, default: ConsumeQueue | None = None) -> ConsumeQueue | None:  # type: ignore[override]
        return self._table.get(key, default)  # every read looks its queue up: no exception for a missing one

    def values(self) -> ValuesView[ConsumeQueue]:
        return self._table.values()

    def items(self) -> ItemsView[QueueKey, ConsumeQueue]:
        return self._table.items()

    # -- lifecycle --------------------------------------------------------------------------
    def load(self) -> None:
        """Map every queue found on disk (at start, before any other thread runs)."""
        base = store_path(self.root, CONSUME_QUEUE_DIR)
        if not base.exists():
            return
        for tdir in sorted(base.iterdir()):
            for qdir in sorted(tdir.iterdir()):
                if _QUEUE_DIR.match(qdir.name):
                    cq = self._open(tdir.name, int(qdir.name))
                    cq.load()
                    self._table[(tdir.name, int(qdir.name))] = cq

    def flush(self) -> None:
        for cq in list(self._table.values()):
            cq.flush()

    def close(self) -> None:
        for cq in self._table.values():
            cq.close()

    # -- growing and shrinking --------------------------------------------------------------
    def for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue to write entries into, created (empty) on its first message."""
        key = (topic, queue_id)
        cq = self._table.get(key)
        if cq is None:
            with self._lock:
                cq = self._table.get(key)
                if cq is None:
                    cq = self._open(topic, queue_id)
                    self._table = {**self._table, key: cq}
        return cq

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        """Destroy every queue of ``topic`` and its directory; returns the queues removed. A topic
        that is no plain directory name raises StorePathError before anything is touched."""
        topic_dir = store_path(self.root, CONSUME_QUEUE_DIR, topic)
        with self._lock:
            gone = [cq for k, cq in self._table.items() if k[0] == topic]
            self._table = {k: cq for k, cq in self._table.items() if k[0] != topic}
        for cq in gone:
            cq.destroy()
        shutil.rmtree(topic_dir, ignore_errors=True)
        return gone

    def remove(self, gone: Iterable[ConsumeQueue]) -> None:
        """Destroy the queues ``gone`` (a truncation emptied them), and a topic's directory once its
        last queue went."""
        gone = list(gone)
        with self._lock:
            self._table = {k: cq for k, cq in self._table.items() if cq not in gone}
        for cq in gone:
            cq.destroy()
            with contextlib.suppress(OSError):  # the topic's directory still holds other queues
                store_path(self.root, CONSUME_QUEUE_DIR, cq.topic).rmdir()

    def delete_files_below(self, commitlog_min: int) -> None:
        """Retention deleted the commitlog below ``commitlog_min``: the files of entries that all
        point below it go too."""
        for cq in list(self._table.values()):
            cq.delete_files_below(commitlog_min)

    def settled(self, commitlog_min: int) -> dict[QueueKey, int]:
        """After recovery, a rebuild or a truncation wrote entries: every queue's minimum moved up
        to the commitlog's, and its next queue offset (what the next put takes) returned."""
        out = {}
        for key, cq in list(self._table.items()):
            cq.correct_min_offset(commitlog_min)
            out[key] = cq.max_offset
        return out

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, store_path(self.root, CONSUME_QUEUE_DIR, topic, str(queue_id)),
                            self.file_size)
