"""Transactional messages (RocketMQ's ``TransactionalMessageServiceImpl``): which half messages
are live, their resolution, and the rounds of check-backs.

The send path stores half messages (``half_messages.py``) and tells :meth:`stored_half`.
END_TRANSACTION (``end_transaction.py``) about any message of a transaction commits (copies go to
the real topics without the transaction properties, ``commit.py``) or rolls back; either way an op
record, the half message's queue offset as its body and tag ``d``, goes to
``RMQ_SYS_TRANS_OP_HALF_TOPIC``. The op queue is the durable state: at start it is read back in
bulk, so a restart knows every resolved half message.

Every ``transactionCheckInterval`` the half queue is scanned in bulk from the first unresolved
message; those past their timeout are renewed and checked, or discarded past
``transactionCheckMax`` (``check_back.py``).

Who is asked: a producer that announced the group (HEART_BEAT), else a still open connection that
sent one of the group's half messages. The second closes a gap RocketMQ leaves: a client announces
a producer group only in its periodic heartbeat (a Java 4.x client every 30 s, a Spark driver not
before it commits), and until then every round found "no producer of the group is connected" and
counted toward ``transactionCheckMax``, which with a short check interval discards a live
producer's transaction unasked.

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

from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.transaction.check_back import (
    CHECK_MAX_TIME_TOPIC,
    CheckBackSender,
    check_times,
    message_name,
    renewal,
    renewed_copy,
    timed_out,
)
from spark_mq.broker.transaction.commit import commit_order, commit_puts, real_batch, real_queue
from spark_mq.broker.transaction.half_messages import (
    HALF_QUEUE_ID,
    HALF_TOPIC,
    half_batch,
    transaction_key,
    transaction_keys,
)
from spark_mq.common.config_dataclass import config_dataclass
from spark_mq.common.errors import MessageValidationError, StoreNotWritableError
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import (
    PRODUCER_GROUP,
    REAL_TOPIC,
    TAGS,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    UNIQ_KEY,
    JoinedProperties,
    encode_properties,
)
from spark_mq.common.unit.decode import StoredMessage, decode_message, decode_messages
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    EndTransactionRequestHeader,
    transaction_type,
)
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus

log = logging.getLogger(__name__)

OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
REMOVE_TAG = "d"  # RocketMQ's TransactionalMessageUtil.REMOVETAG
ALREADY_RESOLVED = "already resolved"  # END_TRANSACTION's remark when its transaction was decided before
SCAN_BATCH = 1024  # units read per bulk read of the half or op queue
MAX_ROUND_UNITS = 64 * SCAN_BATCH  # half messages one check round looks at (the rest wait for the next)
_REMOVE_PROPS = encode_properties({TAGS: REMOVE_TAG})

# group -> its announced producers (from the broker's ClientRegistry, and a 5.x client's Telemetry streams)
Producers = Callable[[str], list[CheckBackSender]]
# (topic, queue id, next queue offset) of a stored message: the broker wakes held pulls with it
Stored = Callable[[str, int, int], None]


@config_dataclass
class TransactionConfig:
    """The broker keys the service runs on (ms, as RocketMQ's); made once per broker, as its config."""

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
        self.senders: dict[str, set[CheckBackSender]] = {}  # group -> open channels its half messages came on

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
            order = commit_order(msgs)
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
        """The half messages of a prepared batch (``half_messages.half_batch``), in a half topic that exists."""
        self.ensure_topic(HALF_TOPIC)  # as RocketMQ, the system topics have configs (tools list them)
        return half_batch(batch, producer_group)

    def stored_half(self, queue_offset: int, batch: MessageBatch, props: JoinedProperties | None = None,
                    group: str = "", sender: CheckBackSender | None = None) -> None:
        """The half messages of ``batch`` were stored from ``queue_offset`` on: live from now. ``props``:
        the joined properties of the send (read for the transaction keys; default: the batch's);
        ``sender``: the channel the send of producer group ``group`` came on, asked while the group
        has no announced producer."""
        keys = transaction_keys(props if props is not None else JoinedProperties(batch.properties), queue_offset)
        for i, key in enumerate(keys):
            self._track(queue_offset + i, key)
        if sender is not None and group:
            senders = self.senders.setdefault(group, set())
            senders.difference_update([c for c in senders if c.closed])
            senders.add(sender)
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
                          for m in commit_order(self._messages_at(offsets))])
        self._resolved(offsets)
        self.metrics.transaction("commit" if state == TRANSACTION_COMMIT_TYPE else "rollback")
        return ResponseCode.SUCCESS, ""

    def _commit(self, order: list[StoredMessage]) -> None:
        """Store the committed copies of ``order`` (a ``commit_order`` or its suffix) in their real
        queues, in that order: one put per run of a queue, at most SCAN_BATCH messages each."""
        for put in commit_puts(order, SCAN_BATCH):
            topic, queue_id = real_queue(put[0])
            result = self.store.put_messages(real_batch(put, topic, queue_id), wait_flush=False)
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
            stop = next((i for i, m in enumerate(due) if not timed_out(m, now, self.config.time_out_ms)), len(due))
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

    def _check_due(self, due: list[StoredMessage], now: int) -> int:
        """Renew ``due`` in one half-queue append (discarding those past ``check_max``), resolve the
        originals in one op batch, then send the checks."""
        if not due:
            return 0
        renew: list[StoredMessage] = []
        for m in due:
            if check_times(m) < self.config.check_max:
                renew.append(m)
            else:
                self._discard(m)
        copies: list[StoredMessage] = []  # one per transaction: a batch's is asked about once
        if renew:
            batch = renewal(renew)
            result = self.store.put_messages(batch, wait_flush=False)
            asked: set[str] = set()
            for i, m in enumerate(renew):
                new_offset = result.queue_offset + i
                key = self.live[m.queue_offset]
                self._track(new_offset, key)
                if key in asked:
                    continue
                asked.add(key)
                copies.append(renewed_copy(m, result, i))
        self._resolved([m.queue_offset for m in due])
        for copy in copies:
            self._send_check(copy)
        return len(copies)

    def _discard(self, m: StoredMessage) -> None:
        """Past ``check_max``: kept in TRANS_CHECK_MAX_TIME_TOPIC for an operator, counted, logged."""
        topic = m.properties.get(REAL_TOPIC, "?")
        log.warning("transaction %s (half offset %d, topic %s, group %s) discarded: no outcome after %d checks",
                    message_name(m), m.queue_offset, topic, m.properties.get(PRODUCER_GROUP), self.config.check_max)
        self.ensure_topic(CHECK_MAX_TIME_TOPIC)
        try:
            self.store.put_messages(real_batch([m], CHECK_MAX_TIME_TOPIC, 0), wait_flush=False)
        except MessageValidationError as e:
            log.error("discarded transaction %s not kept: %s", message_name(m), e)
        self.metrics.transaction("discarded")

    def _check_back_senders(self, group: str) -> list[CheckBackSender]:
        """The group's announced producers, else the open channels its half messages came on."""
        announced = [c for c in self.producers(group) if not c.closed]
        if announced:
            return announced
        senders = self.senders.get(group, set())
        senders.difference_update([c for c in senders if c.closed])
        if not senders:
            self.senders.pop(group, None)
        return list(senders)

    def _send_check(self, m: StoredMessage) -> None:
        group = m.properties.get(PRODUCER_GROUP, "")
        senders = self._check_back_senders(group)
        self.metrics.transaction("check")
        if not senders:
            log.warning("transaction check of %s (group %s) not sent: no producer of the group is connected",
                        message_name(m), group)
            return
        sender = random.choice(senders)
        try:
            sender.send_check(m, self.broker_name)
        except Exception as e:  # the channel closed under us: the next round asks again
            log.info("transaction check of %s to %s failed: %s", message_name(m), sender.peer, e)

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
