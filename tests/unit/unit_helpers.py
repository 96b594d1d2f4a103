"""Helpers shared by the unit tests: tiny store configs, random puts, a settable clock, and Java's
``String.hashCode`` written straight from its definition (independent of spark_mq's numpy one)."""

from __future__ import annotations

import random
from pathlib import Path

from spark_mq.common.config import BrokerConfig
from spark_mq.common.message import MessageBatch

KiB = 1024
# small enough that a few thousand messages span many files of every kind
TINY = {
    "maped_file_size_commit_log": 64 * KiB,
    "maped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 400,
    "max_message_size": 16 * KiB,
}


def reference_java_hash(s: str) -> int:
    """``s.hashCode()``: h = 31*h + c over UTF-16 code units, wrapping as a signed 32-bit int."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tiny_config(root: Path, **overrides) -> BrokerConfig:
    return BrokerConfig(store_path_root_dir=str(root), **{**TINY, **overrides})


class FakeClock:
    """A clock the test moves by hand (seconds, like ``time.time``)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def write_random(store, rng: random.Random, batches: int, topic: str) -> None:
    """``batches`` puts into a ``MessageStore``, each of 1 to 9 random bodies of 10 to 1499 bytes, on queues 0
    and 1 in turn."""
    for i in range(batches):
        store.put_messages(MessageBatch.of(topic, i % 2, [rng.randbytes(rng.randrange(10, 1500))
                                                          for _ in range(rng.randrange(1, 10))]))


def crash(store) -> None:
    """Stop a ``MessageStore`` as a killed process would: no final checkpoint, the abort file left behind."""
    store._running = False
    for task in store._tasks:
        task.stop()
    store._tasks.clear()
    store._close_files()
    store._lock.release()
