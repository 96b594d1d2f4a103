"""Queue locks for orderly consumption (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ): a queue belongs to
one client of a group at a time, and a lock not renewed within 60 s expires (RocketMQ's
RebalanceLockManager).

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from spark_mq.remoting.bodies import MessageQueue

LOCK_EXPIRY_S = 60.0


class QueueLockManager:
    def __init__(self, clock: Callable[[], float] = time.monotonic, expiry_s: float = LOCK_EXPIRY_S) -> None:
        self.clock = clock
        self.expiry_s = expiry_s
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def try_lock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) what is free or already ours; returns the queues we now hold."""
        now = self.clock()
        table = self._locks.setdefault(group, {})
        held = set()
        for mq in queues:
            owner = table.get(mq)
            if owner is None or owner[0] == client_id or now - owner[1] > self.expiry_s:
                table[mq] = (client_id, now)
                held.add(mq)
        return held

    def unlock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in queues:
            owner = table.get(mq)
            if owner is not None and owner[0] == client_id:
                del table[mq]
