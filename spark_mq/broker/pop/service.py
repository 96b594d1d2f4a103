"""The broker's pop service: POP_MESSAGE, PEEK_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION and POLLING_INFO without the remoting around them, so that the
remoting processors (``processors/pop.py``) and the gRPC endpoint (ReceiveMessage, AckMessage,
ChangeInvisibleDuration) share one implementation.

A pop reads from the group's offset in each queue it serves, advances that offset at once (RocketMQ's pop
offset: the messages are the checkpoint's from now on), and writes one checkpoint per queue to the revive
topic before it answers. An ack writes an ack record; a batch ack one per pop of a queue, all in one write.
``ReviveService`` redelivers what is not acknowledged once its invisible time has passed. A pop of queue -1
serves every readable queue of the topic, starting at a rotating queue, and the group's pop retry topic
``%RETRY%<group>_<topic>`` (first one pop in ``RETRY_FIRST_EVERY``, after the topic's queues otherwise). An
orderly pop (``order=True``) is served by ``OrderLocks`` instead of checkpoints.

Errors are ``PopError(code, remark)``, the remoting response code and a remark that says what to do.

Thread-safety: every method runs on the broker's event loop; the read of a queue's offset, the read of its
messages and the offset's advance happen with no ``await`` between them, so concurrent pops of one group
never get the same message.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import cached_property

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.pop.checkpoints import CheckpointTable
from spark_mq.broker.pop.mode_guard import PopPullGuard
from spark_mq.broker.pop.order_locks import OrderLocks
from spark_mq.broker.pop.records import CK_TAG, Ack, Checkpoint, revive_topic
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.processors.pull import tag_codes
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.errors import InvalidNameError, StoreNotWritableError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import RETRY_GROUP_TOPIC_PREFIX, validate_topic
from spark_mq.common.perm import PERM_READ, PERM_READ_WRITE
from spark_mq.common.properties import TAGS, encode_properties
from spark_mq.remoting.bodies import SUB_ALL, BatchAck, TopicConfig
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.pop_receipt import (
    ORDER_REVIVE_QID,
    Receipt,
    ReceiptError,
    pop_retry_topic,
    queue_info,
    topic_read,
)
from spark_mq.store.message_store import MessageStore
from spark_mq.store.queue_reader import UnitFilter
from spark_mq.store.results import GetStatus

log = logging.getLogger(__name__)

INIT_MODE_MIN = 0  # ConsumeInitMode.MIN: a group new to a queue starts at its first message
INIT_MODE_MAX = 1  # ConsumeInitMode.MAX: ... at its end (only messages sent from now on)
REVIVE_QUEUE_ID = 0  # the revive topic has one queue: every checkpoint's reviveQid
RETRY_FIRST_EVERY = 5  # PopMessageProcessor: one pop in 5 reads the retry topic first
MAX_POP_NUMS = 32  # PopMessageProcessor refuses more per pop
MAX_POLL_MS = 30_000  # never hold a pop longer than this, whatever the client asks
MIN_INVISIBLE_MS = 1_000  # shorter invisible times are refused (the revive service runs every 100 ms)


class PopError(Exception):
    """A pop request the broker does not serve: ``code`` the response code, the message what to do."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


@dataclass(frozen=True)
class PopFilter:
    """A subscription's filter: a tag expression (``expression_type`` None or ``TAG``) or SQL92."""

    expression_type: str | None = None
    expression: str | None = SUB_ALL


@lazy_dataclass(frozen=True)
class PoppedMessage(LazyDataclass):
    """One message handed out: its stored unit (decode with ``common.unit.decode.decode_message``), where it
    was read, its receipt handle (RocketMQ's ``extraInfo``/``POP_CK``) and its delivery attempt (1 first)."""

    unit: bytes
    topic: str  # the topic read: the pop retry topic for a redelivery
    queue_id: int
    queue_offset: int
    receipt: str
    attempt: int


@lazy_dataclass(frozen=True)
class PoppedQueue(LazyDataclass):
    """What one pop (or peek) read from one queue, as the store returned it: the units back to back in
    ``data`` (``sizes`` each) at ``queue_offsets``, and what their receipt handles say. The answer's body is
    built from ``data`` with no object per message; ``messages()`` makes them for the gRPC endpoint."""

    topic: str  # the topic read: the pop retry topic for a redelivery
    queue_id: int
    data: bytes
    sizes: np.ndarray
    queue_offsets: np.ndarray
    ck_offset: int  # where the pop started in the queue; -1 for a peek (no receipt)
    pop_time: int
    invisible_ms: int
    revive_qid: int
    attempt: int
    broker_name: str

    @property
    def count(self) -> int:
        return int(self.sizes.size)

    def messages(self) -> list[PoppedMessage]:
        starts = np.zeros(self.sizes.size, dtype=np.int64)
        np.cumsum(self.sizes[:-1], out=starts[1:])
        offsets = self.queue_offsets.tolist()
        if self.ck_offset < 0:
            receipts = [""] * len(offsets)
        else:
            prefix = Receipt(self.ck_offset, self.pop_time, self.invisible_ms, self.revive_qid,
                             self.topic.startswith(RETRY_GROUP_TOPIC_PREFIX), self.broker_name, self.queue_id,
                             None).prefix
            receipts = [prefix + str(o) for o in offsets]
        return [PoppedMessage(self.data[s:s + n], self.topic, self.queue_id, o, r, self.attempt)
                for s, n, o, r in zip(starts.tolist(), self.sizes.tolist(), offsets, receipts, strict=True)]


@lazy_dataclass(frozen=True)
class PopResult(LazyDataclass):
    queues: list[PoppedQueue]
    pop_time: int
    invisible_ms: int
    revive_qid: int
    rest_num: int  # messages left in the queues served, past what was handed out
    start_offset_info: str = ""
    msg_offset_info: str = ""
    order_count_info: str = ""

    @property
    def count(self) -> int:
        return sum(q.count for q in self.queues)

    @property
    def body(self) -> bytes:
        """The units back to back: a POP_MESSAGE response's body."""
        return b"".join(q.data for q in self.queues)

    @cached_property
    def messages(self) -> list[PoppedMessage]:
        return [m for q in self.queues for m in q.messages()]


@lazy_dataclass(frozen=True)
class _Selector(LazyDataclass):
    codes: set[int] | None
    unit_filter: UnitFilter | None


class PopService:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, hold: PullHoldService, filters: Sql92Filters, *, broker_name: str,
                 cluster: str, switch_ms: int, readable_end: Callable[[], int | None] = lambda: None,
                 refusal: Callable[[], str | None] = lambda: None, on_topic_created: Callable[[], None] = lambda: None,
                 replicated: Callable[[int], Awaitable[bool]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """``refusal()``: why this broker serves no pops now (a slave), else None; ``readable_end()``: as the
        pull processor's; ``replicated(end)``: whether the replicas a send waits for (SYNC_MASTER,
        allAckInSyncStateSet) have the commitlog below ``end`` in time, None when sends do not wait. Pops, acks
        and changes of invisible time are answered only once their revive records are replicated so: a slave
        promoted after an answer knows what was handed out and what was acknowledged."""
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.hold = hold
        self.filters = filters
        self.broker_name = broker_name
        self.revive_topic = revive_topic(cluster)
        self.readable_end = readable_end
        self.refusal = refusal
        self.on_topic_created = on_topic_created
        self.replicated = replicated
        self.written_end = 0  # commitlog offset past the last revive record written
        self.clock = clock
        self.checkpoints = CheckpointTable()
        self.order = OrderLocks()
        self.guard = PopPullGuard(switch_ms, self.checkpoints.in_flight)
        self.polling: Counter[tuple[str, str, int]] = Counter()  # held pops by (group, topic, queue id)
        self._turn = itertools.count()

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- filters ---------------------------------------------------------------------------------
    def resolve_filter(self, flt: PopFilter, group: str, topic: str, peer: str = "") -> _Selector:
        """What the filter keeps, as the pull path judges it (tag codes, or the compiled SQL92 filter).
        Raises PopError when it is refused (SQL92 off, another type, a bad expression)."""
        probe = RemotingCommand.request(RequestCode.POP_MESSAGE)
        found = self.filters.resolve(probe, group, topic, flt.expression_type, flt.expression, peer)
        if isinstance(found, RemotingCommand):
            raise PopError(found.code, found.remark or "filter refused")
        if found is None:
            return _Selector(tag_codes(flt.expression), None)
        return _Selector(None, found.match_units)

    # -- checks ----------------------------------------------------------------------------------
    def queues_of(self, group: str, topic: str, queue_id: int) -> list[int]:
        """The queues a request for ``queue_id`` of ``topic`` serves; raises PopError."""
        refusal = self.refusal()
        if refusal is not None:
            raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        config = self.topics.get(topic)
        if config is None:
            raise PopError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not config.perm & PERM_READ:
            raise PopError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking/popping is forbidden")
        if not self.groups.find(group).consume_enable:
            raise PopError(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if queue_id >= queues:
            raise PopError(ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                                      f"topicConfig.readQueueNums:[{config.read_queue_nums}]")
        return list(range(config.read_queue_nums)) if queue_id < 0 else [queue_id]

    def _retry_topic(self, group: str, topic: str) -> str | None:
        """The group's pop retry topic of ``topic`` if it exists (the revive service creates it)."""
        try:
            name = pop_retry_topic(group, topic)
            validate_topic(name)
        except InvalidNameError:
            return None
        return name if self.topics.get(name) is not None else None

    def ensure_retry_topic(self, group: str, topic: str) -> str:
        name = pop_retry_topic(group, topic)
        if self.topics.get(name) is None:
            self.topics.upsert(TopicConfig(name, 1, 1, PERM_READ_WRITE))
            self.on_topic_created()
        return name

    def _start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """The group's offset in the queue; a group new to it starts as ``init_mode`` says (a retry topic at
        its start), and that start is committed at once, so a message sent meanwhile is not skipped."""
        offset = self.offsets.query(group, topic, queue_id)
        if offset >= 0:
            return offset
        if init_mode == INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            offset = self.store.get_min_offset(topic, queue_id)
        else:
            offset = self.store.get_max_offset(topic, queue_id)
        self.offsets.commit(group, topic, queue_id, offset)
        return offset

    # -- the revive log --------------------------------------------------------------------------
    def _log(self, tag: str, body: bytes) -> int:
        """Append a record to the revive topic; returns its offset in the revive queue."""
        return self._log_many([(tag, body)])

    def _log_many(self, records: list[tuple[str, bytes]]) -> int:
        """Append (tag, body) records to the revive topic in one write; returns the first one's offset in the
        revive queue."""
        if self.topics.ensure_system_topic(self.revive_topic):
            self.on_topic_created()
        batch = MessageBatch.of(self.revive_topic, REVIVE_QUEUE_ID, [body for _, body in records],
                                [encode_properties({TAGS: tag}) for tag, _ in records])
        result = self.store.put_messages(batch, wait_flush=False)
        self.written_end = max(self.written_end, result.end_offset)
        return result.queue_offset

    async def records_replicated(self, what: str) -> None:
        """Return once the revive records written so far are on the replicas sends wait for (at once when sends
        wait for none); raises PopError FLUSH_SLAVE_TIMEOUT naming ``what`` when they are not in time (what
        it recorded stands: a popped message comes back after its invisible time)."""
        if self.replicated is not None and not await self.replicated(self.written_end):
            raise PopError(ResponseCode.FLUSH_SLAVE_TIMEOUT,
                           f"{what} recorded but not replicated to the slaves in time: try again")

    def log_ack(self, ack: Ack) -> None:
        self._log(ack.tag, ack.to_json())

    # -- pop -------------------------------------------------------------------------------------
    async def pop(self, group: str, topic: str, queue_id: int = -1, max_nums: int = MAX_POP_NUMS,
                  invisible_ms: int = 60_000, flt: PopFilter = PopFilter(), init_mode: int = INIT_MODE_MIN,
                  poll_ms: int = 0, order: bool = False, peer: str = "") -> PopResult:
        """Hand out up to ``max_nums`` messages of ``topic`` (queue ``queue_id``, -1 for any), invisible to
        the group's other pops for ``invisible_ms``; with nothing to hand out, wait up to ``poll_ms`` for
        messages. An empty result when none came. Raises PopError."""
        if not 0 < max_nums <= MAX_POP_NUMS:
            raise PopError(ResponseCode.INVALID_PARAMETER, f"maxMsgNums {max_nums} is not in 1..{MAX_POP_NUMS}")
        if invisible_ms < MIN_INVISIBLE_MS:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"invisibleTime {invisible_ms} ms is too short: ask for at least {MIN_INVISIBLE_MS} ms")
        queues = self.queues_of(group, topic, queue_id)
        selector = self.resolve_filter(flt, group, topic, peer)
        deadline = time.monotonic() + min(max(poll_ms, 0), MAX_POLL_MS) / 1000
        while True:
            result, waits = self._pop_once(group, topic, queues, queue_id < 0, max_nums, invisible_ms, selector,
                                           init_mode, order)
            remaining = deadline - time.monotonic()
            if result.queues and not order:  # orderly pops write no record
                await self.records_replicated("the pop")
            if result.queues or remaining <= 0 or not waits:
                return result
            key = (group, topic, queue_id)
            self.polling[key] += 1
            try:
                await self.hold.wait_any(waits, remaining)
            finally:
                self.polling[key] -= 1
                if not self.polling[key]:
                    del self.polling[key]

    def _pop_once(self, group: str, topic: str, queues: list[int], any_queue: bool, max_nums: int,
                  invisible_ms: int, selector: _Selector, init_mode: int, order: bool
                  ) -> tuple[PopResult, list[tuple[str, int, int]]]:
        """One pass over the queues (no await): the result, and the queue positions to wait on if empty."""
        now = self.now_ms()
        turn = next(self._turn)
        start = turn % len(queues) if queues else 0
        sources = [(topic, q) for q in queues[start:] + queues[:start]]
        retry = None if order else self._retry_topic(group, topic)
        if retry is not None:
            sources = [(retry, 0), *sources] if turn % RETRY_FIRST_EVERY == 0 else [*sources, (retry, 0)]
        out: list[PoppedQueue] = []
        taken = 0
        starts, msg_offsets, counts, waits = [], [], [], []
        rest = 0
        refusals = []
        for read_topic, q in sources:
            if order and self.order.blocked((group, read_topic, q), now):
                # woken when the batch in flight is acknowledged (or anything arrives): see _ack_order
                waits.append((read_topic, q, self.offsets.query(group, read_topic, q)))
                continue
            refusal = self.guard.pop_refusal(group, read_topic, q, now)
            if refusal is not None:
                refusals.append(refusal)
                continue
            offset = self._start_offset(group, read_topic, q, init_mode)
            need = max_nums - taken
            if need <= 0:
                rest += max(0, self.store.get_max_offset(read_topic, q) - offset)
                continue
            got = self._pop_queue(group, read_topic, q, offset, need, invisible_ms, selector, now, order)
            if got is None:
                waits.append((read_topic, q, offset))
                continue
            popped, next_offset = got
            out.append(popped)
            taken += popped.count
            starts.append((read_topic, q, str(offset)))
            msg_offsets.append((read_topic, q, ",".join(map(str, popped.queue_offsets.tolist()))))
            counts.append((read_topic, q, str(popped.attempt - 1)))
            rest += max(0, self.store.get_max_offset(read_topic, q) - next_offset)
        if refusals and len(refusals) >= len(queues) and not out:  # the topic's queues are all the pulls'
            raise PopError(ResponseCode.SYSTEM_ERROR, refusals[0])
        return PopResult(out, now, invisible_ms, ORDER_REVIVE_QID if order else REVIVE_QUEUE_ID, rest,
                         queue_info(starts), queue_info(msg_offsets), queue_info(counts) if order else ""), waits

    def _pop_queue(self, group: str, topic: str, queue_id: int, offset: int, need: int, invisible_ms: int,
                   selector: _Selector, now: int, order: bool) -> tuple[PoppedQueue, int] | None:
        """Pop up to ``need`` messages of one queue from ``offset``: the messages and the group's next offset;
        None when the queue has nothing for the group."""
        result = self.store.get_messages(topic, queue_id, offset, need, selector.codes,
                                         unit_filter=selector.unit_filter, readable_end=self.readable_end())
        if result.status != GetStatus.FOUND or result.count == 0:
            if result.next_begin_offset != offset and result.status in (
                    GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                self.offsets.commit(group, topic, queue_id, result.next_begin_offset)  # skipped or moved
            return None
        queue_offsets = result.queue_offsets.tolist()
        if order:
            attempt = self.order.hold((group, topic, queue_id), queue_offsets, result.next_begin_offset,
                                      now + invisible_ms)
            qid = ORDER_REVIVE_QID
        else:
            ck = Checkpoint(group, topic, queue_id, offset, now, invisible_ms,
                            tuple(o - offset for o in queue_offsets), self.broker_name)
            try:
                ck = replace(ck, revive_offset=self._log(CK_TAG, ck.to_json()))
            except StoreNotWritableError as e:
                raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE, f"pop not served: {e}") from e
            self.checkpoints.add(ck)
            self.offsets.commit(group, topic, queue_id, result.next_begin_offset)
            attempt, qid = 1, REVIVE_QUEUE_ID
        return PoppedQueue(topic, queue_id, result.data, result.sizes, result.queue_offsets, offset, now,
                           invisible_ms, qid, attempt, self.broker_name), result.next_begin_offset

    # -- peek, notification, polling info ---------------------------------------------------------
    def peek(self, group: str, topic: str, queue_id: int, max_nums: int) -> PopResult:
        """Up to ``max_nums`` messages at the group's offsets, handed out to no one (nothing changes)."""
        queues = self.queues_of(group, topic, queue_id)
        now = self.now_ms()
        out: list[PoppedQueue] = []
        taken = 0
        starts = []
        for q in queues:
            if taken >= max_nums:
                break
            offset = self.offsets.query(group, topic, q)
            offset = self.store.get_min_offset(topic, q) if offset < 0 else offset
            result = self.store.get_messages(topic, q, offset, max_nums - taken, readable_end=self.readable_end())
            if result.status != GetStatus.FOUND:
                continue
            starts.append((topic, q, str(offset)))
            out.append(PoppedQueue(topic, q, result.data, result.sizes, result.queue_offsets, -1, now, 0,
                                   REVIVE_QUEUE_ID, 0, self.broker_name))
            taken += out[-1].count
        return PopResult(out, now, 0, REVIVE_QUEUE_ID, 0, queue_info(starts))

    def has_messages(self, group: str, topic: str, queue_id: int) -> bool:
        """Whether a pop of the group would find messages (NOTIFICATION's hasMsg), without handing any out."""
        sources = [(topic, q) for q in self.queues_of(group, topic, queue_id)]
        retry = self._retry_topic(group, topic)
        if retry is not None:
            sources.append((retry, 0))
        return any(self.store.get_max_offset(t, q) > max(self.offsets.query(group, t, q), 0) for t, q in sources)

    async def notification(self, group: str, topic: str, queue_id: int, poll_ms: int) -> bool:
        """NOTIFICATION: wait up to ``poll_ms`` until the group has messages to pop; whether it has."""
        deadline = time.monotonic() + min(max(poll_ms, 0), MAX_POLL_MS) / 1000
        while not self.has_messages(group, topic, queue_id):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waits = [(topic, q, max(self.offsets.query(group, topic, q), 0))
                     for q in self.queues_of(group, topic, queue_id)]
            await self.hold.wait_any(waits, remaining)
        return True

    def polling_num(self, group: str, topic: str, queue_id: int) -> int:
        """Pops of the group held waiting for messages of the queue (POLLING_INFO)."""
        return self.polling.get((group, topic, queue_id), 0)

    # -- ack, change invisible time ---------------------------------------------------------------
    def parse_receipt(self, receipt: str, queue_offset: int | None) -> tuple[Receipt, int]:
        """The receipt and the message's queue offset (the receipt's, else ``queue_offset``); raises PopError."""
        try:
            parsed = Receipt.parse(receipt)
        except ReceiptError as e:
            raise PopError(ResponseCode.INVALID_PARAMETER, str(e)) from e
        offset = parsed.queue_offset if parsed.queue_offset is not None else queue_offset
        if offset is None:
            raise PopError(ResponseCode.INVALID_PARAMETER, "the receipt handle names no message offset: send the "
                                                           "message's queue offset with it")
        return parsed, offset

    async def ack(self, group: str, topic: str, receipt: str, queue_offset: int | None = None) -> None:
        """Acknowledge the message ``receipt`` names: it is done and never handed out again. Raises PopError
        (NO_MESSAGE when it is no longer in flight: its invisible time passed and it was redelivered, or it
        was acknowledged already)."""
        r, offset = self.parse_receipt(receipt, queue_offset)
        self.ack_offsets(group, topic, r.retry, r.queue_id, r.ck_offset, r.pop_time, r.revive_qid, (offset,))
        await self.records_replicated("the ack")

    def ack_offsets(self, group: str, topic: str, retry: bool, queue_id: int, start_offset: int, pop_time: int,
                    revive_qid: int, offsets: tuple[int, ...]) -> list[int]:
        """Acknowledge messages of one pop of one queue; returns those that were in flight. Raises PopError
        when none was."""
        return self.ack_batch([BatchAck(group, topic, retry, start_offset, queue_id, revive_qid, pop_time, 0,
                                        offsets)])[0]

    def ack_batch(self, acks: list[BatchAck]) -> list[int]:
        """Acknowledge each entry's messages (BATCH_ACK_MESSAGE: one entry per pop of one queue), with one
        write of the revive records of them all (a ``bAck`` record per entry); returns the offsets that were
        in flight. Raises PopError (what to do) when an entry acknowledged nothing: the others are done all
        the same."""
        if self.refusal() is not None:
            raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE, self.refusal() or "")
        records: list[Ack] = []
        done_all: list[int] = []
        refused: PopError | None = None
        for a in acks:
            real = topic_read(a.consumer_group, a.topic, a.retry)
            if a.revive_queue_id == ORDER_REVIVE_QID:
                done = self._ack_order(a.consumer_group, real, a.queue_id, a.offsets)
            else:
                key = (a.consumer_group, real, a.queue_id, a.start_offset, a.pop_time)
                done = [o for o in a.offsets if self.checkpoints.pending(key, o)]
                if done:
                    records.append(Ack(a.consumer_group, real, a.queue_id, a.start_offset, a.pop_time, tuple(done),
                                       self.broker_name))
            done_all.extend(done)
            if not done and refused is None:
                refused = PopError(ResponseCode.NO_MESSAGE,
                                   f"no message of offsets {list(a.offsets)[:8]} of queue {a.queue_id} of {real} "
                                   f"popped by group {a.consumer_group} is in flight: its invisible time passed (it is "
                                   "or will be delivered again) or it was acknowledged already")
        if records:
            try:
                self._log_many([(r.tag, r.to_json()) for r in records])
            except StoreNotWritableError as e:
                raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE, f"ack not recorded: {e}") from e
            for r in records:
                self.checkpoints.ack(r.key, r.offsets)
        if refused is not None:
            raise refused
        return done_all

    def _ack_order(self, group: str, topic: str, queue_id: int, offsets: tuple[int, ...]) -> list[int]:
        """Acknowledge messages of an orderly pop (no record: the group's offset moves); returns those held."""
        done = []
        for offset in offsets:
            try:
                next_offset = self.order.ack((group, topic, queue_id), offset)
            except KeyError:
                continue
            done.append(offset)
            if next_offset is not None:
                self.offsets.commit(group, topic, queue_id, next_offset)
                self.hold.notify(topic, queue_id, next_offset + 1)
        return done

    async def change_invisible(self, group: str, topic: str, receipt: str, invisible_ms: int,
                               queue_offset: int | None = None) -> Receipt:
        """Make the message ``receipt`` names invisible for ``invisible_ms`` from now; returns its new receipt
        (the old one is spent). Raises PopError (NO_MESSAGE when it is no longer in flight)."""
        r, offset = self.parse_receipt(receipt, queue_offset)
        if invisible_ms < MIN_INVISIBLE_MS:
            raise PopError(ResponseCode.INVALID_PARAMETER,
                           f"invisibleTime {invisible_ms} ms is too short: ask for at least {MIN_INVISIBLE_MS} ms")
        real = r.real_topic(group, topic)
        now = self.now_ms()
        if r.order:
            try:
                self.order.extend((group, real, r.queue_id), offset, now + invisible_ms)
            except KeyError:
                raise PopError(ResponseCode.NO_MESSAGE, f"message {offset} of queue {r.queue_id} of {real} is not in "
                                                        f"flight for group {group}") from None
            return Receipt(r.ck_offset, now, invisible_ms, ORDER_REVIVE_QID, r.retry, self.broker_name, r.queue_id,
                           offset)
        key = (group, real, r.queue_id, r.ck_offset, r.pop_time)
        if not self.checkpoints.pending(key, offset):
            raise PopError(ResponseCode.NO_MESSAGE,
                           f"message {offset} of queue {r.queue_id} of {real} is not in flight for group {group}: its "
                           "invisible time passed or it was acknowledged")
        ck = Checkpoint(group, real, r.queue_id, offset, now, invisible_ms, (0,), self.broker_name)
        try:
            ck = replace(ck, revive_offset=self._log(CK_TAG, ck.to_json()))
            self.checkpoints.add(ck)
            self.log_ack(Ack(group, real, r.queue_id, r.ck_offset, r.pop_time, (offset,), self.broker_name))
        except StoreNotWritableError as e:
            raise PopError(ResponseCode.SERVICE_NOT_AVAILABLE, f"change of invisible time not recorded: {e}") from e
        self.checkpoints.ack(key, (offset,))
        await self.records_replicated("the change of invisible time")
        return Receipt(offset, now, invisible_ms, REVIVE_QUEUE_ID, r.retry, self.broker_name, r.queue_id, offset)
