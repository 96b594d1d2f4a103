"""Partition planning of the ``spark_mq`` source (as Spark's ``KafkaOffsetRangeCalculator``), and what an
executor reads for each planned partition.

The driver resolves each queue's [start, end) (:mod:`spark_mq.spark.offset_reader`) and cuts it into ranges of
at most ``maxMessagesPerPartition`` messages: :class:`~spark_mq.tiered.tiers.ArchiveRange`\\ s below the
broker's min when ``tieredStoreRoot`` is set, then :class:`~spark_mq.arrow.range_reader.QueueRange`\\ s
(:func:`plan_ranges`, per topic). When the ranges of all topics are fewer than ``minPartitions``,
:func:`to_partitions` cuts them further, each into a share of ``minPartitions`` proportional to its
size (as Kafka's ``KafkaOffsetRangeCalculator``; here always at least ``minPartitions`` when there are
that many messages).
Each range, a plain picklable value, travels to the executors as the value of an ``InputPartition``;
there :func:`read_partition` yields its messages as Arrow batches in Spark's Arrow form of the schema.

Thread-safety: pure functions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_mq.arrow.queues import QueueKey, TopicQueues
from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.arrow.schema import COLUMNS, in_columns
from spark_mq.spark.offset_reader import OffsetSource
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.property_column import decoded_columns, with_property_column
from spark_mq.spark.sql_filter import matching_rows
from spark_mq.tiered.tiers import ArchiveRange, TieredOffsets, read_archive_range, split_tiers


def split_range(start: int, end: int, max_messages: int) -> list[tuple[int, int]]:
    """[start, end) cut into consecutive chunks of at most ``max_messages``; [] when empty."""
    return [(lo, min(lo + max_messages, end)) for lo in range(start, end, max_messages)]


Range = QueueRange | ArchiveRange


def plan_ranges(opts: SourceOptions, queues: TopicQueues, starting: dict[QueueKey, int],
                ending: dict[QueueKey, int], source: OffsetSource) -> list[Range]:
    r"""One or more ranges per queue of ``queues.topic`` with messages in [starting, ending):
    :class:`ArchiveRange`\ s below the broker's min when ``source`` has an archive
    (:mod:`spark_mq.tiered.tiers`), then :class:`QueueRange`\ s."""
    parts: list[Range] = []
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
                                    opts.pull_group, opts.pull_batch_size, opts.fail_on_data_loss,
                                    queues.members_of(key), opts.pull_sql, tuple(opts.namesrv_addrs),
                                    opts.client_config)
                         for lo, hi in split_range(*hot, opts.max_messages_per_partition))
    return parts


def spread(ranges: Sequence[Range], min_partitions: int) -> list[Range]:
    """``ranges`` cut into at least ``min_partitions`` (as far as there are messages): each range gets
    pieces in proportion to its size — one at a time to the range whose pieces are largest — and is cut
    into that many near-equal consecutive pieces. Unchanged when there are already enough."""
    if len(ranges) >= min_partitions:
        return list(ranges)
    pieces = [1] * len(ranges)
    largest = [(-(r.end - r.start), i) for i, r in enumerate(ranges) if r.end - r.start > 1]
    heapq.heapify(largest)
    for _ in range(min_partitions - len(ranges)):
        if not largest:
            break  # every piece is one message
        _, i = heapq.heappop(largest)
        pieces[i] += 1
        size = ranges[i].end - ranges[i].start
        if pieces[i] < size:
            heapq.heappush(largest, (-(size / pieces[i]), i))
    out: list[Range] = []
    for r, n in zip(ranges, pieces, strict=True):
        size, lo = r.end - r.start, r.start
        for k in range(n):
            hi = r.start + size * (k + 1) // n
            out.append(replace(r, start=lo, end=hi))
            lo = hi
    return out


def to_partitions(opts: SourceOptions, ranges: Sequence[Range]) -> list[InputPartition]:
    """The planned ranges of every topic as Spark's partitions, spread to ``minPartitions`` if set."""
    if opts.min_partitions is not None:
        ranges = spread(ranges, opts.min_partitions)
    return [InputPartition(part) for part in ranges]


def read_partition(partition: InputPartition, columns: Sequence[str] = COLUMNS, sql_filter: str | None = None,
                   property_columns: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
    """What ``read()`` yields for one planned partition, from whichever tier holds it: ``columns`` of
    the source's schema (a pruned read decodes only those from the broker; ``property`` holds
    ``property_columns``), the rows ``sql_filter`` matches (the brokers filter pulled ranges by it;
    archived rows are judged here)."""
    part = partition.value
    decoded = decoded_columns(columns)
    if isinstance(part, ArchiveRange):
        rows = in_columns(matching_rows(read_archive_range(part), sql_filter), decoded)
    elif isinstance(part, QueueRange):
        rows = read_range(part, columns=decoded)
    else:
        return iter(())  # Spark's placeholder (InputPartition(None)) when there is nothing to read
    return with_property_column(rows, columns, property_columns)
