"""The open checkpoints of non-orderly pops: which popped messages are still unacknowledged, and when each
checkpoint falls due for redelivery. The table is the revive log (``records.py``) folded up; it is rebuilt
by replaying that log at start.

The revive service asks every 100 ms what is due and where a replay would start: both are answered without
a scan of the open checkpoints. Due times are a heap (a closed checkpoint's entry is dropped when it comes
up, and the heap is rebuilt once it holds twice as many entries as checkpoints are open); the open
checkpoints are kept in the order they were added, which is the order of their records in the revive queue,
so the first one's record is where a replay starts.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import field

from spark_mq.broker.pop.records import Checkpoint, CheckpointKey
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass


@lazy_dataclass
class OpenCheckpoint(LazyDataclass):
    ck: Checkpoint
    pending: set[int] = field(default_factory=set)  # queue offsets not acknowledged yet


class CheckpointTable:
    def __init__(self) -> None:
        self._open: dict[CheckpointKey, OpenCheckpoint] = {}  # in the order added: of their revive records
        self._in_flight: Counter[tuple[str, str, int]] = Counter()  # pending messages by (group, topic, queue id)
        self._due: list[tuple[int, int, CheckpointKey]] = []  # heap of (revive time, sequence, key)
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._open)

    def add(self, ck: Checkpoint) -> None:
        """Open ``ck``; checkpoints are added in the order of their records in the revive queue."""
        old = self._open.pop(ck.key, None)
        if old is not None:  # the same pop seen twice (a replay): counted once
            self._in_flight[ck.key[:3]] -= len(old.pending)
        self._open[ck.key] = OpenCheckpoint(ck, set(ck.offsets))
        self._in_flight[ck.key[:3]] += len(ck.offsets)
        self._push(ck)

    def _push(self, ck: Checkpoint) -> None:
        heapq.heappush(self._due, (ck.revive_time, next(self._seq), ck.key))
        if len(self._due) > 2 * len(self._open) + 64:  # mostly closed checkpoints' entries: rebuilt
            self._due = [(o.ck.revive_time, next(self._seq), k) for k, o in self._open.items()]
            heapq.heapify(self._due)

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
        """The checkpoints whose invisible time has passed, with their unacknowledged offsets, soonest first.
        They stay open (and due) until acknowledged."""
        due: dict[CheckpointKey, OpenCheckpoint] = {}
        while self._due and self._due[0][0] <= now_ms:
            revive_time, _, key = heapq.heappop(self._due)
            found = self._open.get(key)
            if found is not None and found.ck.revive_time == revive_time:
                due[key] = found
        for o in due.values():  # back in the heap: one not acknowledged by the revive service comes up again
            heapq.heappush(self._due, (o.ck.revive_time, next(self._seq), o.ck.key))
        return [(o.ck, sorted(o.pending)) for o in due.values()]

    def revive_offset(self, end: int) -> int:
        """Where a replay of the revive queue must start: the oldest open checkpoint's record, the first one
        (see the module's docstring; ``end``, the queue's end, when none is open)."""
        return next((o.ck.revive_offset for o in self._open.values() if o.ck.revive_offset >= 0), end)

    def in_flight(self, group: str, topic: str, queue_id: int) -> int:
        """Unacknowledged messages of the group in the queue."""
        return self._in_flight.get((group, topic, queue_id), 0)

    def in_flight_queues(self) -> dict[tuple[str, str, int], int]:
        """Unacknowledged messages by (group, topic, queue id), of the queues that have any."""
        return {key: n for key, n in self._in_flight.items() if n > 0}
