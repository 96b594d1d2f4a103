"""Reading a queue across both tiers: offsets below the broker's min come from the archive.

With the ``tieredStoreRoot`` option, the ``spark_mq`` source (and so a replay) treats the archive and
the broker as one queue: the archive holds [archived start, archived end), the broker [hot min, max).
While the two meet or overlap (offload runs before retention deletes anything, and with tiering on
the broker never deletes what is not archived), the queue's earliest offset is the archive's
start, and a range that starts below the hot min is read in two parts — an :class:`ArchiveRange`
(Arrow straight from the table's Parquet files, pruned by partition and offset statistics) up to
the hot min, then the broker's :class:`~spark_mq.arrow.range_reader.QueueRange` — with no gap and no
duplicate at the seam. When they do not meet (the archive stops short of the hot min, or there is
none), only the hot tier counts and ``failOnDataLoss`` applies as without an archive.

Thread-safety: pure values and functions; :class:`TieredOffsets` blocks on the client it wraps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from spark_mq.arrow.queues import BrokerOffsets, DataLossError, QueueKey, queue_key_text
from spark_mq.arrow.schema import to_utc_schema
from spark_mq.client.subscription import parse_tags

if TYPE_CHECKING:
    from spark_mq.tiered.archive import Archive

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchiveRange:
    """Messages [start, end) of one queue, read from the archive: plain, picklable data only."""

    root: str
    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    tags: str
    fail_on_data_loss: bool

    @property
    def name(self) -> str:
        return f"{self.topic}@{queue_key_text((self.broker_name, self.queue_id))}"


class TieredOffsets:
    """The brokers' offsets with the archive below them (an ``OffsetSource``; see the module doc).

    ``min_offset`` is the earliest offset either tier has contiguously up to the broker's;
    ``hot_min`` is the broker's own, where reads switch tiers."""

    def __init__(self, hot: BrokerOffsets, root: str) -> None:
        self.hot = hot
        self.root = root
        self.api = hot.api
        self.queues = hot.queues
        self._hot_min: dict[QueueKey, int] = {}

    @cached_property
    def archive(self) -> Archive:
        # not in every Spark query's runner and Python worker that imports this module for its types:
        # lazy import: deltalake, pyarrow.fs and pyarrow.parquet (~0.05 CPU-s) only for a query with an archive
        from spark_mq.tiered.archive import open_archive

        return open_archive(self.root, self.queues.topic)

    def hot_min(self, key: QueueKey) -> int:
        if key not in self._hot_min:
            self._hot_min[key] = self.hot.min_offset(key)
        return self._hot_min[key]

    def min_offset(self, key: QueueKey) -> int:
        hot = self.hot_min(key)
        start, end = self.archive.archived_range(key[0], key[1])
        return start if start is not None and end is not None and start < hot <= end else hot

    def max_offset(self, key: QueueKey) -> int:
        return self.hot.max_offset(key)

    def committed_offset(self, group: str, key: QueueKey) -> int | None:
        return self.hot.committed_offset(group, key)

    def offset_by_timestamp(self, key: QueueKey, timestamp_ms: int) -> int:
        """The broker answers for what it has; a time before its first message may lie in the archive
        (the first archived message stored at or after the time)."""
        offset = self.hot.offset_by_timestamp(key, timestamp_ms)
        hot = self.hot_min(key)
        if offset > hot:
            return offset
        # pyarrow.dataset (and pandas under it) costs ~0.2 CPU-s in every Spark Python worker importing the source
        # lazy import: pyarrow.dataset only when the archive is searched
        from spark_mq.tiered.lookup import first_offset_at_or_after

        archived = first_offset_at_or_after(self.archive, key[0], key[1], timestamp_ms)
        return archived if archived is not None and archived < hot else offset


def split_tiers(start: int, end: int, hot_min: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """[start, end) as (the archive's part below ``hot_min``, the broker's part), either None when empty."""
    cold = (start, min(end, hot_min)) if start < min(end, hot_min) else None
    hot = (max(start, hot_min), end) if max(start, hot_min) < end else None
    return cold, hot


def read_archive_range(part: ArchiveRange) -> Iterator[pa.RecordBatch]:
    """The archived messages of ``part`` (tag-filtered) in ``UTC_SCHEMA`` batches, as
    :func:`~spark_mq.arrow.range_reader.read_range` yields the broker's; a hole in the archive is data
    loss (``failOnDataLoss``) or a warning."""
    # lazy import: pyarrow.dataset only in the tasks that read the archive (see offset_by_timestamp)
    from spark_mq.tiered.reader import read_queue_range

    table = read_queue_range(part.root, part.topic, part.broker_name, part.queue_id, part.start, part.end)
    offsets = table.column("queue_offset").to_numpy()
    if len(offsets) != part.end - part.start or not np.array_equal(offsets, np.arange(part.start, part.end)):
        missing = part.end - part.start - len(np.unique(offsets))
        message = (f"queue {part.name}: the archive at {part.root} lacks {missing} of the messages "
                   f"[{part.start}, {part.end}) that the broker no longer has")
        if part.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to read what is there")
        log.warning("%s; reading what is there (failOnDataLoss=false)", message)
    tags = parse_tags(part.tags)
    if tags is not None:
        import pyarrow.compute as pc  # lazy import: the driver's per-query runner never needs it
        table = table.filter(pc.fill_null(pc.is_in(table.column("tags"), value_set=pa.array(sorted(tags))), False))
    for batch in table.to_batches():
        if batch.num_rows:
            yield to_utc_schema(batch)
