"""Partition planning of the ``spark_mq`` source (as Spark's ``KafkaOffsetRangeCalculator``), and what an
executor reads for each planned partition.

The driver resolves each queue's [start, end) (:mod:`spark_mq.spark.offsets`) and cuts it into ranges of
at most ``maxMessagesPerPartition`` messages: :class:`~spark_mq.tiered.tiers.ArchiveRange`\\ s below the
broker's min when ``tieredStoreRoot`` is set, then :class:`~spark_mq.arrow.range_reader.QueueRange`\\ s.
Each range, a plain picklable value, travels to the executors as the value of an ``InputPartition``;
there :func:`read_partition` yields its messages as Arrow batches in Spark's Arrow form of the schema.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_mq.arrow.queues import QueueKey, TopicQueues
from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.arrow.schema import COLUMNS, in_columns
from spark_mq.spark.offsets import OffsetSource
from spark_mq.spark.options import SourceOptions
from spark_mq.tiered.tiers import ArchiveRange, TieredOffsets, read_archive_range, split_tiers


def split_range(start: int, end: int, max_messages: int) -> list[tuple[int, int]]:
    """[start, end) cut into consecutive chunks of at most ``max_messages``; [] when empty."""
    return [(lo, min(lo + max_messages, end)) for lo in range(start, end, max_messages)]


def plan_partitions(opts: SourceOptions, queues: TopicQueues, starting: dict[QueueKey, int],
                    ending: dict[QueueKey, int], source: OffsetSource) -> list[InputPartition]:
    r"""One or more partitions per queue with messages in [starting, ending), each holding one range:
    :class:`ArchiveRange`\ s below the broker's min when ``source`` has an archive
    (:mod:`spark_mq.tiered.tiers`), then :class:`QueueRange`\ s."""
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
    return [InputPartition(part) for part in parts]


def read_partition(partition: InputPartition, columns: Sequence[str] = COLUMNS) -> Iterator[pa.RecordBatch]:
    """What ``read()`` yields for one planned partition, from whichever tier holds it: ``columns`` of
    the message schema (a pruned read decodes only those from the broker)."""
    part = partition.value
    if isinstance(part, ArchiveRange):
        return in_columns(read_archive_range(part), columns)
    if isinstance(part, QueueRange):
        return read_range(part, columns=columns)
    return iter(())  # Spark's placeholder (InputPartition(None)) when there is nothing to read
