"""The ``spark_mq`` sink: ``df.write.format("spark_mq")`` and ``df.writeStream.format("spark_mq")``.

Rows have a ``body`` (binary or string, required) and optionally ``keys`` (string, space-separated,
or array<string>), ``tags`` (string), ``properties`` (map<string,string>) and ``queue_id`` (an
integer). Any other column, a missing ``body`` or a wrong type is refused on the driver by
:func:`validate_sink_schema` (called from ``DataSource.writer``/``streamWriter``), before any
task runs and so before any message is sent. Options: :class:`~spark_mq.spark.options.SinkOptions`.

Executors (:func:`write_rows`) group rows per target queue and send them as SEND_BATCH_MESSAGE
requests of at most ``batchSize`` messages and 4 MiB encoded (no per-row request). A row with a
non-null ``queue_id`` goes to the queue with that id (on the first broker, by name, that has it
writable); other rows go round robin over the topic's writable queues, one batch request at a
time. A failed request is retried (on the same queue for ``queue_id`` rows, on the next queue
otherwise). Each task returns a :class:`SinkCommitMessage` with its counts; the driver's
``commit`` logs the totals.

Delivery is AT-LEAST-ONCE: a message queue has no transactions, so a task that fails after some of
its batches were stored (or a request that timed out but was stored) is retried by Spark and sends
those rows again; so does a streaming micro-batch re-run after a failure before its commit.
Every message carries a fresh UNIQ_KEY (msg id) per send; consumers that need exactly-once must
deduplicate on a key of their own (e.g. put an id in ``keys`` or ``properties``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from spark_mq.arrow.queues import QueueKey, route_with_masters
from spark_mq.client.ids import uniq_key
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError, MessageValidationError, MQClientError, RemotingError, SparkMQError
from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE, MessageBatch
from spark_mq.common.perm import PERM_WRITE
from spark_mq.common.properties import (
    KEY_SEPARATOR,
    KEYS,
    TAGS,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    encode_properties_checked,
)
from spark_mq.spark.options import SinkOptions

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
SEND_ATTEMPTS = 3
RECORD_OVERHEAD = 64  # >= a record's fixed bytes in a SEND_BATCH_MESSAGE body (MIN_RECORD_SIZE)

BODY, KEYS_COL, TAGS_COL, PROPERTIES_COL, QUEUE_ID = "body", "keys", "tags", "properties", "queue_id"
_STRING_MAP = MapType(StringType(), StringType())
# column -> (allowed types, how they are spelled in errors)
SINK_COLUMNS: dict[str, tuple[tuple[DataType, ...], str]] = {
    BODY: ((BinaryType(), StringType()), "BINARY or STRING"),
    KEYS_COL: ((StringType(), ArrayType(StringType())), "STRING (space-separated keys) or ARRAY<STRING>"),
    TAGS_COL: ((StringType(),), "STRING"),
    PROPERTIES_COL: ((_STRING_MAP,), "MAP<STRING, STRING>"),
    QUEUE_ID: ((IntegerType(), ShortType(), ByteType(), LongType()), "INT (a queue id of the topic)"),
}
_ALLOWED_TEXT = ", ".join(f"{name} {spelled}" for name, (_, spelled) in SINK_COLUMNS.items()) + " (body required)"


def _same_type(a: DataType, b: DataType) -> bool:
    """Type equality ignoring nullability of array elements and map values."""
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return _same_type(a.elementType, b.elementType)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return _same_type(a.keyType, b.keyType) and _same_type(a.valueType, b.valueType)
    return type(a) is type(b)


def validate_sink_schema(schema: StructType) -> tuple[str, ...]:
    """The column names of ``schema`` if the sink can write it; ConfigError naming the column and
    what is allowed otherwise."""
    names = [f.name for f in schema.fields]
    for f in schema.fields:
        allowed = SINK_COLUMNS.get(f.name)
        if allowed is None:
            raise ConfigError(f"the spark_mq sink cannot write column {f.name!r}: the allowed columns are "
                              f"{_ALLOWED_TEXT}; select or drop columns before writing")
        types, spelled = allowed
        if not any(_same_type(f.dataType, t) for t in types):
            raise ConfigError(f"column {f.name!r} of the spark_mq sink must be {spelled}, not "
                              f"{f.dataType.simpleString().upper()}; cast it (e.g. col({f.name!r}).cast(...))")
    if len(set(names)) != len(names):
        raise ConfigError(f"the spark_mq sink got duplicate columns: {names}")
    if BODY not in names:
        raise ConfigError(f"the spark_mq sink needs a column 'body' (BINARY or STRING); got {names or 'no columns'}. "
                          f"The allowed columns are {_ALLOWED_TEXT}")
    return tuple(names)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task sent: messages, SEND_BATCH_MESSAGE requests, messages per "broker:queue"."""

    messages: int = 0
    requests: int = 0
    per_queue: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WritableQueues:
    """The topic's writable queues (sorted) and the master address of each broker."""

    topic: str
    brokers: dict[str, str]
    queues: tuple[QueueKey, ...]

    def for_queue_id(self, queue_id: int) -> QueueKey:
        for key in self.queues:
            if key[1] == queue_id:
                return key
        ids = sorted({q for _, q in self.queues})
        raise MessageValidationError(f"queue_id {queue_id} is not a writable queue of topic {self.topic} "
                                     f"(its queue ids are {ids[0]}..{ids[-1]})" if ids else
                                     f"topic {self.topic} has no writable queue")


def writable_queues(api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str) -> WritableQueues:
    """The topic's writable queues; ConfigError when the topic is unknown, no NameServer
    answers, or it has none."""
    route, brokers = route_with_masters(api, namesrv_addrs, topic)
    queues = sorted((q.broker_name, i) for q in route.queue_datas
                    if q.perm & PERM_WRITE and q.broker_name in brokers for i in range(q.write_queue_nums))
    if not queues:
        raise ConfigError(f"topic {topic!r} has no writable queue on a broker with a master online")
    return WritableQueues(topic, brokers, tuple(queues))


def _row_properties(row, columns: tuple[str, ...]) -> dict[str, str]:
    props: dict[str, str] = {}
    if PROPERTIES_COL in columns and row[PROPERTIES_COL]:
        for k, v in row[PROPERTIES_COL].items():
            if v is not None:
                props[str(k)] = str(v)
    if TAGS_COL in columns and row[TAGS_COL]:
        props[TAGS] = row[TAGS_COL]
    if KEYS_COL in columns and row[KEYS_COL]:
        keys = row[KEYS_COL]
        text = keys if isinstance(keys, str) else KEY_SEPARATOR.join(k for k in keys if k)
        if text:
            props[KEYS] = text
    props.setdefault(WAIT_STORE_MSG_OK, "true")
    return props


def _row_body(row) -> bytes:
    body = row[BODY]
    if body is None:
        raise MessageValidationError("a row has a null 'body': every message needs a body")
    body = body.encode() if isinstance(body, str) else bytes(body)
    if not body:
        raise MessageValidationError("a row has an empty 'body': a message body needs at least one byte")
    if len(body) > DEFAULT_MAX_MESSAGE_SIZE:
        raise MessageValidationError(f"a row's body is {len(body)} bytes, over the {DEFAULT_MAX_MESSAGE_SIZE} limit")
    return body


class _Sender:
    """Buffers messages per target and sends full batches; counts what was sent."""

    def __init__(self, api, opts: SinkOptions, queues: WritableQueues, start: int) -> None:
        self.api, self.opts, self.queues = api, opts, queues
        self._next = start % len(queues.queues)  # round robin position of unrouted batches
        self._buffers: dict[QueueKey | None, tuple[list[bytes], list[bytes], list[int]]] = {}
        self.result = SinkCommitMessage()

    def add(self, target: QueueKey | None, body: bytes, props: dict[str, str]) -> None:
        props[UNIQ_KEY] = uniq_key()
        encoded = encode_properties_checked(props)
        bodies, properties, size = self._buffers.setdefault(target, ([], [], [0]))
        record = RECORD_OVERHEAD + len(body) + len(encoded)
        if bodies and size[0] + record > DEFAULT_MAX_MESSAGE_SIZE:
            self._flush(target)
            bodies, properties, size = self._buffers.setdefault(target, ([], [], [0]))
        bodies.append(body)
        properties.append(encoded)
        size[0] += record
        if len(bodies) >= self.opts.batch_size:
            self._flush(target)

    def flush_all(self) -> None:
        for target in list(self._buffers):
            self._flush(target)

    def _flush(self, target: QueueKey | None) -> None:
        bodies, properties, _ = self._buffers.pop(target, ([], [], [0]))
        if bodies:
            self._send(target, bodies, properties)

    def _send(self, target: QueueKey | None, bodies: list[bytes], properties: list[bytes]) -> None:
        last_error: Exception | None = None
        for _attempt in range(SEND_ATTEMPTS):
            if target is None:
                key = self.queues.queues[self._next]
                self._next = (self._next + 1) % len(self.queues.queues)
            else:
                key = target
            batch = MessageBatch.of(self.opts.topic, key[1], bodies, properties)
            try:
                self.api.send_batch(self.queues.brokers[key[0]], batch, self.opts.producer_group,
                                    broker_name=key[0], timeout=REQUEST_TIMEOUT_S)
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq sink: batch of %d to %s:%d failed: %s", len(bodies), key[0], key[1], e)
                last_error = e
                continue
            name = f"{key[0]}:{key[1]}"
            self.result.messages += len(bodies)
            self.result.requests += 1
            self.result.per_queue[name] = self.result.per_queue.get(name, 0) + len(bodies)
            return
        raise SparkMQError(f"spark_mq sink: a batch of {len(bodies)} message(s) to topic {self.opts.topic} failed "
                           f"{SEND_ATTEMPTS} times: {last_error}") from last_error


def write_rows(opts: SinkOptions, columns: tuple[str, ...], rows: Iterable) -> SinkCommitMessage:
    """Send ``rows`` (executor side) as batch requests; the counts of what was sent."""
    ctx = TaskContext.get()
    start = ctx.partitionId() if ctx is not None else os.getpid()
    has_queue_id = QUEUE_ID in columns
    with SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S) as api:
        queues = writable_queues(api, opts.namesrv_addrs, opts.topic)
        sender = _Sender(api, opts, queues, start)
        for row in rows:
            queue_id = row[QUEUE_ID] if has_queue_id else None
            target = queues.for_queue_id(queue_id) if queue_id is not None else None
            sender.add(target, _row_body(row), _row_properties(row, columns))
        sender.flush_all()
    return sender.result


def _log_totals(kind: str, topic: str, messages: list[WriterCommitMessage | None], batch_id: int | None = None) -> None:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    total = sum(m.messages for m in done)
    requests = sum(m.requests for m in done)
    where = f" (batch {batch_id})" if batch_id is not None else ""
    log.info("spark_mq sink %s%s: %d message(s) in %d request(s) from %d task(s) to topic %s", kind, where, total,
             requests, len(done), topic)


class SparkMQWriter(DataSourceWriter):
    """Batch write; see the module doc (at-least-once on task retry)."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts, self.columns = opts, columns

    def write(self, iterator: Iterator) -> SinkCommitMessage:
        return write_rows(self.opts, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_totals("commit", self.opts.topic, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # sent messages cannot be taken back: the ones counted here stay in the topic
        _log_totals("abort (messages already sent stay in the topic)", self.opts.topic, messages)


class SparkMQStreamWriter(DataSourceStreamWriter):
    """Streaming write, one micro-batch at a time; at-least-once (a re-run micro-batch sends again)."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts, self.columns = opts, columns

    def write(self, iterator: Iterator) -> SinkCommitMessage:
        return write_rows(self.opts, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_totals("commit", self.opts.topic, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_totals("abort (messages already sent stay in the topic)", self.opts.topic, messages, batchId)


def make_writer(options, schema: StructType, overwrite: bool, *, streaming: bool):
    """Validate options and schema on the driver (before any task) and check the topic exists."""
    opts = SinkOptions.parse(options)
    columns = validate_sink_schema(schema)
    if overwrite:
        raise ConfigError("the spark_mq sink only appends (a topic cannot be overwritten): use mode('append')")
    with SyncMQClientAPI(timeout=REQUEST_TIMEOUT_S) as api:
        writable_queues(api, opts.namesrv_addrs, opts.topic)
    return (SparkMQStreamWriter if streaming else SparkMQWriter)(opts, columns)
