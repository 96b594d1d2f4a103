"""The ``spark_mq`` Python data source (batch reads): ``spark.read.format("spark_mq")``.

Laid out as Spark's Kafka source: :class:`SparkMQDataSource` is the provider (name, schema,
options validated up front by :mod:`spark_mq.spark.options`), offsets live in
:mod:`spark_mq.spark.offsets`, and :class:`SparkMQBatchReader` plans and reads. The stream reader
(next) reuses :func:`plan_partitions` and :func:`read_range`.

``partitions()`` runs in a planning Python worker on the driver: it finds the topic's readable
queues on the NameServer, resolves each queue's [start, end) and cuts it into
:class:`QueueRange` partitions of at most ``maxMessagesPerPartition`` messages. ``read()`` runs in
executors: it opens its own client, PULL_MESSAGEs the range in batches of ``pullBatchSize`` (the
broker also caps a pull by bytes, so it loops), with the tag expression in the pull header (the
broker filters by tag hash) and the exact tags checked again on the Arrow column, trims the last
batch at the range end and yields ``pyarrow.RecordBatch``es in Spark's Arrow form of
:data:`SPARK_SCHEMA`.

Nothing here holds a socket or a thread between calls: the data source, the reader and the
partitions are plain picklable values; clients are opened (and closed) inside ``partitions()``
and ``read()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_mq.client.pull_consumer import pull_header
from spark_mq.client.results import PullStatus
from spark_mq.client.subscription import parse_tags
from spark_mq.common.errors import ConfigError, SparkMQError
from spark_mq.remoting.bodies import MessageQueue
from spark_mq.spark.offsets import (
    BrokerOffsets,
    DataLossError,
    OffsetSource,
    QueueKey,
    TopicQueues,
    discover_queues,
    queue_key_text,
    resolve_ending,
    resolve_starting,
)
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.tiers import ArchiveRange, TieredOffsets, read_archive_range, split_tiers

if TYPE_CHECKING:
    from spark_mq.client.sync_api import SyncMQClientAPI

log = logging.getLogger(__name__)

NAME = "spark_mq"
REQUEST_TIMEOUT_S = 10.0

# The DESIGN's Arrow message schema as Spark sees it (timestamps become Spark TIMESTAMPs); SCHEMA_DDL is
# SPARK_SCHEMA spelled for people (a test checks they agree)
SCHEMA_DDL = (
    "topic STRING, broker_name STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, "
    "msg_id STRING, uniq_key STRING, keys STRING, tags STRING, properties MAP<STRING, STRING>, body BINARY, "
    "born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, born_host STRING, store_host STRING, "
    "reconsume_times INT, sys_flag INT, flag INT"
)
_S, _I, _L, _TS = StringType(), IntegerType(), LongType(), TimestampType()
SPARK_SCHEMA = StructType([
    StructField("topic", _S), StructField("broker_name", _S), StructField("queue_id", _I),
    StructField("queue_offset", _L), StructField("commitlog_offset", _L), StructField("msg_id", _S),
    StructField("uniq_key", _S), StructField("keys", _S), StructField("tags", _S),
    StructField("properties", MapType(_S, _S)), StructField("body", BinaryType()),
    StructField("born_timestamp", _TS), StructField("store_timestamp", _TS), StructField("born_host", _S),
    StructField("store_host", _S), StructField("reconsume_times", _I), StructField("sys_flag", _I),
    StructField("flag", _I),
])
# what Spark checks a yielded RecordBatch against (timestamps as us, UTC)
SPARK_ARROW_SCHEMA: pa.Schema = to_arrow_schema(SPARK_SCHEMA, timezone="UTC")


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Messages [start, end) of one queue: plain, picklable data only."""

    topic: str
    broker_name: str
    broker_addr: str
    queue_id: int
    start: int
    end: int
    tags: str
    group: str
    pull_batch_size: int
    fail_on_data_loss: bool

    @property
    def name(self) -> str:
        return f"{self.topic}@{queue_key_text((self.broker_name, self.queue_id))}"


def split_range(start: int, end: int, max_messages: int) -> list[tuple[int, int]]:
    """[start, end) cut into consecutive chunks of at most ``max_messages``; [] when empty."""
    return [(lo, min(lo + max_messages, end)) for lo in range(start, end, max_messages)]


def plan_partitions(opts: SourceOptions, queues: TopicQueues, starting: dict[QueueKey, int],
                    ending: dict[QueueKey, int], source: OffsetSource) -> list[QueueRange | ArchiveRange]:
    r"""One or more partitions per queue with messages in [starting, ending): :class:`ArchiveRange`\ s
    below the broker's min when ``source`` has an archive (:mod:`spark_mq.spark.tiers`), then
    :class:`QueueRange`\ s."""
    parts: list[QueueRange | ArchiveRange] = []
    for key in queues.queues:
        if starting[key] >= ending[key]:
            continue
        cold, hot = ((None, (starting[key], ending[key])) if not isinstance(source, TieredOffsets)
                     else split_tiers(starting[key], ending[key], source.hot_min(key)))
        if cold is not None:
            parts.extend(ArchiveRange(source.root, queues.topic, key[0], key[1], lo, hi, opts.tags,
                                      opts.fail_on_data_loss)
                         for lo, hi in split_range(*cold, opts.max_messages_per_partition))
        if hot is not None:
            parts.extend(QueueRange(queues.topic, key[0], queues.addr(key), key[1], lo, hi, opts.tags,
                                    opts.pull_group, opts.pull_batch_size, opts.fail_on_data_loss)
                         for lo, hi in split_range(*hot, opts.max_messages_per_partition))
    return parts


def offset_source(api: SyncMQClientAPI, queues: TopicQueues, opts: SourceOptions) -> OffsetSource:
    """The brokers' offsets, with the archive below them when ``tieredStoreRoot`` is set."""
    hot = BrokerOffsets(api, queues)
    return TieredOffsets(hot, opts.tiered_store_root) if opts.tiered_store_root else hot


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """What ``read()`` yields for one planned partition, from whichever tier holds it."""
    if isinstance(partition, ArchiveRange):
        return read_archive_range(partition)
    if isinstance(partition, QueueRange):
        return read_range(partition)
    return iter(())  # Spark's placeholder when there is nothing to read


def to_spark_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (the decoder's schema) in the exact Arrow schema Spark validates against."""
    if batch.schema.equals(SPARK_ARROW_SCHEMA):
        return batch
    columns = [batch.column(f.name).cast(f.type) for f in SPARK_ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(columns, schema=SPARK_ARROW_SCHEMA)


def read_range(part: QueueRange, *, timeout: float = REQUEST_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """Pull ``part`` from its broker and yield its messages (tag-filtered) as Spark Arrow batches."""
    from spark_mq.client.sync_api import SyncMQClientAPI
    from spark_mq.spark.arrow_decoder import decode_units_to_arrow

    tags = parse_tags(part.tags)
    tag_values = pa.array(sorted(tags), pa.string()) if tags is not None else None
    mq = MessageQueue(part.topic, part.broker_name, part.queue_id)
    offset = part.start
    with SyncMQClientAPI(timeout=timeout) as api:
        while offset < part.end:
            header = pull_header(part.group, mq, offset, min(part.pull_batch_size, part.end - offset), part.tags)
            result = api.pull_message(part.broker_addr, header)
            if result.status is PullStatus.FOUND:
                batch = decode_units_to_arrow(result.body, broker_name=part.broker_name)  # a vectorised walk
                batch = _rows_in_range(batch, part.end, tag_values)
                if batch.num_rows:
                    yield to_spark_arrow(batch)
            elif result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                if part.fail_on_data_loss:
                    raise DataLossError(f"queue {part.name}: offset {offset} is below the broker's min offset "
                                        f"{result.min_offset} (deleted since the query was planned). Set "
                                        f"failOnDataLoss=false to skip ahead")
                log.warning("queue %s: offsets [%d, %d) are gone; skipping ahead (failOnDataLoss=false)",
                            part.name, offset, result.min_offset)
            elif result.status is not PullStatus.NO_MATCHED_MSG:
                raise SparkMQError(f"queue {part.name}: pull at offset {offset} gave {result.status.name} (broker "
                                   f"{part.broker_addr}: min {result.min_offset}, max {result.max_offset}) though "
                                   f"the read was planned up to {part.end}")
            if result.next_begin_offset <= offset:
                raise SparkMQError(f"queue {part.name}: broker {part.broker_addr} gave next offset "
                                   f"{result.next_begin_offset} for a pull at {offset}: no progress")
            offset = result.next_begin_offset


def _rows_in_range(batch: pa.RecordBatch, end: int, tag_values: pa.Array | None) -> pa.RecordBatch:
    """The rows of one pull that belong to the range: queue offsets below ``end`` (ascending within a
    pull, so a zero-copy slice; a tag-filtered pull may run past the end) with exactly the wanted tags
    (the broker filters by tag hash only)."""
    import numpy as np

    batch = batch.slice(0, int(np.searchsorted(batch.column("queue_offset").to_numpy(), end)))
    if tag_values is None:
        return batch
    return batch.filter(pc.fill_null(pc.is_in(batch.column("tags"), value_set=tag_values), False))


class SparkMQBatchReader(DataSourceReader):
    """Batch reader: plans :class:`QueueRange` partitions on the driver, reads them in executors."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[QueueRange | ArchiveRange]:
        from spark_mq.client.sync_api import SyncMQClientAPI

        with SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S) as api:
            queues = discover_queues(api, self.opts.namesrv_addrs, self.opts.topic)
            source = offset_source(api, queues, self.opts)
            starting = resolve_starting(source, queues, self.opts)
            ending = resolve_ending(source, queues, self.opts, starting)
            parts = plan_partitions(self.opts, queues, starting, ending, source)
        log.info("spark_mq: %d partition(s) over %d queue(s) of %s", len(parts), len(queues.queues), self.opts.topic)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class SparkMQDataSource(DataSource):
    """``spark.read.format("spark_mq").option("namesrv", ...).option("topic", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # a clear error at load(), before anything is planned. load() does not say whether a
        # batch or a stream follows, so options valid for either pass here; reader() and
        # streamReader() then apply their own mode's rules
        try:
            SourceOptions.parse(self.options)
        except ConfigError:
            SourceOptions.parse(self.options, streaming=True)
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> SparkMQBatchReader:
        if schema != SPARK_SCHEMA:
            raise ConfigError(f"the spark_mq source has a fixed schema ({SCHEMA_DDL}); do not pass .schema(...)")
        return SparkMQBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_mq.spark.stream import SparkMQStreamReader

        if schema != SPARK_SCHEMA:
            raise ConfigError(f"the spark_mq source has a fixed schema ({SCHEMA_DDL}); do not pass .schema(...)")
        return SparkMQStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_mq.spark.sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_mq.spark.sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=True)
