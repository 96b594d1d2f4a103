"""Exactly-once output of the ``spark_mq`` streaming sink (``exactlyOnce=true``), over transactional
messages (``broker/transaction.py``).

Executors: each write task is a *writer* with a fresh id. It sends its rows as prepared batches
(``TRAN_MSG=true``): half messages, invisible to consumers, with ``__transactionId__`` = the
writer id, ``SPARK_MQ_QUERY`` = the streaming query's id and ``SPARK_MQ_BATCH`` = the micro-batch
id. All of a writer's half messages on one broker are one transaction there, so its commit message
(:class:`WriterTransaction`) names one half message per broker: enough to end them all.

Driver, ``commit(messages, B)``:

1. The *decision* of micro-batch ``B``: the first commit record of ``(query, B)`` in topic
   ``SPARK_MQ_SINK_COMMITS`` queue 0 on the *coordinator* (the master of the sink topic's first
   broker by name), found by its key ``<query>:<B>`` in the message index. When there is none, one
   naming this attempt's writers and their half messages is written and read back (an older record
   stored by a crashed run wins over it: the first by commitlog offset is the decision).
2. END_TRANSACTION (as a request, answered) commit for every writer the decision names, rollback for
   this attempt's other writers. A replay of ``B`` after a driver crash thus finds the decision of
   the crashed attempt: it finishes that attempt's commit and rolls its own rows back.

``abort`` does step 2 without writing a decision. Half messages of writers no commit message
reaches (a crashed driver, a failed or speculative task) are decided by check-back:
:func:`check_answer` says COMMIT if the decision of their batch names their writer, ROLLBACK if it
names others, UNKNOW while there is none (the batch may still commit); :class:`SinkChecker` answers
the broker's checks with it from the driver from the query's start on.

Why a record in a topic and not a consumer offset or a NameServer KV entry: it is stored, flushed
and replicated to slaves exactly as the rows are (same commitlog), holds the writer list in one
atomic put, and is written before any commit; consumer offsets are written to disk only every
``flushConsumerOffsetInterval`` (a broker SIGKILL loses the last ones) and hold one number, and the
NameServer's KV store is neither replicated nor shared by several NameServers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from pyspark import TaskContext

from spark_mq.arrow.queues import route_with_masters
from spark_mq.client.config import open_api
from spark_mq.client.ids import uniq_key
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.errors import MQClientError, SparkMQError
from spark_mq.common.message import Message
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.properties import (
    KEYS,
    PRODUCER_GROUP,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    encode_properties,
)
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
)
from spark_mq.spark.options import SinkOptions
from spark_mq.spark.sink_rows import BATCH_PROPERTY, QUERY_PROPERTY

log = logging.getLogger(__name__)

COMMITS_TOPIC = "SPARK_MQ_SINK_COMMITS"
# Spark's local properties of a streaming task (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY)
QUERY_ID_KEY, BATCH_ID_KEY = "sql.streaming.queryId", "streaming.sql.batchId"
REQUEST_TIMEOUT_S = 10.0
RESOLVE_DEADLINE_S = 180.0  # how long a commit keeps retrying while the brokers are unreachable
RETRY_PAUSE_S = 1.0
RECORDS_PER_LOOKUP = 32
_LOOKUP_SLACK_MS = 3_600_000  # records are looked up up to an hour past the local clock

Handle = tuple[int, int]  # (commitlog offset, half queue offset) of one half message of a writer on a broker


@dataclass
class WriterTransaction:
    """One write task's half messages: its writer id and, per broker name, one of its half messages there."""

    query_id: str
    batch_id: int
    writer: str
    handles: dict[str, Handle] = field(default_factory=dict)

    def add(self, broker_name: str, offset_msg_id: str, queue_offset: int) -> None:
        """A prepared batch was stored on ``broker_name`` (its send result's ids): the first names the writer there."""
        if broker_name not in self.handles:
            self.handles[broker_name] = (parse_offset_msg_id(offset_msg_id.split(",")[0])[1], queue_offset)


@dataclass(frozen=True)
class Decision:
    """The commit record of one micro-batch: the writers whose half messages are its output."""

    query_id: str
    batch_id: int
    writers: dict[str, dict[str, Handle]]

    def encode(self) -> bytes:
        return json.dumps({"query": self.query_id, "batch": self.batch_id, "writers": self.writers}).encode()

    @classmethod
    def decode(cls, body: bytes) -> Decision:
        doc = json.loads(body)
        writers = {w: {b: (int(h[0]), int(h[1])) for b, h in handles.items()} for w, handles in doc["writers"].items()}
        return cls(doc["query"], int(doc["batch"]), writers)


def record_key(query_id: str, batch_id: int) -> str:
    return f"{query_id}:{batch_id}"


# -- executors -----------------------------------------------------------------------------------
def start_writer(opts: SinkOptions, ctx: TaskContext | None) -> tuple[WriterTransaction, bytes]:
    """A write task's transaction and the properties every one of its messages carries; SparkMQError
    outside a streaming query (exactly-once needs its query and batch ids)."""
    query_id = ctx.getLocalProperty(QUERY_ID_KEY) if ctx is not None else None
    batch_id = ctx.getLocalProperty(BATCH_ID_KEY) if ctx is not None else None
    if not query_id or batch_id is None:
        raise SparkMQError(f"option 'exactlyOnce' needs a streaming query (writeStream): this task has no "
                           f"{QUERY_ID_KEY}/{BATCH_ID_KEY}")
    tx = WriterTransaction(query_id, int(batch_id), uuid.uuid4().hex)
    return tx, half_properties(opts.producer_group, tx)


def half_properties(group: str, tx: WriterTransaction) -> bytes:
    """The encoded properties that make a row a half message of writer ``tx``."""
    return encode_properties({TRANSACTION_PREPARED: "true", PRODUCER_GROUP: group, TRANSACTION_ID: tx.writer,
                              QUERY_PROPERTY: tx.query_id, BATCH_PROPERTY: str(tx.batch_id)})


# -- the decision ----------------------------------------------------------------------------------
def coordinator(api: SyncMQClientAPI, opts: SinkOptions) -> tuple[str, dict[str, str]]:
    """The coordinator's address (the master of the sink topic's first broker by name: the same
    broker for every run of the query while the topic's brokers stay) and every broker's master."""
    assert opts.topic is not None  # SinkOptions.parse requires it with exactlyOnce
    route, masters = route_with_masters(api, opts.namesrv_addrs, opts.topic)
    first = min(b.broker_name for b in route.broker_datas)
    if first not in masters:
        raise SparkMQError(f"the coordinator broker {first} of topic {opts.topic} has no master online: "
                           f"micro-batches cannot commit until it is back")
    return masters[first], masters


def find_decision(api: SyncMQClientAPI, addr: str, query_id: str, batch_id: int) -> Decision | None:
    """The first commit record of ``(query_id, batch_id)`` at the coordinator ``addr``, if any."""
    key = record_key(query_id, batch_id)
    now = int(time.time() * 1000)
    found = api.query_message(addr, COMMITS_TOPIC, key, RECORDS_PER_LOOKUP, 0, now + _LOOKUP_SLACK_MS,
                              timeout=REQUEST_TIMEOUT_S)
    records = [m for m in found if m.topic == COMMITS_TOPIC and m.properties.get(KEYS) == key]
    if not records:
        return None
    return Decision.decode(min(records, key=lambda m: m.physical_offset).body)


def _write_record(api: SyncMQClientAPI, addr: str, decision: Decision, group: str) -> None:
    props = encode_properties({KEYS: record_key(decision.query_id, decision.batch_id), UNIQ_KEY: uniq_key(),
                               WAIT_STORE_MSG_OK: "true"}).decode()
    header = SendMessageRequestHeader(producer_group=group, topic=COMMITS_TOPIC, default_topic=AUTO_CREATE_TOPIC,
                                      default_topic_queue_nums=1, queue_id=0, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, properties=props)
    try:
        api.send_message(addr, header, decision.encode(), timeout=REQUEST_TIMEOUT_S)
    except MQClientError as e:
        if e.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        api.create_topic(addr, COMMITS_TOPIC, 1, 1, timeout=REQUEST_TIMEOUT_S)
        api.send_message(addr, header, decision.encode(), timeout=REQUEST_TIMEOUT_S)


def decide(api: SyncMQClientAPI, addr: str, proposal: Decision, group: str) -> Decision:
    """The decision of the proposal's micro-batch: an existing one, else the proposal once written and
    visible in the index (or an older record that became visible meanwhile)."""
    decision = find_decision(api, addr, proposal.query_id, proposal.batch_id)
    if decision is not None:
        return decision
    _write_record(api, addr, proposal, group)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while (decision := find_decision(api, addr, proposal.query_id, proposal.batch_id)) is None:
        if time.monotonic() > deadline:
            raise SparkMQError(f"the commit record of batch {proposal.batch_id} was stored at {addr} but is not "
                               f"found by key: exactly-once needs the broker's message index (messageIndexEnable)")
        time.sleep(0.05)
    return decision


def check_answer(decision: Decision | None, writer: str) -> LocalTransactionState:
    """The state of a half message of ``writer`` given its micro-batch's decision."""
    if decision is None:
        return LocalTransactionState.UNKNOW
    return LocalTransactionState.COMMIT_MESSAGE if writer in decision.writers else \
        LocalTransactionState.ROLLBACK_MESSAGE


# -- the driver ------------------------------------------------------------------------------------
@dataclass
class Resolution:
    """What one commit or abort did."""

    committed_writers: int = 0
    rolled_back_writers: int = 0
    replayed: bool = False  # the micro-batch had been decided by an earlier attempt


def _end(api: SyncMQClientAPI, masters: dict[str, str], group: str, writer: str, broker: str, handle: Handle,
         state: int) -> str:
    addr = masters.get(broker)
    if addr is None:
        raise SparkMQError(f"broker {broker} holding half messages of writer {writer} has no master online")
    header = EndTransactionRequestHeader(producer_group=group, tran_state_table_offset=handle[1],
                                         commit_log_offset=handle[0], commit_or_rollback=state,
                                         from_transaction_check=False, msg_id="", transaction_id=writer)
    return api.end_transaction_confirmed(addr, header, timeout=REQUEST_TIMEOUT_S)


def _resolve_once(api: SyncMQClientAPI, opts: SinkOptions, mine: list[WriterTransaction], batch_id: int,
                  write_decision: bool) -> Resolution:
    addr, masters = coordinator(api, opts)
    query_id = mine[0].query_id
    decision = find_decision(api, addr, query_id, batch_id)
    if decision is None and write_decision:
        proposal = Decision(query_id, batch_id, {tx.writer: dict(tx.handles) for tx in mine})
        decision = decide(api, addr, proposal, opts.producer_group)
    winners = decision.writers if decision is not None else {}
    out = Resolution(replayed=decision is not None and any(tx.writer not in winners for tx in mine))
    for writer, handles in winners.items():
        for broker, handle in handles.items():
            _end(api, masters, opts.producer_group, writer, broker, handle, TRANSACTION_COMMIT_TYPE)
        out.committed_writers += 1
    for tx in mine:
        if tx.writer not in winners:
            for broker, handle in tx.handles.items():
                _end(api, masters, opts.producer_group, tx.writer, broker, handle, TRANSACTION_ROLLBACK_TYPE)
            out.rolled_back_writers += 1
    return out


def resolve(opts: SinkOptions, mine: list[WriterTransaction], batch_id: int, *, write_decision: bool) -> Resolution:
    """Commit (``write_decision``) or abort micro-batch ``batch_id`` whose tasks returned ``mine``,
    retrying while brokers are unreachable (every step is idempotent); SparkMQError past
    RESOLVE_DEADLINE_S (the query fails; its restart replays the batch and finishes the job)."""
    mine = [tx for tx in mine if tx.handles]
    if not mine:
        return Resolution()
    deadline = time.monotonic() + RESOLVE_DEADLINE_S
    with open_api(opts.client_config, REQUEST_TIMEOUT_S) as api:
        while True:
            try:
                return _resolve_once(api, opts, mine, batch_id, write_decision)
            except SparkMQError as e:  # unreachable or refusing brokers, no NameServer, no master
                if time.monotonic() > deadline:
                    raise SparkMQError(f"spark_mq exactly-once sink: batch {batch_id} not resolved within "
                                       f"{RESOLVE_DEADLINE_S:.0f} s: {e}") from e
                log.warning("spark_mq exactly-once sink: batch %d: %s; retrying", batch_id, e)
                time.sleep(RETRY_PAUSE_S)


# -- check-back ------------------------------------------------------------------------------------
class SinkChecker:
    """Answers the brokers' checks about the sink's half messages from the commit records, as a
    producer of the sink's group: one per (NameServer, group, topic) in a driver process, kept for the
    process's life (daemon threads). Started when Spark plans the sink at the query's start (the
    process that plans it lives on until the commits begin) and again by the commit process at its
    first commit: a restarted query's leftover half messages are checked during Spark's start-up,
    and every round with no producer of the group connected counts toward ``transactionCheckMax``.
    Thread-safe."""

    _started: dict[tuple[str, str, str], SinkChecker] = {}
    _lock = threading.Lock()

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.producer = SyncTransactionProducer(opts.producer_group, opts.client_config, _no_local_transaction,
                                                self.answer)

    @classmethod
    def ensure(cls, opts: SinkOptions) -> None:
        """Start the checker of ``opts``'s group in this process unless it runs; failures are logged
        (the commit does not depend on it)."""
        key = (opts.namesrv, opts.producer_group, opts.topic or "")
        with cls._lock:
            if key in cls._started:
                return
            try:
                checker = cls(opts)
                checker.producer.start()
                checker.producer.publish_queues(opts.topic or "")  # heartbeats go to the topic's brokers
            except SparkMQError as e:
                log.warning("spark_mq exactly-once sink: check-back answerer not started (%s): unresolved half "
                            "messages wait for a replay or are discarded after transactionCheckMax", e)
                return
            cls._started[key] = checker

    @classmethod
    def stop_all(cls) -> None:
        """Stop every checker of this process (a driver that ends its queries)."""
        with cls._lock:
            checkers, cls._started = list(cls._started.values()), {}
        for checker in checkers:
            checker.producer.shutdown()

    def answer(self, msg: StoredMessage) -> LocalTransactionState:
        query_id, batch = msg.properties.get(QUERY_PROPERTY), msg.properties.get(BATCH_PROPERTY, "")
        writer = msg.properties.get(TRANSACTION_ID, "")
        if not query_id or not batch.isdigit():
            return LocalTransactionState.UNKNOW  # not the sink's: another producer of the group decides
        with open_api(self.opts.client_config, REQUEST_TIMEOUT_S) as api:
            addr, _ = coordinator(api, self.opts)
            state = check_answer(find_decision(api, addr, query_id, int(batch)), writer)
        log.info("spark_mq exactly-once sink: check-back of writer %s (batch %s): %s", writer, batch, state.name)
        return state


def _no_local_transaction(msg: Message, arg: object) -> LocalTransactionState:
    raise SparkMQError("the sink's checker runs no local transactions")

