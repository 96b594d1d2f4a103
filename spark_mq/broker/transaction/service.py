"""Transactional messages (RocketMQ's ``broker/transaction``): half messages, END_TRANSACTION and
the check-back of unresolved ones.

A prepared send (``TRAN_MSG=true``) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real
topic and queue in the properties ``REAL_TOPIC``/``REAL_QID``: consumers of the real topic never
see it. A transaction is the half messages with the same ``__transactionId__`` (else each message
is its own, by UNIQ_KEY): a prepared batch (every message ``TRAN_MSG=true``, e.g. the Spark sink's)
whose messages share one is decided as a whole. END_TRANSACTION about any of its messages commits
(copies go to the real topics without the transaction properties, one batch put per queue, a
message stored twice by a retried send committed once) or rolls back; either way an op record, the
half message's queue offset as its body and tag ``d``, goes to ``RMQ_SYS_TRANS_OP_HALF_TOPIC``.
The op queue is the durable state: at start it is read back in bulk, so a restart knows every
resolved half message.

Every ``transactionCheckInterval`` the half queue is scanned in bulk from the first unresolved
message. One older than ``transactionTimeOut`` (or its own ``CHECK_IMMUNITY_TIME_IN_SECONDS``)
is renewed, as RocketMQ does: a copy with ``TRANSACTION_CHECK_TIMES`` + 1 is appended to the half
queue, the old one gets an op record, and CHECK_TRANSACTION_STATE about the copy goes to a live
producer of the group (known from heartbeats). Past ``transactionCheckMax`` checks a half message
is discarded: logged, counted, kept in ``TRANS_CHECK_MAX_TIME_TOPIC`` for inspection.

Exactly one outcome per transaction: END_TRANSACTION about a renewed (or, after a restart, any
resolved) copy goes to the live copies of its transaction, and a decision marks every live copy of
the transaction resolved, so neither a late answer nor a copy left by a crash between a renewal's
two writes is committed twice; a crash between a commit's appends (the real messages, then the op
records) is found at start: committed copies (``TRAN_PREPARED_QUEUE_OFFSET``, found by UNIQ_KEY in
the message index) form a prefix of the commit's order, so a binary search finds it, the rest is
committed and the transaction resolved without a check. A check round asks once per transaction.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.common.errors import BatchBodyError, HeaderError, MessageValidationError, StoreNotWritableError
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import (
    CHECK_IMMUNITY_TIME,
    NAME_VALUE_SEPARATOR,
    PRODUCER_GROUP,
    PROPERTY_SEPARATOR,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TAGS,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    UNIQ_KEY,
    decode_properties,
    encode_properties,
)
from spark_mq.common.unit.decode import StoredMessage, decode_message, decode_messages
from spark_mq.common.unit.encode import encode_batch
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    transaction_type,
)
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
HALF_QUEUE_ID = 0
REMOVE_TAG = "d"  # RocketMQ's TransactionalMessageUtil.REMOVETAG
ALREADY_RESOLVED = "already resolved"  # END_TRANSACTION's remark when its transaction was decided before
SCAN_BATCH = 1024  # units read per bulk read of the half or op queue
MAX_ROUND_UNITS = 64 * SCAN_BATCH  # half messages one check round looks at (the rest wait for the next)
_REMOVE_PROPS = encode_properties({TAGS: REMOVE_TAG})
_PREPARED_NAME = f"{TRANSACTION_PREPARED}\x01"
_PREPARED_NEEDLE = _PREPARED_NAME.encode()
_GROUP_NAME = f"{PRODUCER_GROUP}{NAME_VALUE_SEPARATOR}".encode()
# the properties a committed (or discarded) copy drops: it is an ordinary message again
_HALF_ONLY = (TRANSACTION_PREPARED, REAL_TOPIC, REAL_QUEUE_ID, TRANSACTION_CHECK_TIMES)

# group -> the connections of its live producers (the broker's ClientRegistry)
Producers = Callable[[str], list[Connection]]
# (topic, queue id, next queue offset) of a stored message: the broker wakes held pulls with it
Stored = Callable[[str, int, int], None]


def _prepared_property(properties: bytes) -> bool:
    """Whether an encoded property string says TRAN_MSG=true (Java's ``Boolean.parseBoolean``)."""
    return (_PREPARED_NEEDLE in properties
            and decode_properties(properties).get(TRANSACTION_PREPARED, "").lower() == "true")


def is_prepared_transaction(sys_flag: int, batch: MessageBatch, joined_properties: bytes) -> bool:
    """Whether a send carries prepared transactional messages (in its sysFlag, or as TRAN_MSG=true in
    the properties of the message or of every message of a batch). ``joined_properties`` is the
    batch's property strings back to back: the send path joins them once for every property it
    looks for, and an ordinary send costs one C-level scan of them here. Raises
    MessageValidationError for a batch that mixes prepared and ordinary messages.
    """
    if transaction_type(sys_flag) == TRANSACTION_PREPARED_TYPE:
        return True
    if _PREPARED_NEEDLE not in joined_properties:
        return False
    prepared = sum(1 for p in batch.properties if _PREPARED_NEEDLE in p and _prepared_property(p))
    if 0 < prepared < len(batch):
        raise MessageValidationError(f"a batch mixes {prepared} transactional (TRAN_MSG=true) message(s) with "
                                     f"{len(batch) - prepared} ordinary one(s): send them in separate batches")
    return prepared > 0


def transaction_key(properties: dict[str, str], queue_offset: int) -> str:
    """The transaction of a half message: its ``__transactionId__`` (shared by a prepared batch's
    messages), else its UNIQ_KEY (a message of its own)."""
    return properties.get(TRANSACTION_ID) or properties.get(UNIQ_KEY) or f"half:{queue_offset}"


def _appended(properties: bytes, tail: bytes) -> bytes:
    """An encoded property string with ``tail`` (encoded pairs) after it; later pairs win on decode."""
    if properties and not properties.endswith(PROPERTY_SEPARATOR.encode()):
        properties += PROPERTY_SEPARATOR.encode()
    return properties + tail


def _names_group(properties: bytes) -> bool:
    return properties.startswith(_GROUP_NAME) or PROPERTY_SEPARATOR.encode() + _GROUP_NAME in properties


def _check_times(m: StoredMessage) -> int:
    times = m.properties.get(TRANSACTION_CHECK_TIMES, "")
    return int(times) if times.isdigit() else 0


@dataclass(frozen=True)
class TransactionConfig:
    """The broker keys the service runs on (ms, as RocketMQ's)."""

    time_out_ms: int = 6000
    check_interval_ms: int = 60_000
    check_max: int = 15


class TransactionalMessageService:
    """Half messages, their resolution and their check-back, with op records as the durable state."""

    def __init__(self, store: MessageStore, producers: Producers, metrics: BrokerMetrics, broker_name: str,
                 config: TransactionConfig, on_stored: Stored, ensure_topic: Callable[[str], None],
                 clock: Callable[[], float] = time.time) -> None:
        """``ensure_topic(name)``: create the broker-written topic ``name`` if it does not exist."""
        self.store = store
        self.producers = producers
        self.metrics = metrics
        self.broker_name = broker_name
        self.config = config
        self.on_stored = on_stored
        self.ensure_topic = ensure_topic
        self.clock = clock
        self.progress = 0  # half queue offset below which every half message is resolved
        self.done: set[int] = set()  # resolved half queue offsets at or past ``progress``
        self.live: dict[int, str] = {}  # unresolved half queue offset -> its transaction (UNIQ_KEY)
        self.by_key: dict[str, set[int]] = {}  # transaction -> its unresolved half queue offsets

    # -- start-up --------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the op queue and the half queue back (in bulk): which half messages are resolved,
        which are live."""
        for body in self._bodies(OP_HALF_TOPIC, self.store.get_min_offset(OP_HALF_TOPIC, HALF_QUEUE_ID)):
            for part in body.split(b","):
                if part.strip().isdigit():
                    self.done.add(int(part))
        self.progress = self.store.get_min_offset(HALF_TOPIC, HALF_QUEUE_ID)
        self.done = {o for o in self.done if o >= self.progress}  # ops about half messages retention deleted
        self._advance()
        offset = self.progress
        live: dict[str, list[StoredMessage]] = {}
        while offset < self.store.get_max_offset(HALF_TOPIC, HALF_QUEUE_ID):
            msgs, offset = self._read(HALF_TOPIC, offset)
            if not msgs:
                break
            for m in msgs:
                if m.queue_offset not in self.done:
                    key = transaction_key(m.properties, m.queue_offset)
                    self._track(m.queue_offset, key)
                    live.setdefault(key, []).append(m)
        committed = 0
        for key, msgs in live.items():
            order = _commit_order(msgs)
            done = self._committed_prefix(order)
            if done:  # the decision was commit: the rest of it too
                self._commit(order[done:])
                self._resolved(sorted(self.by_key.get(key, ())))
                committed += 1
        if committed:
            log.info("transactions: %d committed before a crash lost their op record: resolved now", committed)
        if self.live:
            log.info("transactions: %d half messages unresolved from before the restart", len(self.live))

    def _committed_prefix(self, order: list[StoredMessage]) -> int:
        """How many of a transaction's messages, in commit order, a commit cut short by a crash stored
        (a prefix: the puts go in that order): a binary search with one index lookup per step."""
        if not order or not self._committed_before(order[0]):
            return 0
        lo, hi = 1, len(order)  # order[:lo] committed; order[hi:] not (hi == len: unknown past the end)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._committed_before(order[mid]):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _committed_before(self, m: StoredMessage) -> bool:
        """Whether the real topic holds the committed copy of half message ``m`` (a crash between a
        commit's two appends): found by its UNIQ_KEY in the message index."""
        key = m.properties.get(UNIQ_KEY)
        if not key or self.store.index is None:
            return False
        units = self.store.query_by_key(m.properties.get(REAL_TOPIC, ""), key, 4, m.born_timestamp)
        return any(TRANSACTION_PREPARED_QUEUE_OFFSET in decode_message(u).properties for u in units)

    def _read(self, topic: str, offset: int) -> tuple[list[StoredMessage], int]:
        """Up to SCAN_BATCH units of ``topic`` from ``offset`` (one bulk read), and where to go on."""
        r = self.store.get_messages(topic, HALF_QUEUE_ID, offset, SCAN_BATCH)
        if r.status == GetStatus.OFFSET_TOO_SMALL:
            r = self.store.get_messages(topic, HALF_QUEUE_ID, r.next_begin_offset, SCAN_BATCH)
        if r.status != GetStatus.FOUND:
            return [], max(offset, r.next_begin_offset)
        return decode_messages(r.data, r.unit_starts().tolist()), r.next_begin_offset

    def _bodies(self, topic: str, offset: int) -> list[bytes]:
        out: list[bytes] = []
        while offset < self.store.get_max_offset(topic, HALF_QUEUE_ID):
            msgs, nxt = self._read(topic, offset)
            out.extend(m.body for m in msgs)
            if nxt <= offset:
                break
            offset = nxt
        return out

    # -- bookkeeping -----------------------------------------------------------------------------
    def _track(self, offset: int, key: str) -> None:
        self.live[offset] = key
        self.by_key.setdefault(key, set()).add(offset)

    def _resolved(self, offsets: list[int]) -> None:
        """Mark half queue offsets resolved: one op record batch, then the bookkeeping."""
        if not offsets:
            return
        self.ensure_topic(OP_HALF_TOPIC)
        batch = MessageBatch.of(OP_HALF_TOPIC, HALF_QUEUE_ID, [str(o).encode() for o in offsets],
                                [_REMOVE_PROPS] * len(offsets))
        self.store.put_messages(batch, wait_flush=False)
        for o in offsets:
            self._forget(o)
        self._advance()

    def _forget(self, offset: int) -> None:
        """The half message at ``offset`` is done (resolved, renewed, discarded or deleted)."""
        self.done.add(offset)
        key = self.live.pop(offset, None)
        copies = self.by_key.get(key) if key is not None else None
        if copies is not None:
            copies.discard(offset)
            if not copies:
                del self.by_key[key]

    def _advance(self) -> None:
        while self.progress in self.done:
            self.done.discard(self.progress)
            self.progress += 1

    def _live_copy(self, msg: StoredMessage) -> int | None:
        """An unresolved half message of ``msg``'s transaction (itself, or the newest live copy)."""
        if msg.queue_offset in self.live:
            return msg.queue_offset
        copies = self.by_key.get(transaction_key(msg.properties, msg.queue_offset))
        return max(copies) if copies else None

    def _messages_at(self, offsets: list[int]) -> list[StoredMessage]:
        """The half messages at sorted ``offsets`` (bulk reads over their range)."""
        wanted, out = set(offsets), []
        offset = offsets[0]
        while offset <= offsets[-1]:
            msgs, nxt = self._read(HALF_TOPIC, offset)
            out.extend(m for m in msgs if m.queue_offset in wanted)
            if nxt <= offset:
                break
            offset = nxt
        return out

    # -- the send path ---------------------------------------------------------------------------
    def half_batch(self, batch: MessageBatch, producer_group: str) -> MessageBatch:
        """The half messages of a prepared batch (RocketMQ's ``parseHalfMessageInner`` for each): the
        real topic and queue, and the producer group unless a message names its own, appended to the
        encoded properties (no decoding)."""
        self.ensure_topic(HALF_TOPIC)  # as RocketMQ, the system topics have configs (tools list them)
        real = encode_properties({REAL_TOPIC: batch.topic, REAL_QUEUE_ID: str(batch.queue_id)})
        with_group = real + encode_properties({PRODUCER_GROUP: producer_group})
        props = [_appended(p, real if _names_group(p) else with_group) for p in batch.properties]
        half = MessageBatch.of(HALF_TOPIC, HALF_QUEUE_ID, batch.bodies, props, born_host=batch.born_host)
        half.born_timestamps[:] = batch.born_timestamps
        half.flags[:] = batch.flags
        half.sys_flags[:] = (batch.sys_flags & ~TRANSACTION_ROLLBACK_TYPE) | TRANSACTION_NOT_TYPE
        half.reconsume_times[:] = batch.reconsume_times
        return half

    def stored_half(self, queue_offset: int, batch: MessageBatch) -> None:
        """The half messages of ``batch`` were stored from ``queue_offset`` on."""
        for i, props in enumerate(batch.properties):
            self._track(queue_offset + i, transaction_key(decode_properties(props), queue_offset + i))
        self.metrics.transaction("half", len(batch))

    # -- END_TRANSACTION -------------------------------------------------------------------------
    def end(self, h: EndTransactionRequestHeader) -> tuple[int, str]:
        """Apply a producer's decision; returns (response code, remark)."""
        state = transaction_type(h.commit_or_rollback)
        if state in (TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE):  # "unknown": the check decides
            return ResponseCode.SUCCESS, ""
        unit = self.store.look_message_by_offset(h.commit_log_offset)
        if unit is None:
            return ResponseCode.SYSTEM_ERROR, f"find prepared transaction message failed: offset {h.commit_log_offset}"
        msg = decode_message(unit)
        if msg.topic != HALF_TOPIC or msg.queue_offset != h.tran_state_table_offset:
            return ResponseCode.SYSTEM_ERROR, (f"commitlog offset {h.commit_log_offset} is not the half message at "
                                               f"queue offset {h.tran_state_table_offset}")
        group = msg.properties.get(PRODUCER_GROUP)
        if group is not None and group != h.producer_group:
            return ResponseCode.SYSTEM_ERROR, f"the producer group wrong: {h.producer_group}, the message's is {group}"
        live = self._live_copy(msg)
        if live is None:
            log.debug("END_TRANSACTION for half offset %d ignored: already resolved", msg.queue_offset)
            return ResponseCode.SUCCESS, ALREADY_RESOLVED
        offsets = sorted(self.by_key.get(self.live[live], {live}))
        if state == TRANSACTION_COMMIT_TYPE:
            named = msg.properties.get(UNIQ_KEY)  # its committed copy names the offset END named, as RocketMQ's
            self._commit([msg if named and m.properties.get(UNIQ_KEY) == named else m
                          for m in _commit_order(self._messages_at(offsets))])
        self._resolved(offsets)
        self.metrics.transaction("commit" if state == TRANSACTION_COMMIT_TYPE else "rollback")
        return ResponseCode.SUCCESS, ""

    def _commit(self, order: list[StoredMessage]) -> None:
        """Store the committed copies of ``order`` (a :func:`_commit_order` or its suffix) in their real
        queues, in that order: one put per run of a queue, at most SCAN_BATCH messages each."""
        for put in _puts(order):
            topic, queue_id = _real_queue(put[0])
            result = self.store.put_messages(_real_batch(put, topic, queue_id), wait_flush=False)
            self.on_stored(topic, queue_id, result.queue_offset + len(put))

    # -- check-back ------------------------------------------------------------------------------
    def check(self, now_ms: int | None = None) -> int:
        """One check round: renew and check every half message past its timeout, discard those
        past ``check_max``; returns how many checks were sent."""
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        self._drop_expired()
        end = self.store.get_max_offset(HALF_TOPIC, HALF_QUEUE_ID)  # renewed copies wait for the next round
        end = min(end, self.progress + MAX_ROUND_UNITS)  # the loop serves requests between rounds
        offset, sent = self.progress, 0
        while offset < end and self.live:
            msgs, nxt = self._read(HALF_TOPIC, offset)
            if not msgs:
                break
            due = [m for m in msgs if m.queue_offset < end and m.queue_offset in self.live]
            stop = next((i for i, m in enumerate(due) if not self._timed_out(m, now)), len(due))
            sent += self._check_due(due[:stop], now)
            if stop < len(due) or nxt <= offset:
                break
            offset = nxt
        return sent

    def _drop_expired(self) -> None:
        """Forget half messages retention deleted before anyone resolved them (they can no longer be
        committed), and start scanning at the queue's first message."""
        low = self.store.get_min_offset(HALF_TOPIC, HALF_QUEUE_ID)
        if self.progress >= low:
            return
        gone = [o for o in self.live if o < low]
        if gone:
            log.warning("transactions: %d unresolved half messages were deleted by retention (fileReservedTime) "
                        "before an outcome: they are lost", len(gone))
            for o in gone:
                self._forget(o)
        self.done = {o for o in self.done if o >= low}
        self.progress = low
        self._advance()

    def _timed_out(self, m: StoredMessage, now: int) -> bool:
        immunity = m.properties.get(CHECK_IMMUNITY_TIME, "")
        timeout = int(immunity) * 1000 if immunity.isdigit() else self.config.time_out_ms
        return now - m.born_timestamp >= timeout

    def _check_due(self, due: list[StoredMessage], now: int) -> int:
        """Renew ``due`` in one half-queue append (discarding those past ``check_max``), resolve the
        originals in one op batch, then send the checks."""
        if not due:
            return 0
        renew: list[StoredMessage] = []
        for m in due:
            if _check_times(m) < self.config.check_max:
                renew.append(m)
            else:
                self._discard(m)
        copies: list[StoredMessage] = []  # one per transaction: a batch's is asked about once
        if renew:
            batch = self._renewal(renew)
            result = self.store.put_messages(batch, wait_flush=False)
            asked: set[str] = set()
            for i, m in enumerate(renew):
                new_offset = result.queue_offset + i
                key = self.live[m.queue_offset]
                self._track(new_offset, key)
                if key in asked:
                    continue
                asked.add(key)
                props = {**m.properties, TRANSACTION_CHECK_TIMES: str(_check_times(m) + 1)}
                copies.append(StoredMessage(HALF_TOPIC, HALF_QUEUE_ID, new_offset, int(result.physical_offsets[i]),
                                            m.body, props, m.flag, m.sys_flag, m.body_crc, m.born_timestamp,
                                            m.born_host, result.store_timestamp, result.store_host,
                                            m.reconsume_times))
        self._resolved([m.queue_offset for m in due])
        for copy in copies:
            self._send_check(copy)
        return len(copies)

    def _renewal(self, msgs: list[StoredMessage]) -> MessageBatch:
        props = [encode_properties({**m.properties, TRANSACTION_CHECK_TIMES: str(_check_times(m) + 1)}) for m in msgs]
        batch = MessageBatch.of(HALF_TOPIC, HALF_QUEUE_ID, [m.body for m in msgs], props, born_host=msgs[0].born_host)
        batch.born_timestamps[:] = [m.born_timestamp for m in msgs]
        batch.flags[:] = [m.flag for m in msgs]
        batch.sys_flags[:] = [m.sys_flag for m in msgs]
        batch.reconsume_times[:] = [m.reconsume_times for m in msgs]
        return batch

    def _discard(self, m: StoredMessage) -> None:
        """Past ``check_max``: kept in TRANS_CHECK_MAX_TIME_TOPIC for an operator, counted, logged."""
        topic = m.properties.get(REAL_TOPIC, "?")
        log.warning("transaction %s (half offset %d, topic %s, group %s) discarded: no outcome after %d checks",
                    m.properties.get(UNIQ_KEY), m.queue_offset, topic, m.properties.get(PRODUCER_GROUP),
                    self.config.check_max)
        self.ensure_topic(CHECK_MAX_TIME_TOPIC)
        try:
            self.store.put_messages(_real_batch([m], CHECK_MAX_TIME_TOPIC, 0), wait_flush=False)
        except MessageValidationError as e:
            log.error("discarded transaction %s not kept: %s", m.properties.get(UNIQ_KEY), e)
        self.metrics.transaction("discarded")

    def _send_check(self, m: StoredMessage) -> None:
        group = m.properties.get(PRODUCER_GROUP, "")
        conns = [c for c in self.producers(group) if not c.closed]
        self.metrics.transaction("check")
        if not conns:
            log.warning("transaction check of %s (group %s) not sent: no producer of the group is connected",
                        m.properties.get(UNIQ_KEY), group)
            return
        topic = m.properties.get(REAL_TOPIC, "")
        queue_id = int(m.properties.get(REAL_QUEUE_ID, "0") or 0)
        real = MessageBatch.of(topic, queue_id, [m.body], [encode_properties(m.properties)],
                               born_timestamp=m.born_timestamp, born_host=m.born_host)
        real.flags[:] = m.flag
        real.sys_flags[:] = m.sys_flag
        body = encode_batch(real, m.physical_offset, m.queue_offset, m.store_timestamp, m.store_host).data
        key = m.properties.get(UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=m.queue_offset, commit_log_offset=m.physical_offset, msg_id=key,
            transaction_id=key, offset_msg_id=offset_msg_id(m.store_host, m.physical_offset), topic=topic,
            broker_name=self.broker_name)
        conn = random.choice(conns)
        try:
            conn.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(),
                                                     body))
        except Exception as e:  # the connection closed under us: the next round asks again
            log.info("transaction check of %s to %s failed: %s", key, conn.peer, e)

    async def run(self) -> None:
        """A check round every ``check_interval_ms`` until cancelled."""
        while True:
            await asyncio.sleep(self.config.check_interval_ms / 1000)
            if not self.live:
                continue
            try:
                self.check()
            except StoreNotWritableError as e:
                log.warning("transaction check round postponed: %s", e)
            except Exception:  # retried next round; the broker keeps serving
                log.exception("transaction check round failed")


def _real_queue(m: StoredMessage) -> tuple[str, int]:
    return m.properties.get(REAL_TOPIC, ""), int(m.properties.get(REAL_QUEUE_ID, "0") or 0)


def _commit_order(msgs: list[StoredMessage]) -> list[StoredMessage]:
    """The order a transaction's half messages are committed in: one message per UNIQ_KEY (a send
    retried after a lost answer stored it twice), grouped by real queue in order of first appearance.
    A function of the set of live half messages, so a restart recomputes it."""
    seen: set[str] = set()
    by_queue: dict[tuple[str, int], list[StoredMessage]] = {}
    for m in sorted(msgs, key=lambda m: m.queue_offset):
        uniq = m.properties.get(UNIQ_KEY) or f"half:{m.queue_offset}"
        if uniq not in seen:
            seen.add(uniq)
            by_queue.setdefault(_real_queue(m), []).append(m)
    return [m for queue in by_queue.values() for m in queue]


def _puts(order: list[StoredMessage]) -> list[list[StoredMessage]]:
    """``order`` cut into runs of one real queue, at most SCAN_BATCH messages each."""
    puts: list[list[StoredMessage]] = []
    for m in order:
        if not puts or len(puts[-1]) == SCAN_BATCH or _real_queue(puts[-1][0]) != _real_queue(m):
            puts.append([])
        puts[-1].append(m)
    return puts


def _real_batch(msgs: list[StoredMessage], topic: str, queue_id: int) -> MessageBatch:
    """The committed (or discarded) copies of ``msgs``: ordinary messages of ``topic`` again."""
    # the stored names and values are valid: joined without encode_properties' per-character checks
    props = ["".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in m.properties.items()
                     if k not in _HALF_ONLY).encode()
             + f"{TRANSACTION_PREPARED_QUEUE_OFFSET}{NAME_VALUE_SEPARATOR}{m.queue_offset}{PROPERTY_SEPARATOR}".encode()
             for m in msgs]
    batch = MessageBatch.of(topic, queue_id, [m.body for m in msgs], props, born_host=msgs[0].born_host)
    batch.born_timestamps[:] = [m.born_timestamp for m in msgs]
    batch.flags[:] = [m.flag for m in msgs]
    batch.sys_flags[:] = [(m.sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | TRANSACTION_COMMIT_TYPE for m in msgs]
    batch.reconsume_times[:] = [m.reconsume_times for m in msgs]
    return batch


class EndTransactionProcessor:
    """Serves END_TRANSACTION (sent oneway by producers; answered when asked)."""

    def __init__(self, service: TransactionalMessageService, refusal: Callable[[], str | None]) -> None:
        self.service = service
        self.refusal = refusal

    def register_on(self, server) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)

    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        refusal = self.refusal()
        if refusal is not None:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        try:
            h = EndTransactionRequestHeader.from_ext_fields(cmd.ext_fields)
        except HeaderError as e:
            log.warning("END_TRANSACTION from %s refused: %s", conn.peer, e)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        try:
            code, remark = self.service.end(h)
        except StoreNotWritableError as e:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        except (MessageValidationError, BatchBodyError) as e:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if code != ResponseCode.SUCCESS:
            log.warning("END_TRANSACTION from %s (group %s) refused: %s", conn.peer, h.producer_group, remark)
        return cmd.make_response(code, remark or None)

