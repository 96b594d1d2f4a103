"""Queue allocation strategies of a consumer group, as RocketMQ's ``AllocateMessageQueueStrategy``
implementations, as pure functions.

Every strategy is ``(consumer_group, current_cid, mq_all, cid_all) -> list[MessageQueue]``: the
queues of ``mq_all`` that the consumer ``current_cid`` owns when the group's members are
``cid_all``. Inputs are sorted inside (queues by topic, broker, queue id as Java's
``MessageQueue.compareTo``; client ids as strings), so every member computes the same
partition whatever order it learnt the lists in; a ``current_cid`` not in ``cid_all`` gets ``[]``.
Over all members of ``cid_all`` the results partition ``mq_all``: each queue goes to exactly one
member.

- ``allocate_average`` (``AllocateMessageQueueAveragely``): contiguous blocks, the first
  ``len(mq_all) % len(cid_all)`` members get one more; 8 queues, 3 consumers: 0-2, 3-5, 6-7.
- ``allocate_average_by_circle`` (``AllocateMessageQueueAveragelyByCircle``): dealt round-robin;
  8 queues, 3 consumers: {0,3,6}, {1,4,7}, {2,5}.
- ``AllocateConsistentHash`` (``AllocateMessageQueueConsistentHash``): a hash ring with
  ``virtual_nodes`` points per consumer (``"<cid>-<i>"``), each queue (``MessageQueue.toString()``)
  goes to the first point at or after its hash, wrapping; the default hash is RocketMQ's
  ``MD5Hash`` (first 4 digest bytes, big-endian, unsigned). A consumer joining or leaving moves
  only the queues on the arcs it gains or loses.
- ``AllocateMachineRoomNearby``: queues of a machine room go to the consumers in the same room
  (with an inner strategy); queues of rooms without consumers go to everyone.

``diff(old, new)`` gives the queues a rebalance adds and removes. Thread-safety: everything here
is a pure function or an immutable callable object.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from spark_mq.common.errors import ConfigError
from spark_mq.remoting.bodies import MessageQueue

AllocateStrategy = Callable[[str, str, list[MessageQueue], list[str]], list[MessageQueue]]


def _prepare(current_cid: str, mq_all: Iterable[MessageQueue],
             cid_all: Iterable[str]) -> tuple[list[MessageQueue], list[str], int]:
    """Sorted, de-duplicated inputs and the index of ``current_cid`` (-1 if absent)."""
    mqs = sorted(set(mq_all))
    cids = sorted(set(cid_all))
    index = bisect.bisect_left(cids, current_cid)
    if index == len(cids) or cids[index] != current_cid:
        index = -1
    return mqs, cids, index


def allocate_average(consumer_group: str, current_cid: str, mq_all: list[MessageQueue],
                     cid_all: list[str]) -> list[MessageQueue]:
    """Contiguous blocks of the sorted queues, sizes differing by at most one (AllocateMessageQueueAveragely)."""
    mqs, cids, index = _prepare(current_cid, mq_all, cid_all)
    if index < 0 or not mqs:
        return []
    n, m = len(mqs), len(cids)
    mod = n % m
    if n <= m:
        average = 1
    else:
        average = n // m + 1 if mod > 0 and index < mod else n // m
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n - start)
    return [mqs[(start + i) % n] for i in range(max(count, 0))]


def allocate_average_by_circle(consumer_group: str, current_cid: str, mq_all: list[MessageQueue],
                               cid_all: list[str]) -> list[MessageQueue]:
    """Queues dealt round-robin over the sorted consumers (AllocateMessageQueueAveragelyByCircle)."""
    mqs, cids, index = _prepare(current_cid, mq_all, cid_all)
    if index < 0:
        return []
    return mqs[index::len(cids)]


def md5_hash(key: str) -> int:
    """RocketMQ's ``ConsistentHashRouter.MD5Hash``: the first 4 MD5 bytes as an unsigned big-endian int."""
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


def queue_key(mq: MessageQueue) -> str:
    """Java's ``MessageQueue.toString()``, the key a queue is hashed by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


@dataclass(frozen=True)
class AllocateConsistentHash:
    """Consistent hashing with ``virtual_nodes`` ring points per consumer (AllocateMessageQueueConsistentHash)."""

    virtual_nodes: int = 10
    hash: Callable[[str], int] = md5_hash

    def __post_init__(self) -> None:
        if self.virtual_nodes < 1:
            raise ConfigError(f"virtual_nodes must be at least 1, got {self.virtual_nodes}")

    def ring(self, cids: Sequence[str]) -> tuple[list[int], list[str]]:
        """The ring as (sorted point hashes, owning consumer of each point); a later point
        with the same hash replaces an earlier one, as Java's ``TreeMap.put``."""
        points: dict[int, str] = {}
        for cid in cids:
            for i in range(self.virtual_nodes):
                points[self.hash(f"{cid}-{i}")] = cid
        hashes = sorted(points)
        return hashes, [points[h] for h in hashes]

    @staticmethod
    def route(hashes: list[int], owners: list[str], key_hash: int) -> str:
        """The owner of the first point at or after ``key_hash``, wrapping to the first point."""
        i = bisect.bisect_left(hashes, key_hash)
        return owners[i if i < len(hashes) else 0]

    def __call__(self, consumer_group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        mqs, cids, index = _prepare(current_cid, mq_all, cid_all)
        if index < 0:
            return []
        hashes, owners = self.ring(cids)
        return [mq for mq in mqs if self.route(hashes, owners, self.hash(queue_key(mq))) == current_cid]


@dataclass(frozen=True)
class AllocateMachineRoomNearby:
    """Queues of a machine room go to that room's consumers (by ``inner``); queues of a room
    with no consumer go to all consumers (by ``inner``). AllocateMachineRoomNearby."""

    inner: AllocateStrategy
    machine_room_of_broker: Callable[[str], str]  # broker name -> room
    machine_room_of_client: Callable[[str], str]  # client id -> room

    def __call__(self, consumer_group: str, current_cid: str, mq_all: list[MessageQueue],
                 cid_all: list[str]) -> list[MessageQueue]:
        mqs, cids, index = _prepare(current_cid, mq_all, cid_all)
        if index < 0:
            return []
        mqs_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            mqs_by_room.setdefault(self.machine_room_of_broker(mq.broker_name), []).append(mq)
        cids_by_room: dict[str, list[str]] = {}
        for cid in cids:
            cids_by_room.setdefault(self.machine_room_of_client(cid), []).append(cid)
        mine = self.machine_room_of_client(current_cid)
        result: list[MessageQueue] = []
        if mqs_by_room.get(mine):
            result += self.inner(consumer_group, current_cid, mqs_by_room[mine], cids_by_room[mine])
        for room, room_mqs in sorted(mqs_by_room.items()):
            if room not in cids_by_room:  # nobody lives there: everyone shares them
                result += self.inner(consumer_group, current_cid, room_mqs, cids)
        return sorted(result)


STRATEGIES: dict[str, AllocateStrategy] = {
    "average": allocate_average,
    "circle": allocate_average_by_circle,
    "consistent_hash": AllocateConsistentHash(),
}


def get_strategy(name: str) -> AllocateStrategy:
    """The strategy registered under ``name``; ConfigError listing the valid names otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ConfigError(f"unknown allocate strategy {name!r}: use one of {', '.join(sorted(STRATEGIES))}") from None


@dataclass(frozen=True)
class RebalanceResult:
    """What one rebalance changed: the queues now owned, those gained and those given up."""

    assigned: frozenset[MessageQueue]
    added: frozenset[MessageQueue]
    removed: frozenset[MessageQueue]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def diff(old: set[MessageQueue] | frozenset[MessageQueue],
         new: set[MessageQueue] | frozenset[MessageQueue]) -> tuple[frozenset[MessageQueue], frozenset[MessageQueue]]:
    """(added, removed): queues in ``new`` but not ``old``, and in ``old`` but not ``new``."""
    return frozenset(new - old), frozenset(old - new)


def rebalance_result(old: set[MessageQueue] | frozenset[MessageQueue],
                     new: Iterable[MessageQueue]) -> RebalanceResult:
    """The RebalanceResult of moving from owning ``old`` to owning ``new``."""
    assigned = frozenset(new)
    added, removed = diff(old, assigned)
    return RebalanceResult(assigned, added, removed)
