"""Replay: a range of a topic read from both tiers as one, republished to another topic or written to
a sink.

The range is per queue, by offsets (``--from-offsets``/``--to-offsets`` JSON, or ``committed`` for
a group's committed offsets) or by store time (``--from-time``/``--to-time``: each queue's first
offset stored at or after the time, in whichever tier holds it). It is read with the ``spark_mq``
batch source with ``tieredStoreRoot`` set (:mod:`spark_mq.tiered.tiers`): the archive below each
queue's hot min, the broker above it, no gap and no duplicate at the seam. Optional filters: tags
(pushed down to the broker), a key (KEYS or UNIQ_KEY, as the broker's index matches), the time window
itself (store time in [from, to), exact, since time→offset search gives the boundaries only).

Republishing keeps per-queue order: rows are regrouped so each source queue is written by one task
in offset order, to the target queue of the same id (modulo the target's queue count); each message
keeps its body, keys, tags and user properties and gains ``ORIGIN_MESSAGE_ID`` (the original
UNIQ_KEY, RocketMQ's property for a message re-sent from another) and ``REPLAY_ORIGIN``
(``<topic>@<broker>:<queueId>:<offset>``). Delivery is at least once: a Spark task that fails after
sending some batches sends them again when retried (consumers can deduplicate on
``ORIGIN_MESSAGE_ID``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_mq.arrow.queues import discover_queues
from spark_mq.arrow.range_reader import REQUEST_TIMEOUT_S
from spark_mq.client.config import open_api
from spark_mq.common.errors import ConfigError
from spark_mq.common.properties import KEYS, ORIGIN_MESSAGE_ID, TAGS, UNIQ_KEY, WAIT_STORE_MSG_OK
from spark_mq.spark.offset_reader import offset_source
from spark_mq.spark.offsets import decode_offsets, encode_offsets
from spark_mq.spark.options import PLAIN, Connection, SourceOptions

REPLAY_ORIGIN = "REPLAY_ORIGIN"
# set again by the sink for every message it sends (UNIQ_KEY fresh, KEYS/TAGS from their columns)
RESENT_PROPERTIES = (UNIQ_KEY, KEYS, TAGS, WAIT_STORE_MSG_OK)
COMMITTED = "committed"


@dataclass(frozen=True)
class ReplaySpec:
    """What to replay (validated by :meth:`check`)."""

    namesrv: str
    topic: str
    root: str | None = None  # the archive; None: the hot tier only
    from_ms: int | None = None
    to_ms: int | None = None
    from_offsets: str | None = None  # JSON, or "committed" (needs group)
    to_offsets: str | None = None  # JSON
    group: str | None = None
    key: str | None = None
    tags: str | None = None
    connection: Connection = PLAIN  # the account and TLS of the reads and the republishing sends

    def check(self) -> None:
        if self.from_ms is not None and self.from_offsets is not None:
            raise ConfigError("give --from-time or --from-offsets, not both")
        if self.to_ms is not None and self.to_offsets is not None:
            raise ConfigError("give --to-time or --to-offsets, not both")
        if self.from_ms is not None and self.to_ms is not None and self.from_ms > self.to_ms:
            raise ConfigError(f"--from-time ({self.from_ms} ms) is after --to-time ({self.to_ms} ms)")
        if self.from_offsets == COMMITTED and not self.group:
            raise ConfigError("--from-offsets committed needs --group (whose committed offsets to start from)")
        for name, text in (("--from-offsets", self.from_offsets), ("--to-offsets", self.to_offsets)):
            if text is not None and text != COMMITTED:
                decode_offsets(text, name)

    def source_options(self) -> dict[str, str]:
        """The ``spark_mq`` batch source's options for the range's start (the end is resolved by
        :func:`ending_offsets`)."""
        opts = {"namesrv": self.namesrv, "topic": self.topic, "startingOffsets": "earliest",
                **self.connection.spark_options()}
        if self.root:
            opts["tieredStoreRoot"] = self.root
        if self.group:
            opts["group"] = self.group
        if self.tags:
            opts["tags"] = self.tags
        if self.from_offsets is not None:
            opts["startingOffsets"] = self.from_offsets
        elif self.from_ms is not None:
            opts.pop("startingOffsets")
            opts["startingTimestamp"] = str(self.from_ms)
        return opts


def ending_offsets(spec: ReplaySpec) -> str | None:
    """``endingOffsets`` JSON for ``--to-time`` (each queue's first offset stored at or after it, in
    either tier), ``--to-offsets`` as given, or None (latest)."""
    if spec.to_offsets is not None:
        return spec.to_offsets
    if spec.to_ms is None:
        return None
    opts = SourceOptions.parse(spec.source_options())
    with open_api(opts.client_config, REQUEST_TIMEOUT_S) as api:
        queues = discover_queues(api, opts.namesrv_addrs, spec.topic)
        source = offset_source(api, queues, opts)
        return encode_offsets({key: source.offset_by_timestamp(key, spec.to_ms) for key in queues.queues})


def replay_frame(spark: SparkSession, spec: ReplaySpec) -> DataFrame:
    """The range as one DataFrame in the source's schema (both tiers), filtered by key and time."""
    spec.check()
    reader = spark.read.format("spark_mq")
    for name, value in spec.source_options().items():
        reader = reader.option(name, value)
    ending = ending_offsets(spec)
    if ending is not None:
        reader = reader.option("endingOffsets", ending)
    df = reader.load()
    if spec.from_ms is not None:
        df = df.where(F.col("store_timestamp") >= F.timestamp_millis(F.lit(spec.from_ms)))
    if spec.to_ms is not None:
        df = df.where(F.col("store_timestamp") < F.timestamp_millis(F.lit(spec.to_ms)))
    if spec.key:
        df = df.where((F.col("uniq_key") == spec.key)
                      | F.array_contains(F.split(F.coalesce(F.col("keys"), F.lit("")), " "), spec.key))
    return df


def republish_frame(df: DataFrame, source_topic: str) -> DataFrame:
    """``df`` as rows for the ``spark_mq`` sink: one Spark partition per source queue range, in offset
    order, with the origin properties added (see the module doc)."""
    user_props = F.map_filter(F.coalesce(F.col("properties"), F.create_map().cast("map<string,string>")),
                              lambda k, _: ~k.isin(*RESENT_PROPERTIES))
    origin = F.concat_ws(":", F.concat(F.lit(f"{source_topic}@"), F.col("broker_name")), F.col("queue_id"),
                         F.col("queue_offset"))
    added = F.create_map(F.lit(ORIGIN_MESSAGE_ID), F.coalesce(F.col("uniq_key"), F.col("msg_id")),
                         F.lit(REPLAY_ORIGIN), origin)
    return (df.repartition("broker_name", "queue_id")
            .sortWithinPartitions("broker_name", "queue_id", "queue_offset")
            .select("body", "keys", "tags", F.map_concat(user_props, added).alias("properties"), "queue_id"))


def republish(spark: SparkSession, spec: ReplaySpec, to_topic: str) -> int:
    """Replay ``spec`` into ``to_topic``; returns how many messages were sent."""
    if to_topic == spec.topic:
        raise ConfigError(f"--to-topic {to_topic!r} is the topic being replayed: replay into another topic")
    rows = republish_frame(replay_frame(spark, spec), spec.topic).cache()
    try:
        count = rows.count()
        (rows.write.format("spark_mq").option("namesrv", spec.namesrv).option("topic", to_topic)
         .options(**spec.connection.spark_options()).mode("append").save())
        return count
    finally:
        rows.unpersist()


def describe(spec: ReplaySpec) -> str:
    """One line saying what is replayed, for the job's output."""
    parts = [f"topic {spec.topic}"]
    if spec.from_ms is not None or spec.to_ms is not None:
        parts.append(f"store time [{spec.from_ms or '-inf'}, {spec.to_ms or '+inf'}) ms")
    if spec.from_offsets or spec.to_offsets:
        parts.append(f"offsets [{spec.from_offsets or 'earliest'}, {spec.to_offsets or 'latest'})")
    if spec.key:
        parts.append(f"key {spec.key!r}")
    if spec.tags:
        parts.append(f"tags {spec.tags!r}")
    parts.append(f"archive {spec.root}" if spec.root else "hot tier only")
    return ", ".join(parts)

