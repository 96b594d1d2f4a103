"""Messages by key and store time across both tiers, in Arrow and without Spark: the archive scanned
with pyarrow after pruning by statistics, the broker asked through its index (QUERY_MESSAGE), the two
merged into one table with a ``tier`` column. :mod:`spark_mq.spark.query` wraps these in DataFrames and
``spark-mq query --archive`` prints them.

Time windows are [begin, end) on ``store_timestamp``, in ms since the epoch or as datetimes (naive ones
are local time, as ``datetime.timestamp`` reads them); either end may be open.

The archive side works on one :class:`ArchiveSnapshot` (one Delta version, or one listing of the
Parquet range files): its files are pruned by partition (broker, queue) and by per-file statistics on
``store_timestamp`` (the Delta log's min/max, or the Parquet footers), then pyarrow skips the row
groups whose statistics rule the window out. A key lookup reads in two passes: the key and time
columns of the surviving row groups first, then whole rows only of the row groups that hold a match
(bodies are most of the bytes, and a key matches few messages). A key matches a message whose UNIQ_KEY
is the key or whose KEYS (space-separated) contain it, as the broker's index matches.

Why not Spark for the cold side of a key lookup: the answer is a handful of rows, and a Spark job
costs a few hundred ms of scheduling before it reads a byte, while pyarrow in the driver reads the few
row groups the statistics leave in milliseconds (``benchmarks/tiered_lookup.py``).

A message in both tiers (archived, not yet deleted from the broker by retention) is reported once, as
``cold``: ``tier`` says whether a message is archived, which only ever changes from hot to cold, so the
answer does not depend on when retention last ran. Both copies are the same message byte for byte.

Thread-safety: pure functions; an :class:`ArchiveSnapshot` is immutable once built.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from spark_mq.arrow.indexed import DEFAULT_MAX_HOT, is_indexable_key, messages_to_arrow, query_window
from spark_mq.arrow.queues import QueueKey, TopicQueues, discover_queues
from spark_mq.arrow.schema import SCHEMA, UTC_SCHEMA, UTC_TIMESTAMP, to_message_schema
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import pack_host
from spark_mq.common.properties import KEY_SEPARATOR
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.common.unit.layout import CRC_MASK
from spark_mq.tiered.archive import (
    BROKER_COLUMN,
    FORMAT_DELTA,
    OFFSET_COLUMN,
    QUEUE_COLUMN,
    Archive,
    filesystem,
    open_archive,
    parse_range_file_name,
    pruning_predicate,
    transaction_app_id,
)
from spark_mq.tiered.reader import dataset_paths

log = logging.getLogger(__name__)

TIER_COLUMN = "tier"
HOT = "hot"  # read from the broker: not archived (yet)
COLD = "cold"  # read from the archive
RESULT_SCHEMA = SCHEMA.append(pa.field(TIER_COLUMN, pa.string()))
TIME_COLUMN = "store_timestamp"
UNIQ_KEY_COLUMN = "uniq_key"
KEYS_COLUMN = "keys"
IDENTITY = (BROKER_COLUMN, QUEUE_COLUMN, OFFSET_COLUMN)  # one message of a topic
ORDER = [(TIME_COLUMN, "ascending"), *((c, "ascending") for c in IDENTITY)]
PARTITIONING = ds.partitioning(pa.schema([UTC_SCHEMA.field(BROKER_COLUMN), UTC_SCHEMA.field(QUEUE_COLUMN)]),
                               flavor="hive")
_KEY_PASS_COLUMNS = [BROKER_COLUMN, QUEUE_COLUMN, OFFSET_COLUMN, TIME_COLUMN, UNIQ_KEY_COLUMN, KEYS_COLUMN]

TimeBound = int | datetime | None


# -- time windows ---------------------------------------------------------------------------------


def to_ms(value: TimeBound, what: str) -> int | None:
    """``value`` as ms since the epoch: an int is taken as ms, a datetime converted (naive: local time)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return datetime_ms(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise ConfigError(f"{what} {value!r} is a {type(value).__name__}: give ms since the epoch (int) or a datetime")


@dataclass(frozen=True)
class TimeWindow:
    """Store times [begin_ms, end_ms); None leaves that side open."""

    begin_ms: int | None = None
    end_ms: int | None = None

    def __post_init__(self) -> None:
        if self.begin_ms is not None and self.end_ms is not None and self.begin_ms > self.end_ms:
            raise ConfigError(f"the time window begins ({self.begin_ms} ms) after it ends ({self.end_ms} ms): "
                              f"swap begin and end")

    @classmethod
    def of(cls, begin: TimeBound, end: TimeBound) -> TimeWindow:
        return cls(to_ms(begin, "begin"), to_ms(end, "end"))

    @property
    def bounded(self) -> bool:
        return self.begin_ms is not None or self.end_ms is not None

    @property
    def empty(self) -> bool:
        return self.begin_ms is not None and self.begin_ms == self.end_ms

    def overlaps(self, lo_ms: int, hi_ms: int) -> bool:
        """Whether [lo_ms, hi_ms] (inclusive, as statistics are) meets the window."""
        return (self.begin_ms is None or hi_ms >= self.begin_ms) and (self.end_ms is None or lo_ms < self.end_ms)

    def expression(self) -> ds.Expression | None:
        """The window as a filter on the archive's stored timestamps (None: no bound)."""
        field = ds.field(TIME_COLUMN)
        bounds = [field >= _stored_time(self.begin_ms) if self.begin_ms is not None else None,
                  field < _stored_time(self.end_ms) if self.end_ms is not None else None]
        return _conjunction([b for b in bounds if b is not None])


def datetime_ms(value: datetime) -> int:
    """ms since the epoch of ``value`` (naive: local time), exactly: ``timestamp() * 1000`` may round
    .123 s down to 122 ms."""
    return int(value.replace(microsecond=0).timestamp()) * 1000 + value.microsecond // 1000


def _stored_time(ms: int) -> pa.Scalar:
    return pa.scalar(ms * 1000, UTC_TIMESTAMP)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _conjunction(parts: Sequence[ds.Expression]) -> ds.Expression | None:
    out = None
    for p in parts:
        out = p if out is None else out & p
    return out


# -- keys -----------------------------------------------------------------------------------------


def check_key(key: str) -> str:
    """``key`` if the broker could have indexed it: a non-empty string without the KEYS separator."""
    if is_indexable_key(key):
        return key
    if not isinstance(key, str) or not key:
        raise ConfigError(f"key {key!r} must be a non-empty string")
    raise ConfigError(f"key {key!r} contains {KEY_SEPARATOR!r}, which separates the keys of a message: look up "
                      f"one key at a time")


def key_candidates(key: str) -> ds.Expression:
    """A filter true for every row carrying ``key`` and for a few more (a substring of some key):
    cheap enough to evaluate in the scan; :func:`key_mask` then keeps the exact matches."""
    return (ds.field(UNIQ_KEY_COLUMN) == key) | pc.match_substring(ds.field(KEYS_COLUMN), key)


def key_mask(table: pa.Table, key: str) -> np.ndarray:
    """Rows of ``table`` whose UNIQ_KEY is ``key`` or whose KEYS list it, as the broker's index matches."""
    mask = pc.fill_null(pc.equal(table.column(UNIQ_KEY_COLUMN), key), False).to_numpy(zero_copy_only=False)
    tokens = pc.split_pattern(table.column(KEYS_COLUMN), KEY_SEPARATOR)
    hits = pc.equal(pc.list_flatten(tokens), key).to_numpy(zero_copy_only=False)
    mask[pc.list_parent_indices(tokens).to_numpy()[hits]] = True
    return mask


# -- the archive ----------------------------------------------------------------------------------


class ArchiveSnapshot:
    """One consistent view of a topic's archive: its data files (as one Delta version lists them, or one
    listing of the Parquet range files) and how far each queue is archived in that view.

    A reader that starts the broker's part of a queue at :attr:`ends` never reads a message twice nor
    skips one, however far an offload moves on meanwhile: the files listed here hold exactly the
    messages below those ends."""

    def __init__(self, archive: Archive) -> None:
        self.archive = archive
        self.fs, self.base = filesystem(archive.uri)
        self.ends: dict[QueueKey, int] = {}  # (broker, queue id) -> offset past its last archived message
        self._delta = None  # deltalake.DeltaTable pinned at the version read here (a Delta archive)
        self._ranges: dict[str, QueueKey] = {}  # range file -> its queue (a Parquet archive)
        if archive.format == FORMAT_DELTA:
            self._read_delta_log()
        else:
            self._list_range_files()

    def _read_delta_log(self) -> None:
        if not DeltaTable.is_deltatable(self.archive.uri):
            return
        self._delta = DeltaTable(self.archive.uri)
        actions = pa.table(self._delta.get_add_actions(flatten=True))
        queues = set(zip(actions.column(f"partition.{BROKER_COLUMN}").to_pylist(),
                         actions.column(f"partition.{QUEUE_COLUMN}").to_pylist(), strict=True))
        for broker_name, queue_id in queues:  # each append commits its queue's end as the app transaction
            end = self._delta.transaction_version(transaction_app_id(broker_name, self.archive.topic, queue_id))
            if end is not None:
                self.ends[(broker_name, queue_id)] = end

    def _list_range_files(self) -> None:
        for path in self.archive.data_files():  # .../broker_name=<b>/queue_id=<q>/<start>-<end>.parquet
            queue_dir, name = os.path.split(path)
            broker_dir, queue_dir_name = os.path.split(queue_dir)
            key = (os.path.basename(broker_dir).removeprefix(f"{BROKER_COLUMN}="),
                   int(queue_dir_name.removeprefix(f"{QUEUE_COLUMN}=")))
            _, end = parse_range_file_name(name) or (0, 0)
            self._ranges[path] = key
            self.ends[key] = max(self.ends.get(key, 0), end)

    @property
    def exists(self) -> bool:
        """Whether the topic has been offloaded at all."""
        return self._delta is not None or bool(self._ranges)

    def files(self, window: TimeWindow = TimeWindow(), broker_name: str | None = None,
              queue_id: int | None = None) -> list[str]:
        """The data files that may hold messages of the queue (all queues when None) stored within
        ``window``: chosen by partition, then by the files' min/max ``store_timestamp``."""
        if self._delta is not None:
            predicate = pruning_predicate(broker_name, queue_id, None, None)
            if window.begin_ms is not None:
                predicate.append((TIME_COLUMN, ">=", _utc(window.begin_ms)))
            if window.end_ms is not None:
                predicate.append((TIME_COLUMN, "<", _utc(window.end_ms)))
            return self._delta.file_uris(file_pruning_predicate=predicate or None)
        return [path for path, (b, q) in self._ranges.items()
                if (broker_name is None or b == broker_name) and (queue_id is None or q == queue_id)
                and (not window.bounded or _footer_overlaps(path, self.fs, window))]

    def dataset(self, files: Sequence[str]) -> ds.Dataset:
        """``files`` as one pyarrow dataset with the partition columns read from their paths."""
        fs, paths = dataset_paths(files)
        return ds.dataset(paths, schema=UTC_SCHEMA, format="parquet", filesystem=fs, partitioning=PARTITIONING,
                          partition_base_dir=self.base)


def _footer_overlaps(path: str, fs, window: TimeWindow) -> bool:
    """Whether a Parquet file's row-group statistics on ``store_timestamp`` meet ``window`` (True when a
    row group has none: it may hold anything)."""
    with fs.open_input_file(path) as f:
        meta = pq.read_metadata(f)
    column = meta.schema.names.index(TIME_COLUMN)
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            return True
        if window.overlaps(datetime_ms(stats.min), datetime_ms(stats.max)):
            return True
    return False


def open_snapshot(root: str, topic: str) -> ArchiveSnapshot:
    """The current snapshot of the topic's archive under ``root``; ConfigError when ``root`` is not there
    (a snapshot without files when the topic was never offloaded)."""
    fs, path = filesystem(root if "://" in root else os.path.abspath(root))
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise ConfigError(f"archive root {root!r} does not exist: give the tieredStoreRoot the offload job writes "
                          f"to (spark-mq offload --root), or no root to search the brokers only")
    return ArchiveSnapshot(open_archive(root, topic))


def find_archived(root: str, topic: str, key: str | None = None, begin_ms: int | None = None,
                  end_ms: int | None = None, *, snapshot: ArchiveSnapshot | None = None) -> pa.Table:
    """The archived messages of ``topic`` stored within [begin_ms, end_ms) that carry ``key`` (any when
    None), in :data:`SCHEMA`, by store time. A ``snapshot`` of the archive may be passed to reuse one."""
    window = TimeWindow(begin_ms, end_ms)
    if key is not None:
        check_key(key)
    snap = snapshot if snapshot is not None else open_snapshot(root, topic)
    files = snap.files(window) if snap.exists and not window.empty else []
    if not files:
        return SCHEMA.empty_table()
    data = snap.dataset(files)
    if key is None:
        return to_message_schema(data.to_table(filter=window.expression())).sort_by(ORDER)
    where = _conjunction([e for e in (window.expression(), key_candidates(key)) if e is not None])
    found = data.to_table(columns=_KEY_PASS_COLUMNS, filter=where)
    found = found.filter(key_mask(found, key))
    if not found.num_rows:
        return SCHEMA.empty_table()
    rows = data.to_table(filter=_rows_of(found))  # row groups pruned by the offsets' statistics
    return to_message_schema(rows).sort_by(ORDER)


def _rows_of(found: pa.Table) -> ds.Expression:
    """A filter selecting exactly the messages (broker, queue, offset) of ``found``."""
    by_queue: dict[tuple[str, int], list[int]] = {}
    for b, q, o in zip(*(found.column(c).to_pylist() for c in IDENTITY), strict=True):
        by_queue.setdefault((b, q), []).append(o)
    parts = [(ds.field(BROKER_COLUMN) == b) & (ds.field(QUEUE_COLUMN) == q) & ds.field(OFFSET_COLUMN).isin(offsets)
             for (b, q), offsets in by_queue.items()]
    out = parts[0]
    for p in parts[1:]:
        out = out | p
    return out


def first_offset_at_or_after(archive: Archive, broker_name: str, queue_id: int, timestamp_ms: int) -> int | None:
    """The queue offset of the queue's first archived message stored at or after ``timestamp_ms`` (store
    times grow with offsets within a queue); None when the archive has none that late."""
    snap = ArchiveSnapshot(archive)
    window = TimeWindow(timestamp_ms, None)
    files = snap.files(window, broker_name, queue_id) if snap.exists else []
    if not files:
        return None
    found = snap.dataset(files).to_table(columns=[OFFSET_COLUMN], filter=window.expression())
    return pc.min(found.column(OFFSET_COLUMN)).as_py() if found.num_rows else None


# -- the hot tier ---------------------------------------------------------------------------------


def row_to_message(row: dict) -> StoredMessage:
    """One :data:`SCHEMA` row (``Table.to_pylist``) as a :class:`StoredMessage`, for code that prints
    messages. The archive keeps no body CRC: ``body_crc`` is the CRC of the body as read."""
    return StoredMessage(
        topic=row["topic"], queue_id=row["queue_id"], queue_offset=row["queue_offset"],
        physical_offset=row["commitlog_offset"], body=row["body"], properties=dict(row["properties"] or []),
        flag=row["flag"], sys_flag=row["sys_flag"], body_crc=zlib.crc32(row["body"]) & CRC_MASK,
        born_timestamp=_utc_ms(row["born_timestamp"]), born_host=_packed(row["born_host"]),
        store_timestamp=_utc_ms(row["store_timestamp"]), store_host=_packed(row["store_host"]),
        reconsume_times=row["reconsume_times"],
    )


def _utc_ms(value: datetime) -> int:
    """ms of a :data:`SCHEMA` timestamp as ``to_pylist`` gives it (naive, UTC)."""
    return datetime_ms(value.replace(tzinfo=timezone.utc))


def _packed(host: str) -> bytes:
    ip, _, port = host.rpartition(":")
    return pack_host(ip, int(port))


def find_indexed(api: SyncMQClientAPI, queues: TopicQueues, key: str, window: TimeWindow,
                 max_per_broker: int = DEFAULT_MAX_HOT) -> pa.Table:
    """The messages of the topic carrying ``key`` stored within ``window``, from every broker of the topic
    through its index (QUERY_MESSAGE, whose window is [begin, end] ms), in :data:`SCHEMA`."""
    if max_per_broker < 1:
        raise ConfigError(f"max_hot must be at least 1, got {max_per_broker}")
    if window.empty:
        return SCHEMA.empty_table()
    check_key(key)
    begin, end = query_window(window.begin_ms, window.end_ms)
    tables = []
    for broker_name, addr in sorted(queues.brokers.items()):
        found = api.query_message(addr, queues.topic, key, max_per_broker, begin, end)
        if len(found) >= max_per_broker:
            log.warning("broker %s returned %d messages for key %r, the most asked for: older ones may be missing; "
                        "raise max_hot or narrow the time window", broker_name, len(found), key)
        tables.append(messages_to_arrow(found, broker_name))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


# -- both tiers -----------------------------------------------------------------------------------


def with_tier(rows: pa.Table, tier: str) -> pa.Table:
    return rows.append_column(TIER_COLUMN, pa.repeat(pa.scalar(tier, pa.string()), rows.num_rows))


def merge_tiers(hot: pa.Table, cold: pa.Table) -> pa.Table:
    """``cold`` and the rows of ``hot`` the archive does not hold, with their tier, by store time (a
    message in both is the archive's: see the module docstring)."""
    archived = set(zip(*(cold.column(c).to_pylist() for c in IDENTITY), strict=True))
    keep = [ident not in archived for ident in zip(*(hot.column(c).to_pylist() for c in IDENTITY), strict=True)]
    hot = hot.filter(pa.array(keep, pa.bool_())) if hot.num_rows else hot
    return pa.concat_tables([with_tier(cold, COLD), with_tier(hot, HOT)]).sort_by(ORDER)


def find_by_key(api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str, key: str,
                window: TimeWindow = TimeWindow(), *, root: str | None = None,
                max_hot: int = DEFAULT_MAX_HOT) -> pa.Table:
    """Every message of ``topic`` carrying ``key`` stored within ``window``: the brokers' (index) and,
    with ``root``, the archive's, once each, in :data:`RESULT_SCHEMA` by store time. ConfigError for an
    unknown topic, unreachable NameServers or a missing ``root``."""
    check_key(key)
    snapshot = open_snapshot(root, topic) if root is not None else None
    queues = discover_queues(api, namesrv_addrs, topic)
    cold = find_archived(root, topic, key, window.begin_ms, window.end_ms, snapshot=snapshot) \
        if snapshot is not None else SCHEMA.empty_table()
    return merge_tiers(find_indexed(api, queues, key, window, max_hot), cold)

