"""The ``spark_mq`` micro-batch stream reader: ``spark.readStream.format("spark_mq")``.

As Spark's ``KafkaMicroBatchStream``: offsets are JSON ``{"<broker>:<queueId>": offset}`` (the next
offset to read of each queue), :meth:`SparkMQStreamReader.initialOffset` resolves
``startingOffsets`` (default ``latest``) / ``startingTimestamp`` with :mod:`spark_mq.spark.offsets`,
:meth:`~SparkMQStreamReader.latestOffset` asks the brokers for each queue's max offset and caps the
batch by the read limit (``maxMessagesPerTrigger``, see :func:`allocate_budget`), and
:meth:`~SparkMQStreamReader.partitions` plans as the batch reader does
(:mod:`spark_mq.spark.partitions`, ``maxMessagesPerPartition`` splitting). ``Trigger.AvailableNow`` is supported:
:meth:`~SparkMQStreamReader.prepareForTriggerAvailableNow` pins the max offsets of that moment and no
later batch goes past them.

A queue that first appears in a batch's end offset (and not in its start) *joins*: its end offset
is where it starts, and it is read from the next batch on — so a batch's partitions are always
``[start, end)`` of queues in both, and replaying a batch from the checkpoint reads exactly the
same ranges.

Queues seen late. The starting rule applies to the queues that existed when the query started, as
Kafka's ``startingOffsets`` applies to the partitions of that moment — whether or not their broker
answered then. A queue first seen after the first trigger (a topic expanded, a broker added, or a
broker that was down at the start and is back) starts by the rule *as of the query's start*
(:func:`~spark_mq.spark.offsets.resolve_late`): under ``latest`` at the first message stored since
the start (SEARCH_OFFSET_BY_TIMESTAMP with the driver's clock at ``initialOffset``), so a queue created
later is read from its earliest — as Kafka starts new partitions — and a broker that was down gives
neither its history nor a gap; under ``startingTimestamp`` at that time; under ``earliest`` / JSON at
its earliest, where an earliest above 0 (retention already deleted some) is data loss. After a restart
from the checkpoint the start time is not known: such a queue starts at its earliest. A queue that
disappears from the route (broker down, topic shrunk) keeps its offset and is read again when it
comes back.

Offsets going backwards. A queue whose broker max offset is below the offset this query has read up to
(the topic was deleted and re-created, or the log truncated) holds new messages at offsets already
read: with ``failOnDataLoss`` (default) the query fails naming the queue and both offsets, otherwise a
warning is logged and the queue restarts at the broker's min (it joins there, as above).

With ``group`` (and ``commitToBroker``, default true) the query is a member of that consumer group
(:mod:`spark_mq.spark.group_member`): its offsets name only the queues it holds. Spark asks for
``latestOffset(start)`` once the previous batch is done, so ``start`` is processed: the reader
commits it to the brokers there (UPDATE_CONSUMER_OFFSET; lag tools and other members see it), then
gives up the queues the allocation no longer gives it (dropped from the offsets, unlocked after
the commit) and takes the ones it now gives (locked; they join at the group's committed offset, or
without one at their earliest — never ``latest``, which would skip what arrived since the group
started — unless the queue was seen late, above). The offsets a member resolves at its first trigger
are committed at once, so a member taking its queues over before its first batch is done starts there.
Two Spark applications of one group so split a topic's queues, and when one stops (its reader
unlocks everything and leaves the group) the other takes its queues over at its next trigger.

Locks are checked before use: before it commits or plans anything (``latestOffset``, ``commit``) the
reader renews every lock it holds at the brokers (LOCK_BATCH_MQ) and drops the queues refused, so a
member that was stopped or cut off past the broker's lock expiry (``rebalanceLockMaxLiveTime``) and
whose queues another member took over neither commits over the new owner nor plans those queues
again; it takes them back only through the allocation, locking and joining at the committed offset.
The at-least-once window across members: the messages of a batch a member planned while it held the
lock but had not committed when the queue changed hands (it stopped, or lost the lock while the batch
ran) — the next owner starts at the last committed offset and reads them again. Within one query
Spark's checkpoint keeps delivery exactly once. Without ``group`` every readable queue is read and
nothing is committed.

Thread-safety: Spark calls the driver-side methods from one thread of one long-lived Python
process; the reader holds one ``SyncMQClientAPI`` (and, with a group, one group member) there,
opened on first use and closed by :meth:`~SparkMQStreamReader.stop`. Pickling drops them
(executors only call ``read``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_mq.arrow.queues import QueueKey, TopicQueues, discover_queues, queue_key_text
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.arrow.schema import COLUMNS
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError, RemotingError, SparkMQError
from spark_mq.spark.group_member import DriverGroupMember, leave_before_exit
from spark_mq.spark.offsets import (
    OffsetSource,
    check_max,
    check_start,
    decode_offsets,
    offset_source,
    resolve_late,
    resolve_starting,
)
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import plan_partitions, read_partition

log = logging.getLogger(__name__)


def to_spark_offset(offsets: Mapping[QueueKey, int]) -> dict[str, int]:
    """Offsets as the dict Spark journals: ``{"<broker>:<queueId>": offset}``, sorted."""
    return {queue_key_text(k): int(v) for k, v in sorted(offsets.items())}


def from_spark_offset(offset: Mapping[str, Any], what: str = "stream offset") -> dict[QueueKey, int]:
    """The dict Spark hands back (from :func:`to_spark_offset` or a checkpoint) as queue offsets."""
    return decode_offsets(json.dumps(dict(offset)), what)


def allocate_budget(backlog: Mapping[QueueKey, int], budget: int) -> dict[QueueKey, int]:
    """How many messages each queue may take out of ``budget`` (never more in total, never more than its
    backlog): every queue with a backlog gets an equal share of what is left, a queue needing less than
    its share leaves the rest to the others (water-filling), and the last units that do not divide
    evenly go one each to the queues with the most backlog left (ties by queue key)."""
    take = dict.fromkeys(backlog, 0)
    remaining = max(budget, 0)
    pending = sorted(k for k, b in backlog.items() if b > 0)
    while pending and remaining > 0:
        share = remaining // len(pending)
        if share == 0:
            for key in sorted(pending, key=lambda k: (take[k] - backlog[k], k))[:remaining]:
                take[key] += 1
            break
        still: list[QueueKey] = []
        for key in pending:
            got = min(share, backlog[key] - take[key])
            take[key] += got
            remaining -= got
            if take[key] < backlog[key]:
                still.append(key)
        pending = still
    return take


class SparkMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the queues of ``topic`` this query reads (see the module doc)."""

    def __init__(self, opts: SourceOptions, columns: tuple[str, ...] = COLUMNS) -> None:
        self.opts = opts
        self.columns = columns  # of the source's schema, the ones read (spark_mq.spark.schema.source_columns)
        self._api: SyncMQClientAPI | None = None
        self._member: DriverGroupMember | None = None
        self._queues: TopicQueues | None = None
        self._target: dict[QueueKey, int] | None = None  # Trigger.AvailableNow's pinned end
        self._latest: dict[QueueKey, int] | None = None  # the max offsets last seen (reportLatestOffset)
        self._committed: dict[QueueKey, int] = {}  # the group's offsets at the brokers, as far as this reader knows
        self._started_ms: int | None = None  # when initialOffset ran (None: restarted from a checkpoint)
        self._seen_at_start: frozenset[QueueKey] | None = None  # the route's queues then

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_api"] = None
        state["_member"] = None
        return state

    # -- driver-side broker access ----------------------------------------------------------------------------

    def _client(self) -> SyncMQClientAPI:
        if self._api is None:
            self._api = SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S)
        return self._api

    def _group_member(self) -> DriverGroupMember:
        if self._member is None:
            leave_before_exit()
            self._member = DriverGroupMember(self.opts)
        return self._member

    def _discover(self) -> TopicQueues:
        self._queues = discover_queues(self._client(), self.opts.namesrv_addrs, self.opts.topic)
        return self._queues

    def _max_offsets(self, queues: TopicQueues) -> dict[QueueKey, int]:
        source = offset_source(self._client(), queues, self.opts)
        return {key: source.max_offset(key) for key in queues.queues}

    def _late_start(self, source: OffsetSource, queues: TopicQueues, key: QueueKey) -> int:
        return resolve_late(source, queues, self.opts, key, self._started_ms)

    # -- the consumer group -------------------------------------------------------------------------------------

    def _commit(self, queues: TopicQueues, offsets: Mapping[QueueKey, int]) -> None:
        """UPDATE_CONSUMER_OFFSET of the group for each offset the broker does not have yet; a failure
        is logged and retried at the next commit (Spark's checkpoint stays the source of truth)."""
        api = self._client()
        for key, offset in sorted(offsets.items()):
            if self._committed.get(key) == offset or key not in queues.queues:
                continue
            try:
                api.update_consumer_offset(queues.addr(key), self.opts.group, self.opts.topic, key[1], offset)
                self._committed[key] = offset
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq: committing offset %d of %s@%s for group %s failed: %s", offset,
                            self.opts.topic, queue_key_text(key), self.opts.group, e)

    def _confirmed(self, member: DriverGroupMember) -> frozenset[QueueKey]:
        """The queues whose locks this member still holds, checked at the brokers now (before it commits
        or plans anything); a queue lost meanwhile is forgotten, as its new owner commits it."""
        held = member.confirm()
        for key in set(self._committed) - held:
            del self._committed[key]
        return held

    def _join_at(self, source: OffsetSource, queues: TopicQueues, key: QueueKey) -> int:
        """Where a queue this member just took over starts: the group's committed offset (its previous
        owner committed it before unlocking); without one, its earliest when it was in the route at this
        query's start (or that is unknown), else the starting rule as of the start (module doc)."""
        committed = source.committed_offset(self.opts.group, key)  # type: ignore[arg-type]
        if committed is None:
            if self._seen_at_start is None or key in self._seen_at_start:
                return source.min_offset(key)
            return self._late_start(source, queues, key)
        self._committed[key] = committed
        return check_start(self.opts.topic, key, committed, source.min_offset(key), self.opts.fail_on_data_loss)

    def _rebalance(self, queues: TopicQueues, source: OffsetSource,
                   begin: Mapping[QueueKey, int]) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
        """Commit what the group's queues were processed up to, give up the queues the allocation no
        longer gives this member (unlocked once committed) and lock the ones it now gives. Returns
        the queues read on from ``begin`` and the queues joining at the offsets they start from."""
        member = self._group_member()
        held = self._confirmed(member)
        self._commit(queues, {k: v for k, v in begin.items() if k in held})
        wanted = member.allocation(queues)
        leaving = held - wanted
        member.unlock(set(leaving))
        gained = member.lock(set(wanted - held) & set(queues.queues))
        held = (held - leaving) | gained
        reading: dict[QueueKey, int] = {}
        joining: dict[QueueKey, int] = {}
        for key in sorted(held):
            if key in begin and key not in gained:
                reading[key] = begin[key]
                continue
            if key not in begin:
                joining[key] = self._join_at(source, queues, key)
                continue
            # this query read the queue before it held its lock (a restart from the checkpoint):
            # read on unless another member has committed past it meanwhile
            committed = source.committed_offset(self.opts.group, key)  # type: ignore[arg-type]
            if committed is None or committed <= begin[key]:
                reading[key] = begin[key]
            # else: leave it out of this batch; it joins at the committed offset in the next one
        self._commit(queues, reading)
        if leaving or gained:
            log.info("spark_mq: group %s: %s gives up %s, takes %s; reads %d queues of %s", self.opts.group,
                     member.client_id, _names(leaving), _names(gained), len(reading) + len(joining), self.opts.topic)
        return reading, joining

    # -- DataSourceStreamReader -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        self._started_ms = int(time.time() * 1000)
        queues = self._discover()
        self._seen_at_start = frozenset(queues.queues)
        source = offset_source(self._client(), queues, self.opts)
        if self.opts.group_member:
            member = self._group_member()
            owned = member.lock(set(member.allocation(queues)))
            starting = resolve_starting(source, queues, self.opts, owned)
            self._commit(queues, starting)  # so a member taking them over before a batch is done starts here
        else:
            starting = resolve_starting(source, queues, self.opts)
        log.info("spark_mq stream of %s starts at %s", self.opts.topic, to_spark_offset(starting))
        return to_spark_offset(starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger is not None:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._max_offsets(self._discover())
        log.info("spark_mq stream of %s: Trigger.AvailableNow reads up to %s", self.opts.topic,
                 to_spark_offset(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict[str, int]:
        begin = from_spark_offset(start)  # everything before it is processed: Spark asks once a batch is done
        queues = self._discover()
        source = offset_source(self._client(), queues, self.opts)
        if self.opts.group_member:
            reading, joining = self._rebalance(queues, source, begin)
        else:  # every queue; queues gone from the route keep their offsets
            reading = dict(begin)
            joining = {k: self._late_start(source, queues, k) for k in queues.queues if k not in begin}
        latest = self._max_offsets(queues)
        self._latest = latest
        for key in [k for k, low in reading.items() if k in latest and latest[k] < low]:
            joining[key] = check_max(self.opts.topic, key, reading.pop(key), latest[key], source.min_offset(key),
                                     self.opts.fail_on_data_loss)
        if self._target is not None:  # AvailableNow: nothing that arrived after the target
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        backlog = {k: max(latest[k] - low, 0) for k, low in reading.items() if k in latest}
        if isinstance(limit, ReadMaxRows):
            backlog = allocate_budget(backlog, limit.max_rows)
        end = {**reading, **joining}
        for key, n in backlog.items():
            end[key] += n
        return to_spark_offset(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return to_spark_offset(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_spark_offset(start)
        finish = from_spark_offset(end)
        both = sorted(set(begin) & set(finish))  # a queue only in `end` joins: it is read from the next batch on
        queues = self._queues if self._queues is not None and set(both) <= set(self._queues.queues) \
            else self._discover()
        missing = [k for k in both if k not in queues.queues and finish[k] > begin[k]]
        if missing:
            raise SparkMQError(f"queue(s) {_names(missing)} of topic {self.opts.topic!r} have messages to read in "
                               f"this batch but are not in the NameServer's route now (broker down?); the query can "
                               f"restart from its checkpoint once they are back")
        known = [k for k in both if k in queues.queues]
        subset = TopicQueues(queues.topic, queues.brokers, tuple(known))
        return plan_partitions(self.opts, subset, {k: begin[k] for k in known}, {k: finish[k] for k in known},
                               offset_source(self._client(), subset, self.opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.columns)

    def commit(self, end: dict) -> None:
        if not self.opts.group_member:
            return
        offsets = from_spark_offset(end)
        queues = self._queues if self._queues is not None and set(offsets) <= set(self._queues.queues) \
            else self._discover()
        held = self._confirmed(self._group_member())
        self._commit(queues, {k: v for k, v in offsets.items() if k in held})

    def stop(self) -> None:
        member, self._member = self._member, None
        if member is not None:
            member.close()
        api, self._api = self._api, None
        if api is not None:
            api.close()


def _names(keys: Iterable[QueueKey]) -> str:
    return ", ".join(map(queue_key_text, sorted(keys))) or "nothing"
