"""The ``spark_mq`` batch reader (``spark.read.format("spark_mq")``), as Spark's ``KafkaBatch``.

``partitions()`` runs in a planning Python worker on the driver: it finds each topic's readable queues
on the NameServer, resolves each queue's [start, end) and plans partitions
(:mod:`spark_mq.spark.partitions`). ``read()`` runs in executors and reads one partition from its
tier. Nothing here holds a socket or a thread between calls: the reader and the partitions are plain
picklable values; clients are opened (and closed) inside ``partitions()`` and ``read()``.

:class:`SparkMQFilteringReader` adds filter pushdown (:mod:`spark_mq.spark.pushdown`): the filters
the brokers answer prune queues, narrow ranges by store time, filter tags at the broker, filter
properties at the broker (SQL92, with option ``sqlFilter``), or read through the key index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from spark_mq.arrow.queues import discover_topics
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S, QueueRange
from spark_mq.arrow.schema import COLUMNS, in_columns
from spark_mq.client.config import open_api
from spark_mq.filter.compose import all_of
from spark_mq.spark.offset_reader import offset_source, resolve_ending, resolve_starting
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import Range, plan_ranges, read_partition, to_partitions
from spark_mq.spark.property_column import decoded_columns, with_property_column
from spark_mq.spark.pushdown import IndexedRead, Pushed, by_broker, push_filters, read_indexed
from spark_mq.spark.sql_filter import check_brokers
from spark_mq.spark.worker_gc import freeze_after_first_read

log = logging.getLogger(__name__)


class SparkMQBatchReader(DataSourceReader):
    """Batch reader: plans queue-range partitions on the driver, reads them in executors."""

    def __init__(self, opts: SourceOptions, columns: tuple[str, ...] = COLUMNS) -> None:
        self.opts = opts
        self.columns = columns  # of the source's schema, the ones read (spark_mq.spark.schema.source_columns)
        self.pushed = Pushed()  # set by SparkMQFilteringReader.pushFilters

    def partitions(self) -> list[InputPartition]:
        tags = self.pushed.tag_expression(self.opts.tags)
        if tags is None:
            log.info("spark_mq: the tag filters and option tags of %s match no tag: nothing to read", self.opts.subject)
            return []
        ranges: list[Range] = []
        queue_count = read_count = 0
        opts = replace(self.opts, tags=tags, sql_filter=self.sql_filter)
        with open_api(opts.client_config, REQUEST_TIMEOUT_S) as api:
            for queues in discover_topics(api, self.opts.namesrv_addrs, self.opts.topics, self.opts.topic_pattern):
                check_brokers(api, queues, opts)  # before any task: a broker that cannot filter fails the query here
                source = offset_source(api, queues, self.opts)
                starting = resolve_starting(source, queues, self.opts)
                ending = resolve_ending(source, queues, self.opts, starting)
                read = self.pushed.prune(queues)
                starting, ending = self.pushed.narrow(source, read, starting, ending)
                ranges += plan_ranges(opts, read, starting, ending, source)
                queue_count, read_count = queue_count + len(queues.queues), read_count + len(read.queues)
        indexed: list[IndexedRead] = []
        if self.pushed.key is not None:
            indexed = by_broker(self.pushed.key, [r for r in ranges if isinstance(r, QueueRange)], self.pushed,
                                self.sql_filter)
            ranges = [r for r in ranges if not isinstance(r, QueueRange)]
        parts = to_partitions(self.opts, ranges) + [InputPartition(r) for r in indexed]
        log.info("spark_mq: %d partition(s) over %d of %d queue(s) of %s (pushed: %s)", len(parts), read_count,
                 queue_count, self.opts.subject, self.pushed)
        return parts

    @property
    def sql_filter(self) -> str | None:
        """The SQL92 filter of the read: option ``sqlFilter`` AND the pushed property filters."""
        return all_of([self.opts.sql_filter, self.pushed.sql])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition.value, IndexedRead):
            rows = in_columns(read_indexed(partition.value), decoded_columns(self.columns))
            batches = with_property_column(rows, self.columns, self.opts.property_columns)
        else:
            batches = read_partition(partition, self.columns, self.sql_filter, self.opts.property_columns)
        return freeze_after_first_read(batches)  # PySpark's full GC after every task (spark_mq.spark.worker_gc)


class SparkMQFilteringReader(SparkMQBatchReader):
    """The batch reader with filter pushdown, handed out only when Spark pushes filters
    (``spark.sql.python.filterPushdown.enabled=true``; see :mod:`spark_mq.spark.pushdown` for why)."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        self.pushed, kept = push_filters(filters, self.opts.property_columns)
        return kept
