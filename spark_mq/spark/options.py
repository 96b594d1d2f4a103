"""Options of the ``spark_mq`` data source: every name defined once, parsed and validated up front.

As Spark's ``KafkaSourceProvider``: the option names are the constants below (the user writes them
in any case; Spark hands them over lower-cased), and :meth:`SourceOptions.parse` turns Spark's
options dict into one frozen :class:`SourceOptions` or raises :class:`ConfigError` saying what to
fix — before a query plans a single partition.

Offsets (``startingOffsets`` / ``endingOffsets``) are ``earliest``, ``latest``, ``committed``
(starting only; the offsets of ``group`` on the brokers) or JSON ``{"<broker>:<queueId>": offset}``
where ``-2`` means earliest and ``-1`` latest, as Kafka's. Queues a JSON leaves out start at
earliest and end at latest.

Thread-safety: immutable values and pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_mq.client.rebalance import STRATEGIES
from spark_mq.client.subscription import check_expression_type
from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError
from spark_mq.remoting.bodies import EXPRESSION_SQL92
from spark_mq.spark.offsets import (
    COMMITTED,
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    OffsetSpec,
    decode_offsets,
)

NAMESRV = "namesrv"
TOPIC = "topic"
GROUP = "group"
TAGS = "tags"
SQL = "sql"
STARTING_OFFSETS = "startingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_OFFSETS = "endingOffsets"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
MAX_MESSAGES_PER_PARTITION = "maxMessagesPerPartition"
ALLOCATE_STRATEGY = "allocateStrategy"
COMMIT_TO_BROKER = "commitToBroker"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
PULL_BATCH_SIZE = "pullBatchSize"
REBALANCE_INTERVAL_MS = "rebalanceIntervalMs"
TIERED_STORE_ROOT = "tieredStoreRoot"

ALL_OPTIONS = (NAMESRV, TOPIC, GROUP, TAGS, SQL, STARTING_OFFSETS, STARTING_TIMESTAMP, ENDING_OFFSETS,
               MAX_MESSAGES_PER_TRIGGER, MAX_MESSAGES_PER_PARTITION, ALLOCATE_STRATEGY, COMMIT_TO_BROKER,
               FAIL_ON_DATA_LOSS, PULL_BATCH_SIZE, REBALANCE_INTERVAL_MS, TIERED_STORE_ROOT)
_BY_LOWER = {name.lower(): name for name in ALL_OPTIONS}

DEFAULT_TAGS = "*"
DEFAULT_MAX_MESSAGES_PER_PARTITION = 1_000_000
DEFAULT_PULL_BATCH_SIZE = 8192  # ~2.2 MB of 100-byte messages; the broker also caps one pull at 4 MiB (readers loop)
DEFAULT_ALLOCATE_STRATEGY = "average"
DEFAULT_BATCH_GROUP = "spark_mq_reader"  # consumer group named in PULL_MESSAGE when no `group` is given
DEFAULT_REBALANCE_INTERVAL_MS = 20_000  # RocketMQ's rebalance interval; a member that leaves is noticed at once
MIN_REBALANCE_INTERVAL_MS = 100
# Spark's reserved table properties (TableCatalog.PROP_*): it passes them, with the OPTIONS (...), to the reads
# and writes of a catalog table (CREATE TABLE ... USING spark_mq OPTIONS (...)); ignored, as "path" is
_TABLE_PROPERTIES = frozenset({"location", "is_managed_location", "external", "table_type", "comment", "collation",
                               "provider", "owner"})
_SPARK_READ_OPTIONS = frozenset({"path", *_TABLE_PROPERTIES})
# a catalog table's properties carry its OPTIONS (...) again as option.<name>, which Spark passes on too
TABLE_OPTION_PREFIX = "option."
# a read with no option at all is most likely a SELECT from a catalog table, which PySpark 4.2 plans without the
# table's OPTIONS: its PythonDataSourceV2.getTable ignores the table's properties, and the reader gets the
# query's options only
NO_OPTIONS = ("the spark_mq source got no options. If this reads a table made by CREATE TABLE ... USING spark_mq "
              "OPTIONS (...): PySpark 4.2 does not pass a Python data source table's OPTIONS to its reads; use "
              "CREATE TEMPORARY VIEW <name> USING spark_mq OPTIONS (namesrv '...', topic '...') instead. Otherwise "
              "give .option('namesrv', ...) and .option('topic', ...)")

@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one ``spark_mq`` read (batch or streaming)."""

    namesrv: str  # ';'-separated host:port
    topic: str
    group: str | None = None
    tags: str = DEFAULT_TAGS
    starting: OffsetSpec = EARLIEST
    starting_timestamp: int | None = None  # ms since the epoch
    ending: OffsetSpec = LATEST
    max_messages_per_trigger: int | None = None
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION
    allocate_strategy: str = DEFAULT_ALLOCATE_STRATEGY
    commit_to_broker: bool = True
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS
    tiered_store_root: str | None = None  # the archive read below each queue's hot min (spark_mq.tiered.tiers)

    @property
    def group_member(self) -> bool:
        """Whether a stream joins ``group`` (queues split between its members): only when it also
        commits its offsets there, since a queue changing hands starts from the committed offset."""
        return self.group is not None and self.commit_to_broker

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv)

    @property
    def pull_group(self) -> str:
        """The consumer group PULL_MESSAGE names (the broker keeps per-group metrics)."""
        return self.group or DEFAULT_BATCH_GROUP

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
        """Validate Spark's options (keys in any case); ConfigError saying what to fix."""
        if not options:
            raise ConfigError(NO_OPTIONS)
        given = _given(options, _BY_LOWER, ALL_OPTIONS, "source", "read", ignored=_SPARK_READ_OPTIONS)
        if SQL in given:
            try:
                check_expression_type(EXPRESSION_SQL92)
            except ConfigError as e:
                raise ConfigError(f"option {SQL!r}: {e}. In Spark: filter at the broker with option {TAGS!r} and "
                                  f"the rest with .where(...)") from None
        namesrv = given[NAMESRV]
        group = given.get(GROUP) or None
        starting_timestamp = _int(given, STARTING_TIMESTAMP, minimum=0)
        starting = _offsets(given, STARTING_OFFSETS, allow=(EARLIEST, LATEST, COMMITTED))
        if starting is None:
            starting = LATEST if streaming else EARLIEST
        elif starting_timestamp is not None and starting != COMMITTED:
            raise ConfigError(f"give either {STARTING_OFFSETS!r} or {STARTING_TIMESTAMP!r}, not both "
                              f"({STARTING_TIMESTAMP} only goes with {STARTING_OFFSETS}=committed, as the start of "
                              f"queues the group has no committed offset for)")
        if starting == COMMITTED and group is None:
            raise ConfigError(f"{STARTING_OFFSETS}=committed needs option {GROUP!r}: the consumer group whose "
                              f"committed offsets to start from")
        if starting == LATEST and not streaming:
            raise ConfigError(f"{STARTING_OFFSETS}=latest makes an empty batch read: use earliest, committed, JSON "
                              f"offsets or {STARTING_TIMESTAMP}")
        if isinstance(starting, dict) and not streaming and LATEST_OFFSET in starting.values():
            raise ConfigError(f"{STARTING_OFFSETS}: -1 (latest) is not allowed in a batch read")
        ending = _offsets(given, ENDING_OFFSETS, allow=(LATEST,))
        if ending is not None and streaming:
            raise ConfigError(f"option {ENDING_OFFSETS!r} is for batch reads only (spark.read)")
        if isinstance(ending, dict) and EARLIEST_OFFSET in ending.values():
            raise ConfigError(f"{ENDING_OFFSETS}: -2 (earliest) is not allowed as an ending offset")
        strategy = given.get(ALLOCATE_STRATEGY, DEFAULT_ALLOCATE_STRATEGY)
        if strategy not in STRATEGIES:
            raise ConfigError(f"option {ALLOCATE_STRATEGY!r}: unknown strategy {strategy!r}, use one of "
                              f"{', '.join(sorted(STRATEGIES))}")
        return cls(
            namesrv=namesrv, topic=given[TOPIC], group=group, tags=given.get(TAGS) or DEFAULT_TAGS,
            starting=starting, starting_timestamp=starting_timestamp, ending=ending or LATEST,
            max_messages_per_trigger=_int(given, MAX_MESSAGES_PER_TRIGGER, minimum=1),
            max_messages_per_partition=_int(given, MAX_MESSAGES_PER_PARTITION, minimum=1)
            or DEFAULT_MAX_MESSAGES_PER_PARTITION,
            allocate_strategy=strategy,
            commit_to_broker=_bool(given, COMMIT_TO_BROKER, True),
            fail_on_data_loss=_bool(given, FAIL_ON_DATA_LOSS, True),
            pull_batch_size=_int(given, PULL_BATCH_SIZE, minimum=1) or DEFAULT_PULL_BATCH_SIZE,
            rebalance_interval_ms=_int(given, REBALANCE_INTERVAL_MS, minimum=MIN_REBALANCE_INTERVAL_MS)
            or DEFAULT_REBALANCE_INTERVAL_MS,
            tiered_store_root=given.get(TIERED_STORE_ROOT) or None,
        )


def _int(given: dict[str, str], name: str, *, minimum: int) -> int | None:
    text = given.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name!r} must be an integer >= {minimum}, got {value}")
    return value


def _bool(given: dict[str, str], name: str, default: bool) -> bool:
    text = given.get(name)
    if text is None or text == "":
        return default
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise ConfigError(f"option {name!r} must be true or false, got {text!r}")


def _offsets(given: dict[str, str], name: str, allow: tuple[str, ...]) -> OffsetSpec | None:
    text = given.get(name)
    if text is None or text == "":
        return None
    if text.lower() in allow:
        return text.lower()  # type: ignore[return-value]
    if not text.startswith(("{", "[")):
        raise ConfigError(f"option {name!r} must be {', '.join(allow)} or JSON like "
                          f'{{"broker-a:0": 42}}, got {text!r}')
    return decode_offsets(text, f"option {name!r}")


# -- sink: df.write / writeStream .format("spark_mq") ------------------------------------------------

PRODUCER_GROUP = "producerGroup"
BATCH_SIZE = "batchSize"
SINK_OPTIONS = (NAMESRV, TOPIC, PRODUCER_GROUP, BATCH_SIZE)
_SINK_BY_LOWER = {name.lower(): name for name in SINK_OPTIONS}
# options Spark itself passes (or users set for Spark) on a write: accepted and ignored by the sink
_SPARK_WRITE_OPTIONS = frozenset({"checkpointlocation", "path", "queryname", *_TABLE_PROPERTIES})

DEFAULT_PRODUCER_GROUP = "spark_mq_writer"
DEFAULT_BATCH_SIZE = 1000  # messages per SEND_BATCH_MESSAGE (also capped at 4 MiB encoded)
MAX_BATCH_SIZE = 100_000


@dataclass(frozen=True)
class SinkOptions:
    """The validated options of one ``spark_mq`` write (batch or streaming)."""

    namesrv: str  # ';'-separated host:port
    topic: str | None  # every row's topic (over a `topic` column, as Kafka's); None: each row's `topic` column
    producer_group: str = DEFAULT_PRODUCER_GROUP
    batch_size: int = DEFAULT_BATCH_SIZE

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate Spark's write options (keys in any case); ConfigError saying what to fix."""
        given = _given(options, _SINK_BY_LOWER, SINK_OPTIONS, "sink", "write to", ignored=_SPARK_WRITE_OPTIONS,
                       required=(NAMESRV,))  # `topic` may come from a column: checked with the schema
        batch_size = _int(given, BATCH_SIZE, minimum=1) or DEFAULT_BATCH_SIZE
        if batch_size > MAX_BATCH_SIZE:
            raise ConfigError(f"option {BATCH_SIZE!r} must be at most {MAX_BATCH_SIZE}, got {batch_size}")
        return cls(namesrv=given[NAMESRV], topic=given.get(TOPIC) or None,
                   producer_group=given.get(PRODUCER_GROUP) or DEFAULT_PRODUCER_GROUP, batch_size=batch_size)


def _given(options: Mapping[str, str], by_lower: Mapping[str, str], names: tuple[str, ...], kind: str, verb: str,
           ignored: frozenset[str] = frozenset(), required: tuple[str, ...] = (NAMESRV, TOPIC)) -> dict[str, str]:
    """Spark's options under their canonical names (keys in any case, values stripped), with the
    ``required`` ones present and ``namesrv`` well-formed; ConfigError saying what to fix."""
    given: dict[str, str] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower().removeprefix(TABLE_OPTION_PREFIX))
        if name is None:
            if key.lower() in ignored:
                continue
            raise ConfigError(f"unknown option {key!r} of the spark_mq {kind}: the options are {', '.join(names)}")
        text = value.strip() if isinstance(value, str) else str(value)
        if given.setdefault(name, text) != text:
            raise ConfigError(f"option {name!r} is given twice, as {given[name]!r} and {text!r}: give it once")
    for name in required:
        if not given.get(name):
            raise ConfigError(f"option {name!r} is required: .option({name!r}, ...)"
                              + (" with NameServer host:port (';'-separated for several)" if name == NAMESRV
                                 else f" naming the topic to {verb}"))
    _check_namesrv(given[NAMESRV])
    return given


def _check_namesrv(namesrv: str) -> None:
    for addr in split_addresses(namesrv):
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"option {NAMESRV!r}: {addr!r} is not host:port")
