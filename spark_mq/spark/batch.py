"""The ``spark_mq`` batch reader (``spark.read.format("spark_mq")``), as Spark's ``KafkaBatch``.

``partitions()`` runs in a planning Python worker on the driver: it finds each topic's readable queues
on the NameServer, resolves each queue's [start, end) and plans partitions
(:mod:`spark_mq.spark.partitions`). ``read()`` runs in executors and reads one partition from its
tier. Nothing here holds a socket or a thread between calls: the reader and the partitions are plain
picklable values; clients are opened (and closed) inside ``partitions()`` and ``read()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from spark_mq.arrow.queues import discover_topics
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.spark.offsets import offset_source, resolve_ending, resolve_starting
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import Range, plan_ranges, read_partition, to_partitions

log = logging.getLogger(__name__)


class SparkMQBatchReader(DataSourceReader):
    """Batch reader: plans queue-range partitions on the driver, reads them in executors."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        ranges: list[Range] = []
        with SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S) as api:
            topics = discover_topics(api, self.opts.namesrv_addrs, self.opts.topics, self.opts.topic_pattern)
            for queues in topics:
                source = offset_source(api, queues, self.opts)
                starting = resolve_starting(source, queues, self.opts)
                ending = resolve_ending(source, queues, self.opts, starting)
                ranges += plan_ranges(self.opts, queues, starting, ending, source)
        parts = to_partitions(self.opts, ranges)
        log.info("spark_mq: %d partition(s) over %d queue(s) of %s", len(parts),
                 sum(len(q.queues) for q in topics), self.opts.subject)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
