"""What every writer of the commitlog moves on: the next queue offset of each topic queue and
the newest store time, under the one lock that serialises writers.

A put takes its queue offsets here, not from the consume queue: dispatch builds entries later,
so a queue's ``max_offset`` lags its puts. A slave's appends move the same table from the units
its master sent; recovery, a rebuild and a truncation set it from the consume queues again.
Store times never go backwards (a clock stepping back, a restart, a truncation).

Thread-safety: ``lock`` is the store's put lock: puts, a slave's appends, truncation, rebuilds
and shutdown hold it; ``next_offset`` and ``last_store_ts`` are written only under it.
"""

from __future__ import annotations

import threading

from spark_mq.store.consume_queue_store import QueueKey


class WriteState:
    """Thread-safety: see the module docstring; every writer holds ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_offset: dict[QueueKey, int] = {}
        self.last_store_ts = 0  # ms

    def store_time(self, now_ms: int) -> int:
        """The store time of a put at ``now_ms``: never before the last one."""
        return max(now_ms, self.last_store_ts)

    def appended(self, key: QueueKey, first: int, count: int, store_ts: int) -> None:
        """``count`` messages of ``key`` stored from queue offset ``first`` at ``store_ts``."""
        self.next_offset[key] = first + count
        self.last_store_ts = max(self.last_store_ts, store_ts)
