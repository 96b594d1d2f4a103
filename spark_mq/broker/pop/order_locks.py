"""Orderly pop (``order=true``): FIFO per queue. While messages popped from a queue are unacknowledged and
invisible, the group gets nothing more from that queue; once all are acknowledged the group's offset moves
past them; once their invisible time passes, the next pop hands the same messages out again (their
attempt count, ``orderCountInfo``, one higher). Nothing goes to the revive topic: the group's offset only
moves on acknowledgement, so a restart hands the unacknowledged messages out again at once.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

from dataclasses import field

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass

QueueKey = tuple[str, str, int]
"""(group, topic, queue id)"""


@lazy_dataclass
class OrderInFlight(LazyDataclass):
    offsets: list[int]
    next_offset: int  # the group's offset once all are acknowledged
    visible_at: int  # epoch ms
    attempts: int
    acked: set[int] = field(default_factory=set)


class OrderLocks:
    def __init__(self) -> None:
        self._held: dict[QueueKey, OrderInFlight] = {}
        self._attempts: dict[tuple[QueueKey, int], int] = {}  # (queue, first offset): pops of that batch so far

    def blocked(self, key: QueueKey, now_ms: int) -> bool:
        """Whether the queue's messages are in flight (an expired lock is released here)."""
        held = self._held.get(key)
        if held is None:
            return False
        if held.visible_at > now_ms:
            return True
        del self._held[key]
        return False

    def hold(self, key: QueueKey, offsets: list[int], next_offset: int, visible_at: int) -> int:
        """The queue's ``offsets`` are handed out until ``visible_at``; returns their attempt number (1 first)."""
        attempt = self._attempts.get((key, offsets[0]), 0) + 1
        self._attempts = {k: v for k, v in self._attempts.items() if k[0] != key}
        self._attempts[(key, offsets[0])] = attempt
        self._held[key] = OrderInFlight(offsets, next_offset, visible_at, attempt)
        return attempt

    def ack(self, key: QueueKey, offset: int) -> int | None:
        """Acknowledge one; returns the offset the group moves to once the whole batch is, else None.
        Raises KeyError when the queue holds no such message in flight (expired or never popped)."""
        held = self._held.get(key)
        if held is None or offset not in held.offsets:
            raise KeyError(offset)
        held.acked.add(offset)
        if len(held.acked) < len(held.offsets):
            return None
        del self._held[key]
        self._attempts = {k: v for k, v in self._attempts.items() if k[0] != key}
        return held.next_offset

    def extend(self, key: QueueKey, offset: int, visible_at: int) -> None:
        """A change of invisible time of an in-flight message: the whole batch stays invisible until then.
        Raises KeyError as ``ack``."""
        held = self._held.get(key)
        if held is None or offset not in held.offsets or offset in held.acked:
            raise KeyError(offset)
        held.visible_at = visible_at
