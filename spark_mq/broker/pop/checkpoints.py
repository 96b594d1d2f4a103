"""The open checkpoints of non-orderly pops: which popped messages are still unacknowledged, and when each
checkpoint falls due for redelivery. The table is the revive log (``records.py``) folded up; it is rebuilt
by replaying that log at start.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from spark_mq.broker.pop.records import Checkpoint, CheckpointKey


@dataclass
class OpenCheckpoint:
    ck: Checkpoint
    pending: set[int] = field(default_factory=set)  # queue offsets not acknowledged yet


class CheckpointTable:
    def __init__(self) -> None:
        self._open: dict[CheckpointKey, OpenCheckpoint] = {}
        self._in_flight: Counter[tuple[str, str, int]] = Counter()  # pending messages by (group, topic, queue id)

    def __len__(self) -> int:
        return len(self._open)

    def add(self, ck: Checkpoint) -> None:
        if ck.key in self._open:  # the same pop seen twice (a replay): counted once
            self._in_flight[ck.key[:3]] -= len(self._open[ck.key].pending)
        self._open[ck.key] = OpenCheckpoint(ck, set(ck.offsets))
        self._in_flight[ck.key[:3]] += len(ck.offsets)

    def pending(self, key: CheckpointKey, offset: int) -> bool:
        """Whether the message at ``offset`` of checkpoint ``key`` is still unacknowledged."""
        found = self._open.get(key)
        return found is not None and offset in found.pending

    def ack(self, key: CheckpointKey, offsets: tuple[int, ...]) -> list[int]:
        """Mark ``offsets`` done; returns those that were pending. A checkpoint with nothing pending closes."""
        found = self._open.get(key)
        if found is None:
            return []
        done = list(dict.fromkeys(o for o in offsets if o in found.pending))
        found.pending.difference_update(done)
        self._in_flight[key[:3]] -= len(done)
        if not found.pending:
            del self._open[key]
            if not self._in_flight[key[:3]]:
                del self._in_flight[key[:3]]
        return done

    def due(self, now_ms: int) -> list[tuple[Checkpoint, list[int]]]:
        """The checkpoints whose invisible time has passed, with their unacknowledged offsets, soonest first."""
        due = [(o.ck, sorted(o.pending)) for o in self._open.values() if o.ck.revive_time <= now_ms]
        return sorted(due, key=lambda d: d[0].revive_time)

    def revive_offset(self, end: int) -> int:
        """Where a replay of the revive queue must start: the oldest open checkpoint's record (``end``, the
        queue's end, when none is open)."""
        return min((o.ck.revive_offset for o in self._open.values() if o.ck.revive_offset >= 0), default=end)

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        """Unacknowledged messages of the group in the queue."""
        return self._in_flight.get((group, topic, queue_id), 0)

    def in_flight_queues(self) -> dict[tuple[str, str, int], int]:
        """Unacknowledged messages by (group, topic, queue id), of the queues that have any."""
        return {key: n for key, n in self._in_flight.items() if n > 0}
