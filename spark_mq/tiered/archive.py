"""The archive of a topic: one table at ``<root>/<topic>/``, its layout, and the writers that append
a queue's offset range to it exactly once.

Layout (both formats): partitioned Hive-style by ``broker_name`` then ``queue_id``; the data files hold
the other columns of the DESIGN's message schema (partition values live in the paths, as Delta and
Hive keep them), rows sorted by ``queue_offset``, timestamps as UTC instants in µs (what Delta's
``timestamp`` type is, and what Spark's ``TimestampType`` reads back): the full row schema as written
is :data:`~spark_mq.arrow.schema.UTC_SCHEMA`; readers turn it back into
:data:`~spark_mq.arrow.schema.SCHEMA`.

* ``delta`` (default): a Delta table written with delta-rs. Each append of queue ``q`` of broker
  ``b`` commits with the app transaction ``<b>:<topic>:<q>`` whose version is the range's end
  offset, so the table itself says how far each queue is archived, atomically with the data.
* ``parquet``: plain files ``broker_name=<b>/queue_id=<q>/<start:020d>-<end:020d>.parquet`` for the
  messages [start, end), written under a ``.tmp-`` name (which Spark, pyarrow and the readers here
  skip) and renamed when complete; the largest ``end`` among a queue's files is how far it is
  archived.

The table is the truth about what is archived: the broker's watermark (tieredOffset.json) is
recorded after each append and caught up from the table after a crash. Appends never overlap what a
queue already has: a range ending at or below the archived end is skipped (a re-run), one that
starts below it is refused.

Thread-safety: one writer per topic table at a time (one offload job); readers may run concurrently
with it (a Delta reader sees whole commits, a Parquet reader whole renamed files).
"""

from __future__ import annotations

import os
import re
import uuid
from abc import ABC, abstractmethod

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake

from spark_mq.arrow.schema import UTC_SCHEMA, to_utc_schema
from spark_mq.common.errors import ConfigError, SparkMQError
from spark_mq.tiered.formats import DEFAULT_FORMAT, FORMAT_DELTA, FORMAT_PARQUET, FORMATS, Format

BROKER_COLUMN = "broker_name"
QUEUE_COLUMN = "queue_id"
OFFSET_COLUMN = "queue_offset"
PARTITION_COLUMNS = (BROKER_COLUMN, QUEUE_COLUMN)

# what one data file holds: the partition columns are in its directory names
DATA_SCHEMA = pa.schema([f for f in UTC_SCHEMA if f.name not in PARTITION_COLUMNS])

ROW_GROUP_ROWS = 64 * 1024  # rows per Parquet row group: the unit that offset/time statistics prune
COMPRESSION = "snappy"  # delta-rs' default, used for both formats so they compare
DELTA_LOG = "_delta_log"
TEMP_PREFIX = ".tmp-"  # in-progress Parquet files; names starting with '.' are hidden from Spark and pyarrow
PARQUET_SUFFIX = ".parquet"
_RANGE_FILE = re.compile(r"^(\d{20})-(\d{20})\.parquet$")


class ArchiveError(SparkMQError):
    """An append or a table contradicts the archive's invariants (names queue, offsets, table)."""


def table_uri(root: str, topic: str) -> str:
    """``<root>/<topic>``: ``root`` a local path (made absolute) or a URI pyarrow/deltalake can open."""
    if not topic or "/" in topic or topic in (".", ".."):
        raise ConfigError(f"topic {topic!r} cannot name an archive table directory")
    base = root if "://" in root else os.path.abspath(root)
    return f"{base.rstrip('/')}/{topic}"


def transaction_app_id(broker_name: str, topic: str, queue_id: int) -> str:
    """The Delta app transaction id of one queue's appends: ``<broker>:<topic>:<queueId>``."""
    return f"{broker_name}:{topic}:{queue_id}"


def range_file_name(start: int, end: int) -> str:
    """Name of the Parquet file holding the messages [start, end) of its queue."""
    return f"{start:020d}-{end:020d}{PARQUET_SUFFIX}"


def parse_range_file_name(name: str) -> tuple[int, int] | None:
    """(start, end) of a file named by :func:`range_file_name`; None for any other name."""
    m = _RANGE_FILE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def partition_dir(uri: str, broker_name: str, queue_id: int) -> str:
    return f"{uri}/{BROKER_COLUMN}={broker_name}/{QUEUE_COLUMN}={queue_id}"


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of ``uri`` and the path within it."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    return pafs.FileSystem.from_uri(uri)


def check_rows(rows: pa.Table, broker_name: str, queue_id: int, start: int, end: int) -> None:
    """Refuse rows that are not exactly the messages [start, end) of the queue, in offset order
    (queue offsets are dense, so anything else is a lost, repeated or foreign message)."""
    name = f"{broker_name}:{queue_id}"
    offsets = rows.column(OFFSET_COLUMN).to_numpy()
    if rows.num_rows != end - start or not np.array_equal(offsets, np.arange(start, end, dtype=np.int64)):
        first = int(offsets[0]) if offsets.size else None
        last = int(offsets[-1]) if offsets.size else None
        raise ArchiveError(f"queue {name}: rows for [{start}, {end}) are {rows.num_rows} messages with offsets "
                           f"{first}..{last}, not each offset once in order; nothing was written")
    if not (pc.all(pc.equal(rows.column(BROKER_COLUMN), broker_name)).as_py()
            and pc.all(pc.equal(rows.column(QUEUE_COLUMN), queue_id)).as_py()):
        raise ArchiveError(f"queue {name}: rows for [{start}, {end}) belong to another queue; nothing was written")


class Archive(ABC):
    """The archive table of one topic (see the module docstring for the layout)."""

    format: Format

    def __init__(self, root: str, topic: str) -> None:
        self.root = root
        self.topic = topic
        self.uri = table_uri(root, topic)

    @abstractmethod
    def archived_end(self, broker_name: str, queue_id: int) -> int | None:
        """The offset just past the queue's last archived message; None when it has none."""

    @abstractmethod
    def first_offset(self, broker_name: str, queue_id: int) -> int | None:
        """The queue's first archived offset (its queue min when first offloaded); None when it has none."""

    def archived_range(self, broker_name: str, queue_id: int) -> tuple[int | None, int | None]:
        """(first archived offset, archived end) of the queue, (None, None) when it has none: what a
        read across both tiers may take from the archive (holes are possible only where an offload
        skipped messages the broker no longer had, which the planner logs)."""
        end = self.archived_end(broker_name, queue_id)
        return (None, None) if end is None else (self.first_offset(broker_name, queue_id), end)

    @abstractmethod
    def queue_bytes(self, broker_name: str, queue_id: int) -> int:
        """Bytes of the queue's archived data files (what it costs in the archive)."""

    def version(self) -> int | None:
        """The table's version (a Delta table's last commit); None for a format without versions or no table."""
        return None

    @abstractmethod
    def _write(self, broker_name: str, queue_id: int, start: int, end: int, rows: pa.Table) -> None:
        """Append checked, stored rows atomically."""

    @abstractmethod
    def data_files(self, broker_name: str | None = None, queue_id: int | None = None,
                   start: int | None = None, end: int | None = None) -> list[str]:
        """Paths or URIs of the data files that may hold the queue's messages [start, end) (all of
        the topic's when no queue is named), pruned by partition and offset statistics."""

    def discard_incomplete(self, broker_name: str, queue_id: int) -> int:
        """Remove what a crashed append left behind that no reader sees anyway; returns the count."""
        return 0

    def append(self, broker_name: str, queue_id: int, start: int, end: int,
               rows: pa.Table | pa.RecordBatch) -> bool:
        """Append the queue's messages [start, end) once: False (nothing written) when the table
        already has them; ArchiveError when they would overlap what it has, or are not exactly
        those messages."""
        done = self.archived_end(broker_name, queue_id)
        if done is not None and end <= done:
            return False
        if done is not None and start < done:
            raise ArchiveError(f"{self.uri}: queue {broker_name}:{queue_id} is archived up to {done}; an append "
                               f"of [{start}, {end}) would repeat [{start}, {done}). Start at {done}")
        stored = to_utc_schema(rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows]))
        check_rows(stored, broker_name, queue_id, start, end)
        self._write(broker_name, queue_id, start, end, stored)
        return True


class DeltaArchive(Archive):
    """A Delta table written with delta-rs; each append is one commit carrying the queue's app
    transaction (version = end offset)."""

    format: Format = FORMAT_DELTA

    def __init__(self, root: str, topic: str) -> None:
        super().__init__(root, topic)
        self._table: DeltaTable | None = None  # once the table exists

    def _loaded(self) -> DeltaTable | None:
        if self._table is None:
            if not DeltaTable.is_deltatable(self.uri):
                return None
            self._table = DeltaTable(self.uri)
        else:
            self._table.update_incremental()
        return self._table

    def archived_end(self, broker_name: str, queue_id: int) -> int | None:
        table = self._loaded()
        return None if table is None else table.transaction_version(
            transaction_app_id(broker_name, self.topic, queue_id))

    def first_offset(self, broker_name: str, queue_id: int) -> int | None:
        """From the file statistics in the log (delta-rs writes min/max of ``queue_offset`` for every file)."""
        actions = self._queue_actions(broker_name, queue_id)
        return None if actions is None else pc.min(actions.column(f"min.{OFFSET_COLUMN}")).as_py()

    def _queue_actions(self, broker_name: str, queue_id: int) -> pa.Table | None:
        """The log's add actions (live files, with their statistics) of the queue; None without a table."""
        table = self._loaded()
        if table is None:
            return None
        actions = pa.table(table.get_add_actions(flatten=True))
        mine = pc.and_(pc.equal(actions.column(f"partition.{BROKER_COLUMN}"), broker_name),
                       pc.equal(actions.column(f"partition.{QUEUE_COLUMN}"), queue_id))
        return actions.filter(mine)

    def queue_bytes(self, broker_name: str, queue_id: int) -> int:
        actions = self._queue_actions(broker_name, queue_id)
        return 0 if actions is None else int(pc.sum(actions.column("size_bytes")).as_py() or 0)

    def version(self) -> int | None:
        table = self._loaded()
        return None if table is None else table.version()

    def _write(self, broker_name: str, queue_id: int, start: int, end: int, rows: pa.Table) -> None:
        app_id = transaction_app_id(broker_name, self.topic, queue_id)
        write_deltalake(
            self._table if self._table is not None else self.uri, rows, mode="append",
            partition_by=list(PARTITION_COLUMNS), name=self.topic,
            description=f"spark_mq archive of topic {self.topic}",
            writer_properties=WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression=COMPRESSION.upper()),
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, end)],
                                               custom_metadata={"spark_mq.range": f"{app_id}:[{start},{end})"}),
        )

    def data_files(self, broker_name: str | None = None, queue_id: int | None = None,
                   start: int | None = None, end: int | None = None) -> list[str]:
        table = self._loaded()
        if table is None:
            return []
        predicate = pruning_predicate(broker_name, queue_id, start, end)
        return table.file_uris(file_pruning_predicate=predicate or None)


def pruning_predicate(broker_name: str | None, queue_id: int | None, start: int | None,
                       end: int | None) -> list[tuple[str, str, object]]:
    """deltalake tuple filters selecting a queue's files that may hold offsets [start, end)."""
    predicate: list[tuple[str, str, object]] = []
    if broker_name is not None:
        predicate.append((BROKER_COLUMN, "=", broker_name))
    if queue_id is not None:
        predicate.append((QUEUE_COLUMN, "=", queue_id))
    if start is not None:
        predicate.append((OFFSET_COLUMN, ">=", start))
    if end is not None:
        predicate.append((OFFSET_COLUMN, "<", end))
    return predicate


class ParquetArchive(Archive):
    """Plain Parquet files named by offset range, each renamed into place once complete."""

    format: Format = FORMAT_PARQUET

    def __init__(self, root: str, topic: str) -> None:
        super().__init__(root, topic)
        self.fs, self.path = filesystem(self.uri)

    def _ranges(self, broker_name: str, queue_id: int) -> list[tuple[int, int, str]]:
        """(start, end, path) of the queue's complete files, by start offset."""
        base = partition_dir(self.path, broker_name, queue_id)
        infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        out = []
        for info in infos:
            bounds = parse_range_file_name(info.base_name) if info.is_file else None
            if bounds is not None:
                out.append((*bounds, info.path))
        return sorted(out)

    def _queues(self) -> list[tuple[str, int]]:
        """(broker, queue id) of every partition directory of the table."""
        out = []
        for b in self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True)):
            if b.type != pafs.FileType.Directory or not b.base_name.startswith(f"{BROKER_COLUMN}="):
                continue
            for q in self.fs.get_file_info(pafs.FileSelector(b.path)):
                value = q.base_name.removeprefix(f"{QUEUE_COLUMN}=")
                if q.type == pafs.FileType.Directory and value != q.base_name and value.isdigit():
                    out.append((b.base_name.removeprefix(f"{BROKER_COLUMN}="), int(value)))
        return sorted(out)

    def archived_end(self, broker_name: str, queue_id: int) -> int | None:
        ranges = self._ranges(broker_name, queue_id)
        return max(end for _, end, _ in ranges) if ranges else None

    def first_offset(self, broker_name: str, queue_id: int) -> int | None:
        ranges = self._ranges(broker_name, queue_id)
        return ranges[0][0] if ranges else None

    def queue_bytes(self, broker_name: str, queue_id: int) -> int:
        paths = [path for _, _, path in self._ranges(broker_name, queue_id)]
        return sum(info.size or 0 for info in self.fs.get_file_info(paths)) if paths else 0

    def discard_incomplete(self, broker_name: str, queue_id: int) -> int:
        base = partition_dir(self.path, broker_name, queue_id)
        temps = [i.path for i in self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
                 if i.is_file and i.base_name.startswith(TEMP_PREFIX)]
        for path in temps:
            self.fs.delete_file(path)
        return len(temps)

    def _write(self, broker_name: str, queue_id: int, start: int, end: int, rows: pa.Table) -> None:
        base = partition_dir(self.path, broker_name, queue_id)
        self.fs.create_dir(base, recursive=True)
        final = f"{base}/{range_file_name(start, end)}"
        temp = f"{base}/{TEMP_PREFIX}{uuid.uuid4().hex}-{range_file_name(start, end)}"
        pq.write_table(rows.drop_columns(list(PARTITION_COLUMNS)), temp, filesystem=self.fs,
                       row_group_size=ROW_GROUP_ROWS, compression=COMPRESSION)
        self.fs.move(temp, final)

    def data_files(self, broker_name: str | None = None, queue_id: int | None = None,
                   start: int | None = None, end: int | None = None) -> list[str]:
        queues = [(b, q) for b, q in self._queues()
                  if (broker_name is None or b == broker_name) and (queue_id is None or q == queue_id)]
        lo = start if start is not None else 0
        return [path for b, q in queues for s, e, path in self._ranges(b, q)
                if e > lo and (end is None or s < end)]


def detect_format(root: str, topic: str) -> Format | None:
    """The format of the topic's existing table; None when there is none yet."""
    fs, path = filesystem(table_uri(root, topic))
    if fs.get_file_info(f"{path}/{DELTA_LOG}").type == pafs.FileType.Directory:
        return FORMAT_DELTA
    if fs.get_file_info(path).type == pafs.FileType.Directory and any(
            i.base_name.startswith(f"{BROKER_COLUMN}=") for i in fs.get_file_info(pafs.FileSelector(path))):
        return FORMAT_PARQUET
    return None


_ARCHIVES: dict[str, type[Archive]] = {FORMAT_DELTA: DeltaArchive, FORMAT_PARQUET: ParquetArchive}


def open_archive(root: str, topic: str, fmt: str | None = None) -> Archive:
    """The topic's archive table: its existing format, else ``fmt`` (default delta); ConfigError when
    ``fmt`` contradicts the table on disk or is unknown."""
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"archive format {fmt!r} is unknown: use one of {', '.join(FORMATS)}")
    found = detect_format(root, topic)
    if found is not None and fmt is not None and found != fmt:
        raise ConfigError(f"the archive of topic {topic!r} at {table_uri(root, topic)} is a {found} table, not "
                          f"{fmt}: pass --format {found} (or another --root)")
    return _ARCHIVES[found or fmt or DEFAULT_FORMAT](root, topic)

