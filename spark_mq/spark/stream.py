"""The ``spark_mq`` micro-batch stream reader: ``spark.readStream.format("spark_mq")``.

As Spark's ``KafkaMicroBatchStream``: offsets are JSON ``{"<broker>:<queueId>": offset}`` (the next
offset to read of each queue), :meth:`SparkMQStreamReader.initialOffset` resolves
``startingOffsets`` (default ``latest``) / ``startingTimestamp`` with :mod:`spark_mq.spark.offsets`,
:meth:`~SparkMQStreamReader.latestOffset` asks the brokers for each queue's max offset and caps the
batch by the read limit (``maxMessagesPerTrigger``, see :func:`allocate_budget`), and
:meth:`~SparkMQStreamReader.partitions` reuses the batch source's :func:`plan_partitions` and
:func:`read_range` (``maxMessagesPerPartition`` splitting). ``Trigger.AvailableNow`` is supported:
:meth:`~SparkMQStreamReader.prepareForTriggerAvailableNow` pins the max offsets of that moment and no
later batch goes past them.

Queues that appear after the query started (a topic expanded, a broker added) start at their
earliest offset, as Kafka's source does for new partitions: their first messages were written
after the previous batch was planned, so ``latest`` would silently skip them. When that earliest is
not 0 (retention already deleted some), it is data loss: ``failOnDataLoss`` (default) fails the
query, otherwise a warning is logged and the queue starts at the broker's min. A queue that
disappears from the route (broker down, topic shrunk) keeps its offset and is read again when it
comes back.

Without consumer-group membership (for now): every readable queue is read. With ``group`` and
``commitToBroker`` (default true), :meth:`~SparkMQStreamReader.commit` writes each queue's end
offset to the broker with UPDATE_CONSUMER_OFFSET, so lag tools see the query's progress; a failed
commit is logged, not raised (Spark's checkpoint stays the source of truth).

Thread-safety: Spark calls the driver-side methods from one thread of one long-lived Python
process; the reader holds one ``SyncMQClientAPI`` there, opened on first use and closed by
:meth:`~SparkMQStreamReader.stop`. Pickling drops it (executors only call ``read``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_mq.common.errors import MQClientError, RemotingError, SparkMQError
from spark_mq.spark.offsets import (
    BrokerOffsets,
    QueueKey,
    TopicQueues,
    check_start,
    decode_offsets,
    discover_queues,
    queue_key_text,
    resolve_starting,
)
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.source import REQUEST_TIMEOUT_S, QueueRange, plan_partitions, read_range

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_mq.client.sync_api import SyncMQClientAPI

log = logging.getLogger(__name__)

NEW_QUEUE_START = 0  # where a queue first seen after the query started begins (its earliest; see the module doc)


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
    """Micro-batch reader over every readable queue of ``topic`` (see the module doc)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._api: SyncMQClientAPI | None = None
        self._queues: TopicQueues | None = None
        self._target: dict[QueueKey, int] | None = None  # Trigger.AvailableNow's pinned end
        self._latest: dict[QueueKey, int] | None = None  # the max offsets last seen (reportLatestOffset)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_api"] = None
        return state

    # -- driver-side broker access ----------------------------------------------------------------------------

    def _client(self) -> SyncMQClientAPI:
        if self._api is None:
            from spark_mq.client.sync_api import SyncMQClientAPI

            self._api = SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S)
        return self._api

    def _discover(self) -> TopicQueues:
        self._queues = discover_queues(self._client(), self.opts.namesrv_addrs, self.opts.topic)
        return self._queues

    def _max_offsets(self, queues: TopicQueues) -> dict[QueueKey, int]:
        source = BrokerOffsets(self._client(), queues)
        return {key: source.max_offset(key) for key in queues.queues}

    def _new_queue_start(self, source: BrokerOffsets, key: QueueKey) -> int:
        return check_start(self.opts.topic, key, NEW_QUEUE_START, source.min_offset(key), self.opts.fail_on_data_loss)

    # -- DataSourceStreamReader -------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        queues = self._discover()
        starting = resolve_starting(BrokerOffsets(self._client(), queues), queues, self.opts)
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
        begin = from_spark_offset(start)
        queues = self._discover()
        source = BrokerOffsets(self._client(), queues)
        latest = self._max_offsets(queues)
        self._latest = latest
        if self._target is not None:  # AvailableNow: nothing that arrived after the target
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        end = dict(begin)  # queues gone from the route keep their offsets
        backlog: dict[QueueKey, int] = {}
        for key, high in latest.items():
            low = begin[key] if key in begin else self._new_queue_start(source, key)
            if key not in begin:
                end[key] = low
            backlog[key] = max(high - low, 0)
        if isinstance(limit, ReadMaxRows):
            backlog = allocate_budget(backlog, limit.max_rows)
        for key, n in backlog.items():
            end[key] += n
        return to_spark_offset(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return to_spark_offset(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        begin = from_spark_offset(start)
        finish = from_spark_offset(end)
        queues = self._queues if self._queues is not None and set(finish) <= set(self._queues.queues) \
            else self._discover()
        known = [k for k in finish if k in queues.queues]
        missing = sorted(k for k in finish if k not in queues.queues and finish[k] > begin.get(k, NEW_QUEUE_START))
        if missing:
            raise SparkMQError(f"queue(s) {', '.join(map(queue_key_text, missing))} of topic {self.opts.topic!r} have "
                               f"messages to read in this batch but are not in the NameServer's route now (broker "
                               f"down?); the query can restart from its checkpoint once they are back")
        source = BrokerOffsets(self._client(), queues)
        starting = {k: begin[k] if k in begin else self._new_queue_start(source, k) for k in known}
        ending = {k: finish[k] for k in known}
        subset = TopicQueues(queues.topic, queues.brokers, tuple(sorted(known)))
        return plan_partitions(self.opts, subset, starting, ending)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QueueRange):
            return iter(())
        return read_range(partition)

    def commit(self, end: dict) -> None:
        if self.opts.group is None or not self.opts.commit_to_broker:
            return
        offsets = from_spark_offset(end)
        queues = self._queues if self._queues is not None and set(offsets) <= set(self._queues.queues) \
            else self._discover()
        api = self._client()
        for key, offset in sorted(offsets.items()):
            if key not in queues.queues:
                log.warning("spark_mq: not committing %s@%s: the queue is not in the route now", self.opts.topic,
                            queue_key_text(key))
                continue
            try:
                api.update_consumer_offset(queues.addr(key), self.opts.group, self.opts.topic, key[1], offset)
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq: committing offset %d of %s@%s for group %s failed: %s", offset,
                            self.opts.topic, queue_key_text(key), self.opts.group, e)

    def stop(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            api.close()
