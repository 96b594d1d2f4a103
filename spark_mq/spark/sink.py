"""The ``spark_mq`` sink: ``df.write.format("spark_mq")`` and ``df.writeStream.format("spark_mq")``.

Rows have a ``body`` (binary or string, required) and optionally ``topic`` (string), ``keys``
(string, space-separated, or array<string>), ``tags`` (string), ``properties``
(map<string,string>) and ``queue_id`` (an integer). Other columns are ignored, as Kafka's sink
ignores columns it does not know, so a ``spark_mq`` read can be written back after a
``withColumn``. A known column of a wrong type, a missing ``body``, or neither a ``topic`` column
nor a ``topic`` option is refused on the driver by :func:`validate_sink_schema` (called from
``DataSource.writer``/``streamWriter``) before any task runs. Options:
:class:`~spark_mq.spark.options.SinkOptions`; the ``topic`` option, when given, is every row's
topic (it overrides a ``topic`` column, as Kafka's ``topic`` option does).

Executors receive Arrow batches (``DataSourceArrowWriter``): :mod:`spark_mq.spark.sink_rows` encodes
each in columns, and :class:`_Sender` groups its rows per target queue (a stable sort, so rows of
one target keep their order) and sends them as SEND_BATCH_MESSAGE requests of at most
``batchSize`` messages and 4 MiB encoded. A row's queue: its ``queue_id`` (on the first broker, by
name, that has it writable); else, with keys, the queue its first key hashes to (the rule in
:mod:`spark_mq.spark.sink_rows`: per-key order, as Kafka routes by key); else round robin over the
topic's writable queues, one request at a time. A failed request is retried (on the same queue
for routed rows, on the next queue otherwise). Each task returns a :class:`SinkCommitMessage`
with its counts; the driver's ``commit`` logs the totals.

Delivery is AT-LEAST-ONCE by default: a task that fails after some of its batches were stored (or
a request that timed out but was stored) is retried by Spark and sends those rows again; so does a
streaming micro-batch re-run after a failure before its commit. Every message carries a fresh
UNIQ_KEY (msg id) per send; consumers that need exactly-once must deduplicate on a key of their own
(e.g. put an id in ``keys`` or ``properties``). With ``exactlyOnce=true`` (streaming, ``topic``
option) the rows are sent as half messages (transactional, invisible) and each micro-batch's are
committed by the driver once: :mod:`spark_mq.spark.exactly_once`; a batch's retried requests then
stay on their queue (the broker commits a message stored twice by them once).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
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
from spark_mq.client.config import open_api
from spark_mq.client.outgoing import PreparedBatch, check_topic
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError, MessageValidationError, MQClientError, RemotingError, SparkMQError
from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE
from spark_mq.common.perm import PERM_WRITE
from spark_mq.spark.exactly_once import SinkChecker, WriterTransaction, resolve, start_writer
from spark_mq.spark.options import EXACTLY_ONCE, TOPIC, SinkOptions
from spark_mq.spark.sink_rows import (
    BODY,
    KEYS_COL,
    NO_QUEUE,
    PROPERTIES_COL,
    QUEUE_ID,
    TAGS_COL,
    TOPIC_COL,
    EncodedRows,
    encode_rows,
    key_queue_index,
)

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
SEND_ATTEMPTS = 3

_STRING_MAP = MapType(StringType(), StringType())
# column -> (allowed types, how they are spelled in errors)
SINK_COLUMNS: dict[str, tuple[tuple[DataType, ...], str]] = {
    BODY: ((BinaryType(), StringType()), "BINARY or STRING"),
    TOPIC_COL: ((StringType(),), "STRING"),
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


def validate_sink_schema(schema: StructType, topic_option: str | None) -> tuple[str, ...]:
    """The columns of ``schema`` the sink uses (others are ignored, as Kafka's sink does);
    ConfigError naming the column and what is allowed when one of them has a wrong type, when
    ``body`` is missing, or when neither a ``topic`` column nor the ``topic`` option names the topic."""
    names = [f.name for f in schema.fields]
    used = [f for f in schema.fields if f.name in SINK_COLUMNS]
    for f in used:
        types, spelled = SINK_COLUMNS[f.name]
        if not any(_same_type(f.dataType, t) for t in types):
            raise ConfigError(f"column {f.name!r} of the spark_mq sink must be {spelled}, not "
                              f"{f.dataType.simpleString().upper()}; cast it (e.g. col({f.name!r}).cast(...)) or "
                              f"rename it if it is not meant for the sink")
    columns = tuple(f.name for f in used)
    if len(set(columns)) != len(columns):
        raise ConfigError(f"the spark_mq sink got duplicate columns: {names}")
    if BODY not in columns:
        raise ConfigError(f"the spark_mq sink needs a column 'body' (BINARY or STRING); got {names or 'no columns'}. "
                          f"The columns it writes are {_ALLOWED_TEXT}")
    if topic_option is None and TOPIC_COL not in columns:
        raise ConfigError(f"the spark_mq sink needs the topic to write to: .option({TOPIC!r}, '<topic>') for every "
                          f"row, or a STRING column {TOPIC_COL!r} naming each row's topic")
    return columns


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task sent: messages, SEND_BATCH_MESSAGE requests, messages per "topic@broker:queue"."""

    messages: int = 0
    requests: int = 0
    per_queue: dict[str, int] = field(default_factory=dict)
    transaction: WriterTransaction | None = None  # with exactlyOnce: the task's half messages


@dataclass(frozen=True)
class WritableQueues:
    """The topic's writable queues (sorted by broker name, queue id) and the master address of each broker."""

    topic: str
    brokers: dict[str, str]
    queues: tuple[QueueKey, ...]

    def indexes_of(self, queue_ids: np.ndarray) -> np.ndarray:
        """The index in ``queues`` of each queue id (the first broker, by name, that has it);
        MessageValidationError naming the first id the topic has no writable queue for."""
        first: dict[int, int] = {}
        for i, (_, queue_id) in enumerate(self.queues):
            first.setdefault(queue_id, i)
        wanted, inverse = np.unique(queue_ids, return_inverse=True)
        missing = [int(q) for q in wanted if int(q) not in first]
        if missing:
            ids = sorted(first)
            raise MessageValidationError(f"queue_id {missing[0]} is not a writable queue of topic {self.topic} "
                                         f"(its queue ids are {ids[0]}..{ids[-1]})" if ids else
                                         f"topic {self.topic} has no writable queue")
        return np.array([first[int(q)] for q in wanted], dtype=np.int64)[inverse]


def writable_queues(api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str) -> WritableQueues:
    """The topic's writable queues; ConfigError when the topic is unknown, no NameServer
    answers, or it has none."""
    route, brokers = route_with_masters(api, namesrv_addrs, topic)
    queues = sorted((q.broker_name, i) for q in route.queue_datas
                    if q.perm & PERM_WRITE and q.broker_name in brokers for i in range(q.write_queue_nums))
    if not queues:
        raise ConfigError(f"topic {topic!r} has no writable queue on a broker with a master online")
    return WritableQueues(topic, brokers, tuple(queues))


def route_rows(rows: EncodedRows, selected: np.ndarray, queues: WritableQueues) -> np.ndarray:
    """The target index in ``queues.queues`` of each selected row, NO_QUEUE for round robin:
    ``queue_id`` first, then the first key's hash (:func:`~spark_mq.spark.sink_rows.key_queue_index`)."""
    queue_ids = rows.queue_ids[selected]
    targets = np.where(rows.has_key[selected], key_queue_index(rows.key_hashes[selected], len(queues.queues)),
                       NO_QUEUE)
    given = queue_ids != NO_QUEUE
    if given.any():
        targets[given] = queues.indexes_of(queue_ids[given])
    return targets


class _Sender:
    """Sends one task's rows, target by target, in requests of at most ``batchSize`` messages and
    4 MiB; counts what was sent. Looks each topic's queues up once per task. Not thread-safe."""

    def __init__(self, api: SyncMQClientAPI, opts: SinkOptions, start: int,
                 transaction: WriterTransaction | None = None) -> None:
        self.api, self.opts = api, opts
        self._start = start  # round robin position of unrouted requests, per topic
        self._next: dict[str, int] = {}
        self._queues: dict[str, WritableQueues] = {}
        self.result = SinkCommitMessage(transaction=transaction)

    def _topic_queues(self, topic: str) -> WritableQueues:
        queues = self._queues.get(topic)
        if queues is None:
            check_topic(topic)
            queues = self._queues[topic] = writable_queues(self.api, self.opts.namesrv_addrs, topic)
            self._next[topic] = self._start % len(queues.queues)
        return queues

    def send(self, rows: EncodedRows) -> None:
        """Send ``rows``: every row is routed (its topic known, its queue_id valid) before any is sent."""
        routed = []
        for code, topic in enumerate(rows.topics):
            selected = (np.arange(len(rows), dtype=np.int64) if len(rows.topics) == 1
                        else np.flatnonzero(rows.topic_codes == code))
            queues = self._topic_queues(topic)
            routed.append((queues, selected, route_rows(rows, selected, queues)))
        for queues, selected, targets in routed:
            order = np.argsort(targets, kind="stable")  # rows of one target keep their order
            sorted_targets = targets[order]
            bounds = np.flatnonzero(np.diff(sorted_targets)) + 1
            for group in np.split(order, bounds):
                target = int(targets[group[0]])
                self._send_rows(rows, queues, None if target == NO_QUEUE else queues.queues[target], selected[group])

    def _send_rows(self, rows: EncodedRows, queues: WritableQueues, target: QueueKey | None, idx: np.ndarray) -> None:
        whole = len(idx) == len(rows) and bool((idx == np.arange(len(rows))).all())
        bodies = rows.bodies if whole else rows.bodies.take(pa.array(idx))
        properties = rows.properties if whole else rows.properties.take(pa.array(idx))
        step = self.opts.batch_size
        for lo in range(0, len(idx), step):
            hi = min(lo + step, len(idx))
            chunk = PreparedBatch(queues.topic, bodies[lo:hi].to_pylist(), properties[lo:hi].to_pylist(),
                                  np.zeros(hi - lo, dtype=np.int32), rows.record_sizes[idx[lo:hi]],
                                  rows.uniq_keys[idx[lo:hi]].tolist())
            for part in chunk.split(DEFAULT_MAX_MESSAGE_SIZE):
                self._send(queues, target, part)

    def _round_robin(self, queues: WritableQueues) -> QueueKey:
        position = self._next[queues.topic]
        self._next[queues.topic] = (position + 1) % len(queues.queues)
        return queues.queues[position]

    def _send(self, queues: WritableQueues, target: QueueKey | None, batch: PreparedBatch) -> None:
        last_error: Exception | None = None
        if target is None and self.result.transaction is not None:  # a retry must not store it on another broker
            target = self._round_robin(queues)
        for _attempt in range(SEND_ATTEMPTS):
            key = self._round_robin(queues) if target is None else target
            try:
                sent = self.api.send_batch(queues.brokers[key[0]], batch.to_message_batch(key[1]),
                                           self.opts.producer_group, broker_name=key[0], timeout=REQUEST_TIMEOUT_S,
                                           msg_id=batch.msg_id)
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq sink: batch of %d to %s@%s:%d failed: %s", len(batch), queues.topic, key[0],
                            key[1], e)
                last_error = e
                continue
            if self.result.transaction is not None:
                self.result.transaction.add(key[0], sent.offset_msg_id or "", sent.queue_offset)
            name = f"{queues.topic}@{key[0]}:{key[1]}"
            self.result.messages += len(batch)
            self.result.requests += 1
            self.result.per_queue[name] = self.result.per_queue.get(name, 0) + len(batch)
            return
        raise SparkMQError(f"spark_mq sink: a batch of {len(batch)} message(s) to topic {queues.topic} failed "
                           f"{SEND_ATTEMPTS} times: {last_error}") from last_error


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    """Send Arrow ``batches`` of rows (executor side) as batch requests (as half messages of one
    writer with exactlyOnce); the counts of what was sent."""
    ctx = TaskContext.get()
    start = ctx.partitionId() if ctx is not None else os.getpid()
    transaction, extra = start_writer(opts, ctx) if opts.exactly_once else (None, b"")
    with open_api(opts.client_config, REQUEST_TIMEOUT_S) as api:
        sender = _Sender(api, opts, start, transaction)
        for batch in batches:
            if batch.num_rows:
                sender.send(encode_rows(batch, opts.topic, extra))
    return sender.result


def _log_totals(kind: str, opts: SinkOptions, messages: list[WriterCommitMessage | None],
                batch_id: int | None = None) -> None:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    total = sum(m.messages for m in done)
    requests = sum(m.requests for m in done)
    where = f" (batch {batch_id})" if batch_id is not None else ""
    topics = opts.topic or ", ".join(sorted({name.split("@")[0] for m in done for name in m.per_queue})) or "-"
    log.info("spark_mq sink %s%s: %d message(s) in %d request(s) from %d task(s) to topic(s) %s", kind, where, total,
             requests, len(done), topics)


class SparkMQWriter(DataSourceArrowWriter):
    """Batch write; see the module doc (at-least-once on task retry)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_totals("commit", self.opts, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # sent messages cannot be taken back: the ones counted here stay in the topic
        _log_totals("abort (messages already sent stay in the topic)", self.opts, messages)


class SparkMQStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write, one micro-batch at a time; at-least-once (a re-run micro-batch sends again)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            SinkChecker.ensure(self.opts)
            done = resolve(self.opts, _transactions(messages), batchId, write_decision=True)
            if done.replayed:
                log.warning("spark_mq exactly-once sink: batch %d was committed by an earlier attempt (a replay): "
                            "its rows are kept, this attempt's %d writer(s) rolled back", batchId,
                            done.rolled_back_writers)
        _log_totals("commit", self.opts, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.exactly_once:
            resolve(self.opts, _transactions(messages), batchId, write_decision=False)
            _log_totals("abort (rolled back unless an earlier attempt committed the batch)", self.opts, messages,
                        batchId)
            return
        _log_totals("abort (messages already sent stay in the topic)", self.opts, messages, batchId)


def _transactions(messages: list[WriterCommitMessage | None]) -> list[WriterTransaction]:
    return [m.transaction for m in messages if isinstance(m, SinkCommitMessage) and m.transaction is not None]


def make_writer(options, schema: StructType, overwrite: bool, *, streaming: bool):
    """Validate options and schema on the driver (before any task) and check the ``topic`` option's
    topic exists (a ``topic`` column's topics are looked up by each task)."""
    opts = SinkOptions.parse(options)
    validate_sink_schema(schema, opts.topic)
    if overwrite:
        raise ConfigError("the spark_mq sink only appends (a topic cannot be overwritten): use mode('append')")
    if opts.exactly_once and not streaming:
        raise ConfigError(f"option {EXACTLY_ONCE!r} applies to writeStream (micro-batches commit once); a batch "
                          f"write is at-least-once: drop the option")
    if opts.topic is not None:
        with open_api(opts.client_config, REQUEST_TIMEOUT_S) as api:
            writable_queues(api, opts.namesrv_addrs, opts.topic)
    if opts.exactly_once:
        SinkChecker.ensure(opts)  # the query starts: announce the group before the first commit (see SinkChecker)
    return (SparkMQStreamWriter if streaming else SparkMQWriter)(opts)
