"""Messages by key and by store time across both tiers, as one Spark DataFrame with a ``tier`` column.

``by_key(spark, topic, key, begin, end, namesrv=..., root=...)`` asks every broker of the topic through
its index (QUERY_MESSAGE) and, with ``root``, the archive (statistics-pruned, read with pyarrow in the
driver: see :mod:`spark_mq.tiered.lookup` for why not a Spark job). ``by_time(spark, topic, begin, end,
namesrv=..., root=...)`` reads every message stored in the window: from each queue's brokers, the offset
range SEARCH_OFFSET_BY_TIMESTAMP gives for the window (through the ``spark_mq`` source), and from the
archive the files and row groups whose store-time statistics meet the window (Spark's Parquet reader).

Both return :data:`QUERY_SCHEMA`: the ``spark_mq`` source's columns (``SPARK_SCHEMA``) and ``tier``,
``"hot"`` for a message read from a broker, ``"cold"`` for one read from the archive. The window is
[begin, end) on ``store_timestamp``, in ms since the epoch or as datetimes (naive: local time); None
leaves a side open (``by_key`` with no window searches the whole archive). A message in both tiers
(archived, not yet deleted by retention) comes once, as ``cold``: the tier says whether a message is
archived, so a query gives the same answer before and after retention runs. ``by_time`` makes that
exact with one snapshot of the archive: each queue's broker range starts where that snapshot's archive
of the queue ends.

Errors (ConfigError, saying what to change): an unknown topic, NameServers that do not answer, a window
that ends before it begins, a ``root`` that does not exist.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from spark_mq.arrow.queues import BrokerOffsets, QueueKey, TopicQueues, discover_queues
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.arrow.schema import UTC_SCHEMA, to_utc_schema
from spark_mq.client.config import open_api
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError
from spark_mq.spark.archive_reader import read_archive_files
from spark_mq.spark.offsets import encode_offsets
from spark_mq.spark.options import PLAIN, Connection
from spark_mq.spark.provider import NAME
from spark_mq.spark.schema import SPARK_SCHEMA
from spark_mq.tiered.lookup import (
    COLD,
    DEFAULT_MAX_HOT,
    HOT,
    TIER_COLUMN,
    TIME_COLUMN,
    TimeBound,
    TimeWindow,
    find_by_key,
    open_snapshot,
)

QUERY_SCHEMA = StructType([*SPARK_SCHEMA.fields, StructField(TIER_COLUMN, StringType())])


def by_key(spark: SparkSession, topic: str, key: str, begin: TimeBound = None, end: TimeBound = None, *,
           namesrv: str, root: str | None = None, max_hot: int = DEFAULT_MAX_HOT,
           connection: Connection = PLAIN) -> DataFrame:
    """The messages of ``topic`` whose KEYS list ``key`` or whose UNIQ_KEY is ``key``, stored in [begin,
    end), from the brokers' index and (with ``root``) the archive, once each, by store time.

    ``max_hot`` caps the hits each broker returns (its index answers newest first): a warning says when
    a broker reached it. ``connection``: the account the requests are signed with (ACL) and their TLS, as the
    source's options (``Connection.from_env()`` reads spark-mq's environment)."""
    window, addrs = TimeWindow.of(begin, end), _namesrv_addrs(namesrv)
    with open_api(connection.client_config(namesrv), REQUEST_TIMEOUT_S) as api:
        found = find_by_key(api, addrs, topic, key, window, root=root, max_hot=max_hot)
    if not found.num_rows:  # pyspark 4.2 cannot convert an Arrow table without chunks
        return spark.createDataFrame([], QUERY_SCHEMA)
    batches = [to_utc_schema(b) for b in found.drop_columns([TIER_COLUMN]).to_batches()]
    rows = pa.Table.from_batches(batches, schema=UTC_SCHEMA).append_column(
        TIER_COLUMN, found.column(TIER_COLUMN))
    return spark.createDataFrame(rows, schema=QUERY_SCHEMA)


def by_time(spark: SparkSession, topic: str, begin: TimeBound, end: TimeBound, *, namesrv: str,
            root: str | None = None, connection: Connection = PLAIN) -> DataFrame:
    """Every message of ``topic`` stored in [begin, end): the brokers' and (with ``root``) the archive's,
    once each, in no particular order (sort it if you need one: the window may be large). ``connection``: as
    :func:`by_key`'s."""
    window = TimeWindow.of(begin, end)
    snapshot = open_snapshot(root, topic) if root is not None else None
    addrs = _namesrv_addrs(namesrv)
    with open_api(connection.client_config(namesrv), REQUEST_TIMEOUT_S) as api:
        queues = discover_queues(api, addrs, topic)
        starting, ending = hot_ranges(api, queues, window, snapshot.ends if snapshot is not None else {})
    hot = (spark.read.format(NAME).option("namesrv", namesrv).option("topic", topic)
           .option("startingOffsets", encode_offsets(starting)).option("endingOffsets", encode_offsets(ending))
           .options(**connection.spark_options()).load())
    frames = [hot.where(_within(window)).withColumn(TIER_COLUMN, F.lit(HOT))]
    if snapshot is not None and snapshot.exists:
        files = snapshot.files(window)
        if files:
            cold = read_archive_files(spark, snapshot.archive, files)
            frames.append(cold.where(_within(window)).withColumn(TIER_COLUMN, F.lit(COLD)))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def hot_ranges(api: SyncMQClientAPI, queues: TopicQueues, window: TimeWindow,
               archived: dict[QueueKey, int]) -> tuple[dict[QueueKey, int], dict[QueueKey, int]]:
    """(starting, ending) offsets of each queue's messages on its broker stored within ``window`` and not
    below ``archived`` (the queue's archived end): SEARCH_OFFSET_BY_TIMESTAMP gives the first offset stored
    at or after a time, so [search(begin), search(end)) is the window's range (store times grow with
    offsets in a queue)."""
    offsets = BrokerOffsets(api, queues)
    starting, ending = {}, {}
    for key in queues.queues:
        top = offsets.max_offset(key)
        lo = offsets.offset_by_timestamp(key, window.begin_ms) if window.begin_ms is not None \
            else offsets.min_offset(key)
        hi = offsets.offset_by_timestamp(key, window.end_ms) if window.end_ms is not None else top
        starting[key] = min(max(lo, archived.get(key, 0)), top)
        ending[key] = max(hi, starting[key])
    return starting, ending


def _within(window: TimeWindow) -> Column:
    """``window`` as a filter on ``store_timestamp`` (pushed down to the archive's Parquet row groups)."""
    column = F.col(TIME_COLUMN)
    condition = F.lit(True)
    if window.begin_ms is not None:
        condition = condition & (column >= F.timestamp_millis(F.lit(window.begin_ms)))
    if window.end_ms is not None:
        condition = condition & (column < F.timestamp_millis(F.lit(window.end_ms)))
    return condition


def _namesrv_addrs(namesrv: str) -> list[str]:
    addrs = split_addresses(namesrv or "")
    if not addrs:
        raise ConfigError("namesrv names no NameServer: pass namesrv='host:port' (';'-separated for several)")
    return addrs

