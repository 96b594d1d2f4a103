"""Reads of the archive as Arrow: a queue's offset range (for executors, which cannot rely on a JVM
Delta reader, and for the offload's checks). :mod:`spark_mq.spark.archive_reader` reads a topic's
whole archive as a Spark DataFrame.

Both read only the data files the archive lists (:meth:`Archive.data_files`: a Delta table's current
files, pruned by partition and ``queue_offset`` statistics; a Parquet archive's complete range files),
never a directory listing, so files of an append that crashed before its commit or rename are never
seen. Rows come back in the DESIGN's message schema, :data:`~spark_mq.arrow.schema.SCHEMA`.

Thread-safety: pure functions; each call opens what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from spark_mq.arrow.schema import SCHEMA, to_message_schema
from spark_mq.tiered.archive import (
    BROKER_COLUMN,
    DATA_SCHEMA,
    OFFSET_COLUMN,
    QUEUE_COLUMN,
    Archive,
    filesystem,
    open_archive,
)


def read_queue_range(root: str, topic: str, broker_name: str, queue_id: int, start: int, end: int, *,
                     fmt: str | None = None) -> pa.Table:
    """The archived messages [start, end) of one queue in :data:`SCHEMA`, sorted by queue offset
    (offsets the archive does not have are simply absent)."""
    return read_archived_range(open_archive(root, topic, fmt), broker_name, queue_id, start, end)


def read_archived_range(archive: Archive, broker_name: str, queue_id: int, start: int, end: int) -> pa.Table:
    """:func:`read_queue_range` on an open :class:`Archive` (saves re-opening it per range)."""
    files = archive.data_files(broker_name, queue_id, start, end) if end > start else []
    if not files:
        return SCHEMA.empty_table()
    fs, paths = dataset_paths(files)
    offset = ds.field(OFFSET_COLUMN)
    data = ds.dataset(paths, schema=DATA_SCHEMA, format="parquet", filesystem=fs).to_table(
        filter=(offset >= start) & (offset < end))
    n = data.num_rows
    data = (data.append_column(BROKER_COLUMN, pa.repeat(pa.scalar(broker_name, pa.string()), n))
            .append_column(QUEUE_COLUMN, pa.repeat(pa.scalar(queue_id, pa.int32()), n)))
    return to_message_schema(data).sort_by(OFFSET_COLUMN)


def dataset_paths(files: Sequence[str]) -> tuple[pafs.FileSystem, list[str]]:
    """One filesystem and the paths within it of the archive's files (local paths or URIs)."""
    fs, first = filesystem(files[0])
    if "://" not in files[0]:
        return fs, list(files)
    prefix = files[0][: len(files[0]) - len(first)]
    return fs, [f.removeprefix(prefix) for f in files]
