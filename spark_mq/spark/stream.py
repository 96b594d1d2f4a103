"""The ``spark_mq`` micro-batch stream reader: ``spark.readStream.format("spark_mq")``.

As Spark's ``KafkaMicroBatchStream``: offsets are JSON ``{"<topic>": {"<broker>:<queueId>": offset}}``
(the next offset to read of each queue; a checkpoint of one topic written before several topics,
``{"<broker>:<queueId>": offset}``, still loads), :meth:`SparkMQStreamReader.initialOffset` resolves
``startingOffsets`` (default ``latest``) / ``startingTimestamp`` with :mod:`spark_mq.spark.offset_reader`,
:meth:`~SparkMQStreamReader.latestOffset` asks the brokers for each queue's max offset and caps the
batch by the read limit (``maxMessagesPerTrigger``, see :func:`allocate_budget`; ``minMessagesPerTrigger``
holds a batch back, see :meth:`~SparkMQStreamReader._holds_back`), and
:meth:`~SparkMQStreamReader.partitions` plans as the batch reader does
(:mod:`spark_mq.spark.partitions`, ``maxMessagesPerPartition`` splitting). ``Trigger.AvailableNow`` is supported:
:meth:`~SparkMQStreamReader.prepareForTriggerAvailableNow` pins the max offsets of that moment and no
later batch goes past them.

Each trigger the reader finds the topics it reads (with ``topicPattern``, the NameServer's topics
matching it now) and handles each topic's queues as below; a topic that starts matching after the
query started is all queues seen late, so it is read from its earliest (every message of it was
stored since the start).

A queue that first appears in a batch's end offset (and not in its start) *joins*: its end offset
is where it starts, and it is read from the next batch on — so a batch's partitions are always
``[start, end)`` of queues in both, and replaying a batch from the checkpoint reads exactly the
same ranges.

Queues seen late. The starting rule applies to the queues that existed when the query started, as
Kafka's ``startingOffsets`` applies to the partitions of that moment — whether or not their broker
answered then. A queue first seen after the first trigger (a topic expanded, a broker added, or a
broker that was down at the start and is back) starts by the rule *as of the query's start*
(:func:`~spark_mq.spark.offset_reader.resolve_late`): under ``latest`` at the first message stored since
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
the commit; a queue whose commit failed is kept and read on until one succeeds) and takes the ones
it now gives (locked; they join at the group's committed offset, or without one at their earliest —
never ``latest``, which would skip what arrived since the group started — unless the queue was seen
late, above). The offsets a member resolves at its first trigger
are committed at once, so a member taking its queues over before its first batch is done starts there.
At its first trigger a member starts the queues it locks by the starting rule only when it is the
group's one member: with others, a queue the group committed starts at that offset, as a queue taken
over later does (one of them may have handed it over between this member's joining and its locking),
and the rule applies to the queues without one. :meth:`~SparkMQStreamReader.initialOffset` resolves
once: Spark asks again for it to plan the first batch, whose start must stay the one its end was
worked out from (a second resolution would lock and commit again, perhaps queues handed over meanwhile).
Two Spark applications of one group so split a topic's queues, and when one stops (its reader
unlocks everything and leaves the group) the other takes its queues over at its next trigger.

With ``sqlFilter`` the brokers filter each pull (:mod:`spark_mq.spark.sql_filter`): a batch's offsets
are its queues' offsets as without it, so the messages filtered out are passed over like the ones
delivered and the query's progress and lag stay those of the queues; the rows are the matching ones.

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

A broker set whose master dies (replication, brokerRole SLAVE) is read at its slave: the route names the
slave once the NameServer drops the master, and until then the offset lookups ask the slave when the
master does not answer (:class:`~spark_mq.arrow.queues.BrokerOffsets`), as the executors' pulls do.
Commits go to the address the route names now: the slave while the master is dead, the master again
once it is back; an unchanged offset is committed again every :data:`RECOMMIT_INTERVAL_S`, so a master
SIGKILLed before it persisted the last commits gets them back.

Thread-safety: Spark calls the driver-side methods from one thread of one long-lived Python
process; the reader holds one ``SyncMQClientAPI`` (and, with a group, one group member) there,
opened on first use and closed by :meth:`~SparkMQStreamReader.stop`. Pickling drops them
(executors only call ``read``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from spark_mq.arrow.queues import QueueKey, TopicQueues, discover_topics, queue_key_text
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.arrow.schema import COLUMNS
from spark_mq.client.config import open_api
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError, RemotingError, SparkMQError
from spark_mq.spark.group_member import DriverGroupMember, leave_before_exit
from spark_mq.spark.offset_reader import (
    OffsetSource,
    check_max,
    check_start,
    offset_source,
    resolve_late,
    resolve_starting,
)
from spark_mq.spark.offsets import TopicOffsets, decode_topic_offsets, topic_offsets_obj
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import Range, plan_ranges, read_partition, to_partitions
from spark_mq.spark.sql_filter import check_brokers
from spark_mq.spark.worker_gc import freeze_after_first_read

log = logging.getLogger(__name__)

K = TypeVar("K", bound=tuple)  # a queue: (topic, (broker, queue id)) across topics
# an unchanged offset is committed again this often (RocketMQ's persistConsumerOffsetInterval, 5 s): a broker
# that lost it (SIGKILLed before persisting its offsets) gets it back
RECOMMIT_INTERVAL_S = 5.0


def to_spark_offset(offsets: Mapping[str, Mapping[QueueKey, int]]) -> dict[str, dict[str, int]]:
    """Offsets as the dict Spark journals: ``{"<topic>": {"<broker>:<queueId>": offset}}``, sorted."""
    return topic_offsets_obj(offsets)


def from_spark_offset(offset: Mapping[str, Any], single_topic: str | None, what: str = "stream offset") -> TopicOffsets:
    """The dict Spark hands back (from :func:`to_spark_offset`, or the un-keyed form of a checkpoint
    written before several topics: ``single_topic``'s) as queue offsets by topic."""
    return decode_topic_offsets(json.dumps(dict(offset)), what, single_topic)


def _max_offsets(source: OffsetSource, queues: TopicQueues) -> dict[QueueKey, int]:
    return {key: source.max_offset(key) for key in queues.queues}


def allocate_budget(backlog: Mapping[K, int], budget: int) -> dict[K, int]:
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
        still: list[K] = []
        for key in pending:
            got = min(share, backlog[key] - take[key])
            take[key] += got
            remaining -= got
            if take[key] < backlog[key]:
                still.append(key)
        pending = still
    return take


class SparkMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the queues of the topics this query reads (see the module doc).
    ``clock`` (seconds) times ``maxTriggerDelay``."""

    def __init__(self, opts: SourceOptions, columns: tuple[str, ...] = COLUMNS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self.columns = columns  # of the source's schema, the ones read (spark_mq.spark.schema.source_columns)
        self.clock = clock
        self._api: SyncMQClientAPI | None = None
        self._member: DriverGroupMember | None = None
        self._topics: dict[str, TopicQueues] | None = None  # the topics found at the last discovery
        self._target: TopicOffsets | None = None  # Trigger.AvailableNow's pinned end
        self._latest: TopicOffsets | None = None  # the max offsets last seen (reportLatestOffset)
        # the group's offsets at the brokers, as far as this reader knows, by (topic, queue): the address
        # committed to, the offset, and when (clock())
        self._committed: dict[tuple[str, QueueKey], tuple[str, int, float]] = {}
        # what initialOffset resolved: Spark asks again for the first batch's start (MicroBatchExecution.runBatch),
        # which must be the start its end was worked out from, with no second lock and commit
        self._initial: dict[str, dict[str, int]] | None = None
        self._started_ms: int | None = None  # when initialOffset ran (None: restarted from a checkpoint)
        self._seen_at_start: frozenset[tuple[str, QueueKey]] | None = None  # the routes' (topic, queue)s then
        self._last_batch: float | None = None  # clock() of the last batch let through (minMessagesPerTrigger)
        self._filter_checked: set[tuple[str, str]] = set()  # (topic, broker address) that serve sqlFilter

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_api"] = None
        state["_member"] = None
        return state

    # -- driver-side broker access ----------------------------------------------------------------------------

    def _client(self) -> SyncMQClientAPI:
        if self._api is None:
            self._api = open_api(self.opts.client_config, REQUEST_TIMEOUT_S)
        return self._api

    def _group_member(self) -> DriverGroupMember:
        if self._member is None:
            leave_before_exit()
            self._member = DriverGroupMember(self.opts)
        return self._member

    def _discover(self) -> dict[str, TopicQueues]:
        found = discover_topics(self._client(), self.opts.namesrv_addrs, self.opts.topics, self.opts.topic_pattern)
        for queues in found:  # sqlFilter: each broker asked once whether it serves it, before it is read
            check_brokers(self._client(), queues, self.opts, self._filter_checked)
        self._topics = {queues.topic: queues for queues in found}
        return self._topics

    def _known_topics(self, offsets: Mapping[str, Iterable[QueueKey]]) -> dict[str, TopicQueues]:
        """The topics of the last discovery when they cover every queue of ``offsets``, else found again."""
        known = self._topics
        if known is not None and all(topic in known and set(queues) <= set(known[topic].queues)
                                     for topic, queues in offsets.items()):
            return known
        return self._discover()

    def _late_start(self, source: OffsetSource, queues: TopicQueues, key: QueueKey) -> int:
        return resolve_late(source, queues, self.opts, key, self._started_ms)

    # -- the consumer group -------------------------------------------------------------------------------------

    def _commit(self, queues: TopicQueues, offsets: Mapping[QueueKey, int]) -> set[QueueKey]:
        """UPDATE_CONSUMER_OFFSET of the group for each offset the queue's broker may not have: one not
        committed yet at the address the route gives now (a master died and its slave serves the queue,
        or the master is back: each keeps its own offsets), or committed more than
        :data:`RECOMMIT_INTERVAL_S` ago (a master SIGKILLed before it persisted its offsets comes back
        without them). A failure is logged and retried at the next commit (Spark's checkpoint stays
        the source of truth). Returns the queues whose commit failed."""
        api = self._client()
        now = self.clock()
        failed: set[QueueKey] = set()
        for key, offset in sorted(offsets.items()):
            if key not in queues.queues:
                continue
            addr = queues.addr(key)
            done = self._committed.get((queues.topic, key))
            if done is not None and done[:2] == (addr, offset) and now - done[2] < RECOMMIT_INTERVAL_S:
                continue
            try:
                api.update_consumer_offset(addr, self.opts.group, queues.topic, key[1], offset)
                self._committed[(queues.topic, key)] = (addr, offset, now)
            except (RemotingError, MQClientError) as e:
                failed.add(key)
                log.warning("spark_mq: committing offset %d of %s@%s for group %s failed: %s", offset,
                            queues.topic, queue_key_text(key), self.opts.group, e)
        return failed

    def _confirmed(self, member: DriverGroupMember, topic: str) -> frozenset[QueueKey]:
        """The queues of ``topic`` whose locks this member still holds, checked at the brokers now (before
        it commits or plans anything); a queue lost meanwhile is forgotten, as its new owner commits it."""
        held = member.confirm(topic)
        for lost in [(t, k) for t, k in self._committed if t == topic and k not in held]:
            del self._committed[lost]
        return held

    def _join_at(self, source: OffsetSource, queues: TopicQueues, key: QueueKey) -> int:
        """Where a queue this member just took over starts: the group's committed offset (its previous
        owner committed it before unlocking); without one, its earliest when it was in the route at this
        query's start (or that is unknown), else the starting rule as of the start (module doc)."""
        start = self._group_start(source, queues, key)
        if start is not None:
            return start
        if self._seen_at_start is None or (queues.topic, key) in self._seen_at_start:
            return source.min_offset(key)
        return self._late_start(source, queues, key)

    def _group_start(self, source: OffsetSource, queues: TopicQueues, key: QueueKey) -> int | None:
        """The group's committed offset of a queue this member takes over (checked against the broker's
        min), or None without one."""
        committed = source.committed_offset(self.opts.group, key)  # type: ignore[arg-type]
        if committed is None:
            return None
        self._committed[(queues.topic, key)] = (queues.addr(key), committed, self.clock())
        return check_start(queues.topic, key, committed, source.min_offset(key), self.opts.fail_on_data_loss)

    def _first_held(self, source: OffsetSource, queues: TopicQueues) -> dict[QueueKey, int]:
        """The queues this member locks at its first trigger and where they start: by the starting rule,
        unless other members are in the group — then a queue with a committed offset starts there, as a
        queue taken over later does (:meth:`_join_at`): another member may have given it up to this one
        (committed, then unlocked) between this member's joining the group and its locking, and the
        starting rule would read again what that member read (or skip what it had not)."""
        member = self._group_member()
        owned = member.lock(queues.topic, set(member.allocation(queues)))
        joined: dict[QueueKey, int] = {}
        if owned and member.has_others(queues.topic):
            starts = {key: self._group_start(source, queues, key) for key in sorted(owned)}
            joined = {key: start for key, start in starts.items() if start is not None}
        return {**resolve_starting(source, queues, self.opts, owned - set(joined)), **joined}

    def _rebalance(self, queues: TopicQueues, source: OffsetSource,
                   begin: Mapping[QueueKey, int]) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
        """Commit what the group's queues were processed up to, give up the queues the allocation no
        longer gives this member (unlocked once committed; kept while their commit fails) and lock the
        ones it now gives. Returns
        the queues read on from ``begin`` and the queues joining at the offsets they start from."""
        member = self._group_member()
        held = self._confirmed(member, queues.topic)
        uncommitted = self._commit(queues, {k: v for k, v in begin.items() if k in held})
        wanted = member.allocation(queues)
        # a queue whose offset did not reach its broker is kept (and read on) until it does: its next owner
        # would start at the offset committed before, and read again what this member read since
        leaving = held - wanted - uncommitted
        member.unlock(queues.topic, set(leaving))
        gained = member.lock(queues.topic, set(wanted - held) & set(queues.queues))
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
        if leaving or gained or joining:
            log.info("spark_mq: group %s: %s gives up %s, takes %s; joining: %s; reads %d queues of %s",
                     self.opts.group, member.client_id, _names(leaving), _names(gained), _at(joining),
                     len(reading) + len(joining), queues.topic)
        return reading, joining

    # -- DataSourceStreamReader -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, dict[str, int]]:
        if self._initial is not None:
            return self._initial
        self._started_ms = int(time.time() * 1000)
        topics = self._discover()
        self._seen_at_start = frozenset((topic, k) for topic, queues in topics.items() for k in queues.queues)
        starting: TopicOffsets = {}
        for topic, queues in topics.items():
            source = offset_source(self._client(), queues, self.opts)
            if self.opts.group_member:
                starting[topic] = self._first_held(source, queues)
                self._commit(queues, starting[topic])  # so a member taking them over before a batch is done starts here
            else:
                starting[topic] = resolve_starting(source, queues, self.opts)
        self._initial = to_spark_offset(starting)
        log.info("spark_mq stream of %s starts at %s", self.opts.subject, self._initial)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: with both options Spark carries ReadMaxRows and the reader
        # applies minMessagesPerTrigger from its options (_holds_back)
        if self.opts.max_messages_per_trigger is not None:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        if self.opts.min_messages_per_trigger is not None:
            return ReadMinRows(self.opts.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {topic: _max_offsets(offset_source(self._client(), queues, self.opts), queues)
                        for topic, queues in self._discover().items()}
        log.info("spark_mq stream of %s: Trigger.AvailableNow reads up to %s", self.opts.subject,
                 to_spark_offset(self._target))

    def _holds_back(self, limit: ReadLimit, waiting: int) -> bool:
        """Whether ``minMessagesPerTrigger`` holds this batch back, as Kafka's ``delayBatch``: fewer
        messages wait than it asks for and ``maxTriggerDelay`` has not passed since the last batch (or
        the query's first trigger). Never under Trigger.Once (Spark passes ReadAllAvailable) or
        Trigger.AvailableNow (it would wait for messages that are not coming)."""
        minimum = self.opts.min_messages_per_trigger
        if minimum is None or isinstance(limit, ReadAllAvailable) or self._target is not None or waiting == 0:
            return False
        now = self.clock()
        if self._last_batch is None:
            self._last_batch = now
        if waiting < minimum and now - self._last_batch < self.opts.max_trigger_delay_ms / 1000:
            return True
        self._last_batch = now
        return False

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict[str, dict[str, int]]:
        # everything before `start` is processed: Spark asks once a batch is done
        begin = from_spark_offset(start, self.opts.single_topic)
        end: TopicOffsets = {topic: dict(queues) for topic, queues in begin.items()}  # topics not found keep theirs
        backlog: dict[tuple[str, QueueKey], int] = {}
        self._latest = {}
        for topic, queues in self._discover().items():
            source = offset_source(self._client(), queues, self.opts)
            before = begin.get(topic, {})
            if self.opts.group_member:
                reading, joining = self._rebalance(queues, source, before)
            else:  # every queue; queues gone from the route keep their offsets
                reading = dict(before)
                joining = {k: self._late_start(source, queues, k) for k in queues.queues if k not in before}
            latest = _max_offsets(source, queues)
            self._latest[topic] = latest
            for key in [k for k, low in reading.items() if k in latest and latest[k] < low]:
                joining[key] = check_max(topic, key, reading.pop(key), latest[key], source.min_offset(key),
                                         self.opts.fail_on_data_loss)
            if self._target is not None:  # AvailableNow: nothing that arrived after the target
                target = self._target.get(topic, {})
                latest = {k: min(v, target[k]) for k, v in latest.items() if k in target}
            backlog.update({(topic, k): max(latest[k] - low, 0) for k, low in reading.items() if k in latest})
            end[topic] = {**reading, **joining}
        if self._holds_back(limit, sum(backlog.values())):
            backlog = {}
        elif isinstance(limit, ReadMaxRows):
            backlog = allocate_budget(backlog, limit.max_rows)
        for (topic, key), n in backlog.items():
            end[topic][key] += n
        return to_spark_offset(end)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return to_spark_offset(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_spark_offset(start, self.opts.single_topic)
        finish = from_spark_offset(end, self.opts.single_topic)
        # a queue only in `end` joins: it is read from the next batch on
        both = {topic: sorted(set(begin[topic]) & set(finish[topic])) for topic in set(begin) & set(finish)}
        topics = self._known_topics(both)
        ranges: list[Range] = []
        for topic, keys in sorted(both.items()):
            queues = topics.get(topic, TopicQueues(topic, {}, ()))
            missing = [k for k in keys if k not in queues.queues and finish[topic][k] > begin[topic][k]]
            if missing:
                raise SparkMQError(f"queue(s) {_names(missing)} of topic {topic!r} have messages to read in this "
                                   f"batch but are not in the NameServer's route now (broker down?); the query can "
                                   f"restart from its checkpoint once they are back")
            known = [k for k in keys if k in queues.queues]
            subset = replace(queues, queues=tuple(known))  # its members kept: where a range goes when its broker dies
            ranges += plan_ranges(self.opts, subset, {k: begin[topic][k] for k in known},
                                  {k: finish[topic][k] for k in known},
                                  offset_source(self._client(), subset, self.opts))
        return to_partitions(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = read_partition(partition, self.columns, self.opts.sql_filter, self.opts.property_columns)
        return freeze_after_first_read(batches)  # PySpark's full GC after every task (spark_mq.spark.worker_gc)

    def commit(self, end: dict) -> None:
        if not self.opts.group_member:
            return
        offsets = from_spark_offset(end, self.opts.single_topic)
        topics = self._known_topics(offsets)
        for topic, queue_offsets in sorted(offsets.items()):
            if topic in topics:
                held = self._confirmed(self._group_member(), topic)
                self._commit(topics[topic], {k: v for k, v in queue_offsets.items() if k in held})

    def stop(self) -> None:
        member, self._member = self._member, None
        if member is not None:
            member.close()
        api, self._api = self._api, None
        if api is not None:
            api.close()


def _names(keys: Iterable[QueueKey]) -> str:
    return ", ".join(map(queue_key_text, sorted(keys))) or "nothing"


def _at(offsets: Mapping[QueueKey, int]) -> str:
    """Queues and the offsets they start from, for the log: ``broker-a:4 at 50, ...``."""
    return ", ".join(f"{queue_key_text(k)} at {o}" for k, o in sorted(offsets.items())) or "nothing"
