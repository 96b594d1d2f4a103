"""The ``spark_mq`` batch reader (``spark.read.format("spark_mq")``), as Spark's ``KafkaBatch``.

``partitions()`` runs in a planning Python worker on the driver: it finds the topic's readable queues
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

from spark_mq.arrow.queues import discover_queues
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.arrow.schema import COLUMNS
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.spark.offsets import offset_source, resolve_ending, resolve_starting
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import plan_partitions, read_partition

log = logging.getLogger(__name__)


class SparkMQBatchReader(DataSourceReader):
    """Batch reader: plans queue-range partitions on the driver, reads them in executors."""

    def __init__(self, opts: SourceOptions, columns: tuple[str, ...] = COLUMNS) -> None:
        self.opts = opts
        self.columns = columns  # of the source's schema, the ones read (spark_mq.spark.schema.source_columns)

    def partitions(self) -> list[InputPartition]:
        with SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S) as api:
            queues = discover_queues(api, self.opts.namesrv_addrs, self.opts.topic)
            source = offset_source(api, queues, self.opts)
            starting = resolve_starting(source, queues, self.opts)
            ending = resolve_ending(source, queues, self.opts, starting)
            parts = plan_partitions(self.opts, queues, starting, ending, source)
        log.info("spark_mq: %d partition(s) over %d queue(s) of %s", len(parts), len(queues.queues), self.opts.topic)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.columns)
