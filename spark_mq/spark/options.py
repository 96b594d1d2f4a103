"""Options of the ``spark_mq`` data source: every name defined once, parsed and validated up front.

As Spark's ``KafkaSourceProvider``: the option names are the constants below (the user writes them
in any case; Spark hands them over lower-cased), and :meth:`SourceOptions.parse` turns Spark's
options dict into one frozen :class:`SourceOptions` or raises :class:`ConfigError` saying what to
fix — before a query plans a single partition.

A read names its topics with exactly one of ``topic`` (one name or a comma-separated list) and
``topicPattern`` (a regular expression a whole topic name must match, system topics excluded; the
stream re-evaluates it each trigger), as Kafka's ``subscribe`` / ``subscribePattern``.

Offsets (``startingOffsets`` / ``endingOffsets``) are ``earliest``, ``latest``, ``committed``
(starting only; the offsets of ``group`` on the brokers) or JSON keyed by topic
``{"<topic>": {"<broker>:<queueId>": offset}}`` where ``-2`` means earliest and ``-1`` latest, as
Kafka's; a read of one topic also takes the older ``{"<broker>:<queueId>": offset}``. Queues a JSON
leaves out start at earliest and end at latest. ``startingOffsetsByTimestamp`` /
``endingOffsetsByTimestamp`` take the same JSON with ms timestamps, ``endingTimestamp`` one
timestamp for every queue (batch reads).

``sqlFilter`` is a SQL92 expression (RocketMQ's grammar) over the message properties; it is parsed
here, so a bad one fails with the position of the fault before anything is planned, and the brokers
filter by it (:mod:`spark_mq.spark.sql_filter`). ``propertyColumns`` names properties read into the struct
column ``property`` (:mod:`spark_mq.spark.property_column`), whose filters the batch reader pushes to the
brokers as SQL92.

Read limits of a stream: ``maxMessagesPerTrigger`` caps a batch; ``minMessagesPerTrigger`` holds
one back until that many messages wait or ``maxTriggerDelay`` passed since the last batch (Kafka's
``minOffsetsPerTrigger`` / ``maxTriggerDelay``, applied by the reader itself: see
:mod:`spark_mq.spark.stream`).

``accessKey``/``secretKey`` (source and sink) are the account every request is signed with, for servers
with ``aclEnable``; without ``secretKey``, ``accessKey``'s secret is ``$SPARK_MQ_SECRET_KEY`` of the driver.
Spark redacts both by name wherever it shows options (its default ``spark.redaction.regex``): the SQL page,
``explain``, the event log; here the secret is in no repr and no error text, and it reaches the executors
inside the pickled partitions and writers, never in a log line. A catalog table does not keep it (its options
live in its schema, which Spark writes into files such as Parquet footers): its reads take it from the query's
options or the environment.

``tls`` (true/false), ``tlsTrustCertPath``, ``tlsCertPath``, ``tlsKeyPath`` (source and sink) dial every NameServer
and broker over TLS, for servers with ``tls.server.mode`` enforcing or permissive: the PEM CA(s) the servers'
certificates are checked against (the system's CAs when empty) and a client certificate and key for servers that
require one. A path implies ``tls`` (as the CLI's ``--tls-ca``/``--tls-cert``); the files are loaded on the driver
before anything is planned (an error names the option), then again on each executor from the same path, as Kafka's
``ssl.truststore.location``: they must be there on every node. :class:`Connection` holds the account and the TLS
options and is the one place they become a :class:`~spark_mq.client.config.ClientConfig`.

Thread-safety: immutable values and pure functions.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_mq.client import config as client_env  # the environment variables spark-mq reads
from spark_mq.client.config import SECRET_KEY_ENV, ClientConfig
from spark_mq.client.rebalance import STRATEGIES
from spark_mq.client.subscription import parse_tags, subscription_data
from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError, InvalidNameError
from spark_mq.common.names import validate_group, validate_topic
from spark_mq.common.tls import client_context
from spark_mq.filter.compose import all_of, is_property_name, tags_in
from spark_mq.filter.sql92 import FilterParseError, parse
from spark_mq.remoting.bodies import EXPRESSION_SQL92, SubscriptionData
from spark_mq.remoting.signature import Credentials
from spark_mq.spark.offsets import (
    COMMITTED,
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    OffsetSpec,
    TopicOffsets,
    decode_topic_offsets,
)

NAMESRV = "namesrv"
TOPIC = "topic"
TOPIC_PATTERN = "topicPattern"
GROUP = "group"
TAGS = "tags"
SQL_FILTER = "sqlFilter"
PROPERTY_COLUMNS = "propertyColumns"
STARTING_OFFSETS = "startingOffsets"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_OFFSETS = "endingOffsets"
STARTING_OFFSETS_BY_TIMESTAMP = "startingOffsetsByTimestamp"
ENDING_OFFSETS_BY_TIMESTAMP = "endingOffsetsByTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
MIN_PARTITIONS = "minPartitions"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
MIN_MESSAGES_PER_TRIGGER = "minMessagesPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
MAX_MESSAGES_PER_PARTITION = "maxMessagesPerPartition"
ALLOCATE_STRATEGY = "allocateStrategy"
COMMIT_TO_BROKER = "commitToBroker"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
PULL_BATCH_SIZE = "pullBatchSize"
REBALANCE_INTERVAL_MS = "rebalanceIntervalMs"
TIERED_STORE_ROOT = "tieredStoreRoot"
ACCESS_KEY = "accessKey"  # the account requests are signed with (ACL), source and sink
SECRET_KEY = "secretKey"  # ... its secret: Spark's default spark.redaction.regex matches the name
TLS = "tls"  # true: dial the servers over TLS (source and sink)
TLS_TRUST_CERT_PATH = "tlsTrustCertPath"  # PEM CA(s) the servers' certificates are checked against; implies tls
TLS_CERT_PATH = "tlsCertPath"  # PEM client certificate, for servers requiring one; implies tls
TLS_KEY_PATH = "tlsKeyPath"  # PEM private key of tlsCertPath
CONNECTION_OPTIONS = (ACCESS_KEY, SECRET_KEY, TLS, TLS_TRUST_CERT_PATH, TLS_CERT_PATH, TLS_KEY_PATH)

ALL_OPTIONS = (NAMESRV, TOPIC, TOPIC_PATTERN, GROUP, TAGS, SQL_FILTER, PROPERTY_COLUMNS, STARTING_OFFSETS,
               STARTING_TIMESTAMP, ENDING_OFFSETS, STARTING_OFFSETS_BY_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP,
               ENDING_TIMESTAMP, MIN_PARTITIONS, MAX_MESSAGES_PER_TRIGGER, MIN_MESSAGES_PER_TRIGGER, MAX_TRIGGER_DELAY,
               MAX_MESSAGES_PER_PARTITION, ALLOCATE_STRATEGY, COMMIT_TO_BROKER, FAIL_ON_DATA_LOSS, PULL_BATCH_SIZE,
               REBALANCE_INTERVAL_MS, TIERED_STORE_ROOT, *CONNECTION_OPTIONS)
STREAM_ONLY = (MIN_MESSAGES_PER_TRIGGER, MAX_TRIGGER_DELAY)
BATCH_ONLY = (ENDING_OFFSETS, ENDING_OFFSETS_BY_TIMESTAMP, ENDING_TIMESTAMP)
_BY_LOWER = {name.lower(): name for name in ALL_OPTIONS}

DEFAULT_TAGS = "*"
DEFAULT_MAX_MESSAGES_PER_PARTITION = 1_000_000
DEFAULT_PULL_BATCH_SIZE = 8192  # ~2.2 MB of 100-byte messages; the broker also caps one pull at 4 MiB (readers loop)
DEFAULT_ALLOCATE_STRATEGY = "average"
DEFAULT_BATCH_GROUP = "spark_mq_reader"  # consumer group named in PULL_MESSAGE when no `group` is given
DEFAULT_REBALANCE_INTERVAL_MS = 20_000  # RocketMQ's rebalance interval; a member that leaves is noticed at once
MIN_REBALANCE_INTERVAL_MS = 100
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # Kafka's maxTriggerDelay default, "15m"
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|min|h|d)?")
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
# Spark's reserved table properties (TableCatalog.PROP_*): it passes them, with the OPTIONS (...), to the source
# when a catalog table is created (CREATE TABLE ... USING spark_mq OPTIONS (...)); ignored, as "path" is
TABLE_PROVIDER = "provider"  # TableCatalog.PROP_PROVIDER: only a CREATE TABLE's options name it
_TABLE_PROPERTIES = frozenset({"location", "is_managed_location", "external", "table_type", "comment", "collation",
                               TABLE_PROVIDER, "owner"})
_SPARK_READ_OPTIONS = frozenset({"path", *_TABLE_PROPERTIES})
# a catalog table's properties carry its OPTIONS (...) again as option.<name>, which Spark passes on too
TABLE_OPTION_PREFIX = "option."
# a read with no option at all: a SELECT from a catalog table whose options its stored schema does not carry
# (spark_mq.spark.schema.with_table_options): one created with a column list, which PySpark 4.2 stores without
# asking the source; or a load() without options
NO_OPTIONS = ("the spark_mq source got no options. If this reads a table made by CREATE TABLE <name> (<columns>) "
              "USING spark_mq OPTIONS (...): create it again without the column list (CREATE TABLE <name> USING "
              "spark_mq OPTIONS (namesrv '...', topic '...')), so that the source stores its options with the "
              "table. Otherwise give .option('namesrv', ...) and .option('topic', ...)")
# a write with no option at all: most likely an INSERT INTO a catalog table, whose options PySpark 4.2 does not give
# the writer (PythonWriteBuilder gets the write's options only; its schema carries the query's column metadata,
# which names the table read from, not the one written to, so it cannot stand in for them)
NO_SINK_OPTIONS = ("the spark_mq sink got no options. INSERT INTO a spark_mq table is not supported (PySpark 4.2 does "
                   "not pass a Python data source table's options to its writes): write with df.write.format("
                   "'spark_mq').option('namesrv', ...).option('topic', ...).mode('append').save()")


@dataclass(frozen=True)
class Connection:
    """How every client of a read or write dials and signs (options ``accessKey``/``secretKey`` and ``tls*``):
    picklable, so the executors open theirs with it; the secret is in no repr."""

    access_key: str = ""  # the account requests are signed with; empty: unsigned
    secret_key: str = field(default="", repr=False)
    tls: bool = False
    tls_trust_cert_path: str = ""  # empty: the system's CAs
    tls_cert_path: str = ""
    tls_key_path: str = ""

    @classmethod
    def of(cls, config: ClientConfig) -> Connection:
        """The account and TLS of ``config`` (a CLI's or a job's ``--tls``/``--access-key``...)."""
        return cls(config.access_key, config.secret_key, config.tls_enable, config.tls_trust_cert_path,
                   config.tls_cert_path, config.tls_key_path)

    @classmethod
    def from_env(cls) -> Connection:
        """The account and TLS of the environment, as spark-mq reads it (``SPARK_MQ_ACCESS_KEY``/``_SECRET_KEY``,
        ``SPARK_MQ_TLS``=1, ``SPARK_MQ_TLS_CA``/``_CERT``/``_KEY``; a certificate implies TLS): for notebooks."""
        names = {ACCESS_KEY: client_env.ACCESS_KEY_ENV, SECRET_KEY: SECRET_KEY_ENV, TLS: client_env.TLS_ENV,
                 TLS_TRUST_CERT_PATH: client_env.TLS_CA_ENV, TLS_CERT_PATH: client_env.TLS_CERT_ENV,
                 TLS_KEY_PATH: client_env.TLS_KEY_ENV}
        env = {option: os.environ.get(name, "") for option, name in names.items()}
        env[TLS] = "true" if env[TLS] in ("1", "true") else ""
        return cls.parse({option: value for option, value in env.items() if value})

    @classmethod
    def parse(cls, given: Mapping[str, str]) -> Connection:
        """The options (canonical names) checked: the account whole, the TLS files loadable here; ConfigError
        naming the option."""
        paths = {name: given.get(name, "") for name in (TLS_TRUST_CERT_PATH, TLS_CERT_PATH, TLS_KEY_PATH)}
        tls = _bool(given, TLS, False)
        named = [name for name, path in paths.items() if path]
        if named and TLS in given and given[TLS] and not tls:
            raise ConfigError(f"option {named[0]!r} is given with {TLS}=false: drop it, or set {TLS} to true "
                              f"(a certificate path alone implies TLS)")
        tls = tls or bool(named)
        if tls:  # on the driver now, so a wrong path fails before planning rather than on every executor
            client_context(*paths.values(), keys=tuple(f"option {name}" for name in paths))  # type: ignore[arg-type]
        return cls(**_account(given), tls=tls, tls_trust_cert_path=paths[TLS_TRUST_CERT_PATH],
                   tls_cert_path=paths[TLS_CERT_PATH], tls_key_path=paths[TLS_KEY_PATH])

    @property
    def credentials(self) -> Credentials | None:
        return Credentials(self.access_key, self.secret_key) if self.access_key else None

    def client_config(self, namesrv: str, **overrides: object) -> ClientConfig:
        """The config every client of the read or write is opened with (``SyncMQClientAPI.of``, producers,
        group members), on the driver and the executors."""
        return ClientConfig(namesrv_addr=namesrv, tls_enable=self.tls, tls_trust_cert_path=self.tls_trust_cert_path,
                            tls_cert_path=self.tls_cert_path, tls_key_path=self.tls_key_path,
                            access_key=self.access_key, secret_key=self.secret_key, **overrides)  # type: ignore[arg-type]

    def spark_options(self) -> dict[str, str]:
        """These as the source's and sink's options, for the reads and writes a helper starts (``query.by_time``,
        replay); {} for a plaintext, unsigned connection."""
        out = {ACCESS_KEY: self.access_key, SECRET_KEY: self.secret_key} if self.access_key else {}
        if self.tls:
            out[TLS] = "true"
            out.update({name: path for name, path in ((TLS_TRUST_CERT_PATH, self.tls_trust_cert_path),
                                                      (TLS_CERT_PATH, self.tls_cert_path),
                                                      (TLS_KEY_PATH, self.tls_key_path)) if path})
        return out


PLAIN = Connection()  # plaintext, unsigned


class Connected:
    """What the source's and the sink's options share: the NameServers and how every client of theirs dials and
    signs (fields of the dataclasses below)."""

    namesrv: str
    connection: Connection

    @property
    def credentials(self) -> Credentials | None:
        return self.connection.credentials

    @property
    def client_config(self) -> ClientConfig:
        return self.connection.client_config(self.namesrv)


@dataclass(frozen=True)
class SourceOptions(Connected):
    """The validated options of one ``spark_mq`` read (batch or streaming)."""

    namesrv: str  # ';'-separated host:port
    topics: tuple[str, ...] = ()  # option `topic`: the topics read, or () with a pattern
    topic_pattern: str | None = None  # a regex a whole topic name matches (re.fullmatch)
    group: str | None = None
    tags: str = DEFAULT_TAGS
    sql_filter: str | None = None  # a SQL92 expression the brokers filter by (spark_mq.spark.sql_filter)
    property_columns: tuple[str, ...] = ()  # the fields of column `property` (spark_mq.spark.property_column)
    starting: OffsetSpec = EARLIEST
    starting_timestamp: int | None = None  # ms since the epoch
    starting_by_timestamp: TopicOffsets | None = None  # topic -> queue -> ms since the epoch
    ending: OffsetSpec = LATEST
    ending_by_timestamp: TopicOffsets | None = None
    ending_timestamp: int | None = None
    min_partitions: int | None = None
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION
    allocate_strategy: str = DEFAULT_ALLOCATE_STRATEGY
    commit_to_broker: bool = True
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    rebalance_interval_ms: int = DEFAULT_REBALANCE_INTERVAL_MS
    tiered_store_root: str | None = None  # the archive read below each queue's hot min (spark_mq.tiered.tiers)
    connection: Connection = PLAIN  # the account and TLS of every client the read opens

    @property
    def group_member(self) -> bool:
        """Whether a stream joins ``group`` (queues split between its members): only when it also
        commits its offsets there, since a queue changing hands starts from the committed offset."""
        return self.group is not None and self.commit_to_broker

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv)

    @property
    def single_topic(self) -> str | None:
        """The topic of a read of exactly one: the one the older un-keyed offsets JSON names."""
        return self.topics[0] if len(self.topics) == 1 else None

    @property
    def subject(self) -> str:
        """What the read reads, for logs and errors: ``topic a``, ``topics a, b`` or ``topics matching 'p'``."""
        if self.topic_pattern is not None:
            return f"topics matching {self.topic_pattern!r}"
        return ("topic " if len(self.topics) == 1 else "topics ") + ", ".join(self.topics)

    @property
    def pull_sql(self) -> str | None:
        """The SQL92 expression the reader's pulls carry: ``sqlFilter`` AND-ed with option ``tags`` as ``TAGS
        IN (...)``, so the broker filters both; None without ``sqlFilter`` (the pulls carry the tags)."""
        if self.sql_filter is None:
            return None
        tags = parse_tags(self.tags)
        return all_of([tags_in(tags) if tags is not None else None, self.sql_filter])

    def subscription(self, topic: str) -> SubscriptionData:
        """What the reader subscribes ``topic`` with, as its pulls and a group member's heartbeats say."""
        sql = self.pull_sql
        if sql is None:
            return subscription_data(topic, self.tags)
        return subscription_data(topic, sql, expression_type=EXPRESSION_SQL92)

    @property
    def pull_group(self) -> str:
        """The consumer group PULL_MESSAGE names (the broker keeps per-group metrics)."""
        return self.group or DEFAULT_BATCH_GROUP

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
        """Validate Spark's options (keys in any case); ConfigError saying what to fix."""
        if not options:
            raise ConfigError(NO_OPTIONS)
        given = _given(options, _BY_LOWER, ALL_OPTIONS, "source", "read", ignored=_SPARK_READ_OPTIONS,
                       required=(NAMESRV,))
        topics, pattern = _topics(given)
        single = topics[0] if len(topics) == 1 else None  # whose queues the older un-keyed offsets JSON names
        namesrv = given[NAMESRV]
        group = _group(given, GROUP)
        starting_timestamp = _int(given, STARTING_TIMESTAMP, minimum=0)
        starting_by_timestamp = _topic_json(given, STARTING_OFFSETS_BY_TIMESTAMP, single, topics, pattern,
                                            minimum=0)
        starting = _offsets(given, STARTING_OFFSETS, (EARLIEST, LATEST, COMMITTED), single, topics, pattern)
        if starting_by_timestamp is not None and (isinstance(starting, dict) or starting == COMMITTED
                                                  or starting_timestamp is not None):
            raise ConfigError(f"option {STARTING_OFFSETS_BY_TIMESTAMP!r} goes with {STARTING_OFFSETS}=earliest or "
                              f"latest only (for the queues it leaves out): drop {STARTING_OFFSETS} JSON/committed "
                              f"or {STARTING_TIMESTAMP}")
        if starting is None:
            starting = LATEST if streaming else EARLIEST
        elif starting_timestamp is not None and starting != COMMITTED:
            raise ConfigError(f"give either {STARTING_OFFSETS!r} or {STARTING_TIMESTAMP!r}, not both "
                              f"({STARTING_TIMESTAMP} only goes with {STARTING_OFFSETS}=committed, as the start of "
                              f"queues the group has no committed offset for)")
        if starting == COMMITTED and group is None:
            raise ConfigError(f"{STARTING_OFFSETS}=committed needs option {GROUP!r}: the consumer group whose "
                              f"committed offsets to start from")
        if starting == LATEST and not streaming and starting_by_timestamp is None:
            raise ConfigError(f"{STARTING_OFFSETS}=latest makes an empty batch read: use earliest, committed, JSON "
                              f"offsets or {STARTING_TIMESTAMP}")
        if isinstance(starting, dict) and not streaming and any(
                LATEST_OFFSET in queues.values() for queues in starting.values()):
            raise ConfigError(f"{STARTING_OFFSETS}: -1 (latest) is not allowed in a batch read")
        ending = _offsets(given, ENDING_OFFSETS, (LATEST,), single, topics, pattern)
        if isinstance(ending, dict) and any(EARLIEST_OFFSET in queues.values() for queues in ending.values()):
            raise ConfigError(f"{ENDING_OFFSETS}: -2 (earliest) is not allowed as an ending offset")
        ending_by_timestamp = _topic_json(given, ENDING_OFFSETS_BY_TIMESTAMP, single, topics, pattern, minimum=0)
        ending_timestamp = _int(given, ENDING_TIMESTAMP, minimum=0)
        ends = [name for name, v in ((ENDING_OFFSETS, ending), (ENDING_OFFSETS_BY_TIMESTAMP, ending_by_timestamp),
                                     (ENDING_TIMESTAMP, ending_timestamp)) if v is not None]
        if len(ends) > 1:
            raise ConfigError(f"give one of {', '.join(ends)}: each sets where the read ends")
        if (starting_timestamp is not None and ending_timestamp is not None
                and starting_timestamp > ending_timestamp):
            raise ConfigError(f"{STARTING_TIMESTAMP} ({starting_timestamp}) is after {ENDING_TIMESTAMP} "
                              f"({ending_timestamp})")
        strategy = given.get(ALLOCATE_STRATEGY, DEFAULT_ALLOCATE_STRATEGY)
        if strategy not in STRATEGIES:
            raise ConfigError(f"option {ALLOCATE_STRATEGY!r}: unknown strategy {strategy!r}, use one of "
                              f"{', '.join(sorted(STRATEGIES))}")
        max_per_trigger = _int(given, MAX_MESSAGES_PER_TRIGGER, minimum=1)
        min_per_trigger = _int(given, MIN_MESSAGES_PER_TRIGGER, minimum=1)
        max_delay = _duration_ms(given, MAX_TRIGGER_DELAY)
        if max_delay is not None and min_per_trigger is None:
            raise ConfigError(f"option {MAX_TRIGGER_DELAY!r} only bounds how long {MIN_MESSAGES_PER_TRIGGER!r} holds "
                              f"a batch back: give {MIN_MESSAGES_PER_TRIGGER} too, or drop it")
        if min_per_trigger is not None and max_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise ConfigError(f"{MIN_MESSAGES_PER_TRIGGER} ({min_per_trigger}) is above {MAX_MESSAGES_PER_TRIGGER} "
                              f"({max_per_trigger}): a batch could never hold enough")
        for name in STREAM_ONLY if not streaming else BATCH_ONLY:  # after the values: a bad one is named first
            if given.get(name):
                raise ConfigError(f"option {name!r} is for {'streaming' if not streaming else 'batch'} reads only "
                                  f"({'spark.readStream' if not streaming else 'spark.read'})")
        return cls(
            namesrv=namesrv, topics=topics, topic_pattern=pattern, group=group,
            tags=given.get(TAGS) or DEFAULT_TAGS, sql_filter=_sql_filter(given),
            property_columns=_property_columns(given),
            starting=starting, starting_timestamp=starting_timestamp, starting_by_timestamp=starting_by_timestamp,
            ending=ending or LATEST, ending_by_timestamp=ending_by_timestamp, ending_timestamp=ending_timestamp,
            min_partitions=_int(given, MIN_PARTITIONS, minimum=1),
            max_messages_per_trigger=max_per_trigger, min_messages_per_trigger=min_per_trigger,
            max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if max_delay is None else max_delay,
            max_messages_per_partition=_int(given, MAX_MESSAGES_PER_PARTITION, minimum=1)
            or DEFAULT_MAX_MESSAGES_PER_PARTITION,
            allocate_strategy=strategy,
            commit_to_broker=_bool(given, COMMIT_TO_BROKER, True),
            fail_on_data_loss=_bool(given, FAIL_ON_DATA_LOSS, True),
            pull_batch_size=_int(given, PULL_BATCH_SIZE, minimum=1) or DEFAULT_PULL_BATCH_SIZE,
            rebalance_interval_ms=_int(given, REBALANCE_INTERVAL_MS, minimum=MIN_REBALANCE_INTERVAL_MS)
            or DEFAULT_REBALANCE_INTERVAL_MS,
            tiered_store_root=given.get(TIERED_STORE_ROOT) or None,
            connection=Connection.parse(given),
        )


def table_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """The source options of a CREATE TABLE ... USING spark_mq (its OPTIONS, keys lower-cased as Spark gives a
    read's), to store with the table; None when ``options`` are not a CREATE TABLE's (they name no provider)."""
    if not any(key.lower() == TABLE_PROVIDER for key in options):
        return None
    given = _given(options, _BY_LOWER, ALL_OPTIONS, "source", "read", ignored=_SPARK_READ_OPTIONS,
                   required=(NAMESRV,))
    return {name.lower(): value for name, value in given.items() if name != SECRET_KEY}  # kept in the schema: no secret


def _topics(given: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    """The topics of option ``topic`` (comma-separated, each a valid name) or the pattern of
    ``topicPattern`` (a valid regex): exactly one of the two."""
    text, pattern = given.get(TOPIC), given.get(TOPIC_PATTERN)
    if not text and not pattern:
        raise ConfigError(f"option {TOPIC!r} is required: .option({TOPIC!r}, ...) naming the topic to read (or a "
                          f"comma-separated list), or else option {TOPIC_PATTERN!r}: a regex whole topic names match")
    if text and pattern:
        raise ConfigError(f"give option {TOPIC!r} or option {TOPIC_PATTERN!r}, not both")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"option {TOPIC_PATTERN!r}: {pattern!r} is not a regular expression ({e})") from None
        return (), pattern
    topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))  # type: ignore[union-attr]
    if not topics:
        raise ConfigError(f"option {TOPIC!r} names no topic: give a topic or a comma-separated list")
    for topic in topics:
        try:
            validate_topic(topic)
        except InvalidNameError as e:
            raise ConfigError(f"option {TOPIC!r}: {e}") from None
    return topics, None


def _group(given: dict[str, str], name: str) -> str | None:
    """The group option ``name`` (None when not given), checked with the brokers' group rule up front, so a
    bad name fails at the query's start rather than at its first send or heartbeat."""
    group = given.get(name) or None
    if group is not None:
        try:
            validate_group(group)
        except InvalidNameError as e:
            raise ConfigError(f"option {name!r}: {e}") from None
    return group


def _topic_json(given: dict[str, str], name: str, single: str | None, topics: tuple[str, ...],
                pattern: str | None, *, minimum: int = EARLIEST_OFFSET) -> TopicOffsets | None:
    """Option ``name``'s JSON keyed by topic (or the older form for one topic), naming only topics
    the read reads; None when not given."""
    text = given.get(name)
    if not text:
        return None
    offsets = decode_topic_offsets(text, f"option {name!r}", single, minimum=minimum)
    for topic in offsets:
        if pattern is not None and not re.fullmatch(pattern, topic):
            raise ConfigError(f"option {name!r} names topic {topic!r}, which {TOPIC_PATTERN} {pattern!r} does not "
                              f"match")
        if pattern is None and topic not in topics:
            raise ConfigError(f"option {name!r} names topic {topic!r}, which is not in option {TOPIC!r} "
                              f"({', '.join(topics)})")
    return offsets


def _sql_filter(given: dict[str, str]) -> str | None:
    """Option ``sqlFilter``: a SQL92 expression RocketMQ's brokers would accept (parsed here, so a bad one
    fails before anything is planned, with the position of the fault); None when not given."""
    text = given.get(SQL_FILTER)
    if not text:
        return None
    try:
        parse(text)
    except FilterParseError as e:
        raise ConfigError(f"option {SQL_FILTER!r}: {text!r} is not a SQL92 filter RocketMQ accepts: {e} "
                          f"(see docs/clients.md, \"SQL92 filters\", for the grammar)") from None
    return text


def _property_columns(given: dict[str, str]) -> tuple[str, ...]:
    """Option ``propertyColumns``: comma-separated property names, each one the SQL92 grammar can name (so a
    filter on it can be sent to the brokers), named once."""
    names = tuple(n.strip() for n in given.get(PROPERTY_COLUMNS, "").split(",") if n.strip())
    bad = [n for n in names if not is_property_name(n)]
    if bad:
        raise ConfigError(f"option {PROPERTY_COLUMNS!r}: {', '.join(map(repr, bad))} cannot be named in a SQL92 "
                          f"filter: give property names made of letters, digits, '_' and '$' (not starting with a "
                          f"digit, not a keyword such as AND, IN or NULL)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"option {PROPERTY_COLUMNS!r} names {', '.join(twice)} more than once: name each once")
    return names


def _duration_ms(given: dict[str, str], name: str) -> int | None:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``, ``1h``; a bare number is ms)."""
    text = given.get(name)
    if not text:
        return None
    match = _DURATION.fullmatch(text.lower())
    if match is None:
        raise ConfigError(f"option {name!r} must be a duration like 500ms, 30s, 15m or 1h, got {text!r}")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


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


def _bool(given: Mapping[str, str], name: str, default: bool) -> bool:
    text = given.get(name)
    if text is None or text == "":
        return default
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise ConfigError(f"option {name!r} must be true or false, got {text!r}")


def _offsets(given: dict[str, str], name: str, allow: tuple[str, ...], single: str | None, topics: tuple[str, ...],
             pattern: str | None) -> OffsetSpec | None:
    text = given.get(name)
    if text is None or text == "":
        return None
    if text.lower() in allow:
        return text.lower()  # type: ignore[return-value]
    if not text.startswith(("{", "[")):
        raise ConfigError(f"option {name!r} must be {', '.join(allow)} or JSON like "
                          f'{{"<topic>": {{"broker-a:0": 42}}}}, got {text!r}')
    return _topic_json(given, name, single, topics, pattern)


# -- sink: df.write / writeStream .format("spark_mq") ------------------------------------------------

PRODUCER_GROUP = "producerGroup"
BATCH_SIZE = "batchSize"
EXACTLY_ONCE = "exactlyOnce"
SINK_OPTIONS = (NAMESRV, TOPIC, PRODUCER_GROUP, BATCH_SIZE, EXACTLY_ONCE, *CONNECTION_OPTIONS)
_SINK_BY_LOWER = {name.lower(): name for name in SINK_OPTIONS}
# options Spark itself passes (or users set for Spark) on a write: accepted and ignored by the sink
_SPARK_WRITE_OPTIONS = frozenset({"checkpointlocation", "path", "queryname", *_TABLE_PROPERTIES})

DEFAULT_PRODUCER_GROUP = "spark_mq_writer"
DEFAULT_BATCH_SIZE = 1000  # messages per SEND_BATCH_MESSAGE (also capped at 4 MiB encoded)
MAX_BATCH_SIZE = 100_000


@dataclass(frozen=True)
class SinkOptions(Connected):
    """The validated options of one ``spark_mq`` write (batch or streaming)."""

    namesrv: str  # ';'-separated host:port
    topic: str | None  # every row's topic (over a `topic` column, as Kafka's); None: each row's `topic` column
    producer_group: str = DEFAULT_PRODUCER_GROUP
    batch_size: int = DEFAULT_BATCH_SIZE
    exactly_once: bool = False  # rows as half messages, committed per micro-batch (spark/exactly_once.py)
    connection: Connection = PLAIN  # the account and TLS of every client the write opens

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate Spark's write options (keys in any case); ConfigError saying what to fix."""
        if not options:
            raise ConfigError(NO_SINK_OPTIONS)
        given = _given(options, _SINK_BY_LOWER, SINK_OPTIONS, "sink", "write to", ignored=_SPARK_WRITE_OPTIONS,
                       required=(NAMESRV,))  # `topic` may come from a column: checked with the schema
        batch_size = _int(given, BATCH_SIZE, minimum=1) or DEFAULT_BATCH_SIZE
        if batch_size > MAX_BATCH_SIZE:
            raise ConfigError(f"option {BATCH_SIZE!r} must be at most {MAX_BATCH_SIZE}, got {batch_size}")
        exactly_once = _bool(given, EXACTLY_ONCE, False)
        if exactly_once and not given.get(TOPIC):
            raise ConfigError(f"option {EXACTLY_ONCE!r} needs the {TOPIC!r} option (one topic, whose first broker "
                              f"keeps the query's commit records), not a 'topic' column")
        return cls(namesrv=given[NAMESRV], topic=given.get(TOPIC) or None,
                   producer_group=_group(given, PRODUCER_GROUP) or DEFAULT_PRODUCER_GROUP, batch_size=batch_size,
                   exactly_once=exactly_once, connection=Connection.parse(given))


def _account(given: Mapping[str, str]) -> dict[str, str]:
    """``access_key``/``secret_key`` from the options, the secret from the environment when only ``accessKey`` is
    given (a catalog table's reads); both or neither (the error names no value)."""
    access = given.get(ACCESS_KEY, "")
    secret = given.get(SECRET_KEY, "") or (os.environ.get(SECRET_KEY_ENV, "") if access else "")
    if secret and not access:
        raise ConfigError(f"option {SECRET_KEY!r} is given without {ACCESS_KEY!r}: give both (an account of the "
                          f"servers' plain_acl.yml) or neither")
    if access and not secret:
        raise ConfigError(f"option {ACCESS_KEY!r} is given without {SECRET_KEY!r}: give .option({SECRET_KEY!r}, ...) "
                          f"or set {SECRET_KEY_ENV} in the driver's environment (a catalog table keeps no secret)")
    return {"access_key": access, "secret_key": secret}


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
            values = "with two values" if name == SECRET_KEY else f"as {given[name]!r} and {text!r}"
            raise ConfigError(f"option {name!r} is given twice, {values}: give it once")
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
