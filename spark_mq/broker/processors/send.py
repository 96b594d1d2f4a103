"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (RocketMQ's SendMessageProcessor).

Unknown topics are created through the default topic when ``autoCreateTopicEnable`` is on; a negative queue
id picks a queue. Invalid messages are answered MESSAGE_ILLEGAL and nothing is stored; so is a topic name
that breaks the naming rule (``common/names.py``), checked before the topic is looked up (a one-line warning
is logged). Under SYNC_FLUSH the response waits for the group commit without blocking the event loop. A
stored message wakes the pulls held on its queue at once, and they answer before the send does (a pull held
where the put begins answers inside the put's ``notify``: no loop turn between). On a master every put wakes
the transfers to its slaves; under SYNC_MASTER the answer waits for a slave's acknowledgement
(FLUSH_SLAVE_TIMEOUT past syncFlushTimeout, SLAVE_NOT_AVAILABLE without a slave in sync; stored either way),
except that a controller-mode master whose SyncStateSet is smaller than minInSyncReplicas refuses a send
before storing it (SYSTEM_ERROR "in-sync replicas not enough", as RocketMQ 5). A slave refuses every send
with SERVICE_NOT_AVAILABLE naming its master; so does a controller-mode master whose lease ran out
(``replication/master_lease.py``), checked again when a stored put is answered. The batch's properties are
read once and the batch sorted into runs (``send_runs.py``): a prepared (transactional) send is stored as
half messages (``transaction/half_messages.py``), messages with a delay level in the schedule topic
(``scheduled/delay_service.py``), messages with a timer property due later in the timer topic
(``scheduled/timer.py``), the others where they were sent.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable
from concurrent.futures import Future

from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.processors.send_runs import put_all, stored_runs
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.broker.transaction.check_back import CheckBackSender, RemotingCheckBack
from spark_mq.broker.transaction.half_messages import is_prepared_transaction
from spark_mq.broker.transaction.service import TransactionalMessageService
from spark_mq.common.delay_levels import SCHEDULE_TOPIC
from spark_mq.common.errors import BatchBodyError, InvalidNameError, MessageValidationError, StoreNotWritableError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.message_id import joined_offset_msg_ids
from spark_mq.common.names import TIMER_TOPIC, validate_topic
from spark_mq.common.one_row import one_row
from spark_mq.common.perm import PERM_WRITE
from spark_mq.common.properties import JoinedProperties
from spark_mq.common.unit.encode import units_total
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection, client_faults
from spark_mq.remoting.headers import SendMessageRequestHeader, parse_send_request_header
from spark_mq.remoting.message_batch_codec import decode_batch_body
from spark_mq.store.ha.ha_service import HAService
from spark_mq.store.message_store import AT_END_MAX_BACKLOG, MessageStore
from spark_mq.store.results import PutResult, PutStatus

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
# RocketMQ's PutMessageStatus -> response code, for the statuses of a stored message
_STORED_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
# after a put that woke held pulls, with at least IDLE_DISPATCH_BACKLOG messages not yet dispatched: at the loop's
# next turn, unless a put came meanwhile, they are dispatched. A pass has a fixed cost (~40 us of ~120 for 16
# messages): not one per put.
IDLE_DISPATCH_BACKLOG = AT_END_MAX_BACKLOG * 3 // 4
_NOT_ARRIVED = (SCHEDULE_TOPIC, TIMER_TOPIC)  # a message stored here has not arrived in its queue yet
PEER_CACHE = 4096  # connections whose packed BORNHOST is kept


@lazy_dataclass(frozen=True)
class SendOutcome(LazyDataclass):
    """What a send came to: a response code, a remark when refused, the put (None when refused) and its queue."""

    code: int
    remark: str = ""
    result: PutResult | None = None
    queue_id: int = -1


def born_host(conn: Connection) -> bytes:
    return _packed_peer(conn.peer)


@functools.lru_cache(maxsize=PEER_CACHE)
def _packed_peer(peer: str) -> bytes:
    """``peer`` (host:port) as a unit's BORNHOST, packed once per connection rather than per send."""
    host, _, port = peer.rpartition(":")
    try:
        return pack_host(host, int(port))
    except (OSError, ValueError):  # not IPv4 (we store IPv4 hosts only)
        return pack_host("127.0.0.1", int(port) if port.isdigit() else 0)


class SendProcessor:
    """Serves the send codes with the collaborators it is given; runs on the broker's event loop."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, hold: PullHoldService, metrics: BrokerMetrics,
                 transactions: TransactionalMessageService, sync_flush_timeout_ms: int,
                 on_topic_created: Callable[[], None],
                 ha: HAService | None = None, sync_master: bool = False,
                 slave_refusal: Callable[[], str | None] = lambda: None,
                 reject_transaction_message: bool = False, timer: TimerLimits | None = None,
                 ack_refusal: Callable[[], str | None] = lambda: None) -> None:
        """``transactions`` stores prepared messages as half messages (refused with
        ``reject_transaction_message``, as RocketMQ's ``rejectTransactionMessage``);
        ``ha``: a master's replication (None on a slave), waited for when ``sync_master``;
        ``slave_refusal()``: why this broker refuses sends (it is a slave, or a master behind its slave), else None;
        ``timer``: what timer messages may ask for (None: refused, as with timerWheelEnable=false);
        ``ack_refusal()``: why a stored put is not acknowledged now (a master whose lease ran out while it
        waited), else None: asked again just before the answer."""
        self.store = store
        self.topics = topics
        self.hold = hold
        self.metrics = metrics
        self.transactions = transactions
        self.reject_transaction_message = reject_transaction_message
        self.sync_flush_timeout_s = sync_flush_timeout_ms / 1000
        self.on_topic_created = on_topic_created
        self.ha = ha
        self.sync_master = sync_master
        self.slave_refusal = slave_refusal
        self.timer = timer or TimerLimits(False, 1, 0)
        self.ack_refusal = ack_refusal
        self.max_delay_level = len(store.delays_ms)
        self._idle_dispatch: asyncio.Handle | None = None

    def register_on(self, server) -> None:
        for code in SEND_CODES:
            server.register(code, self.send)

    async def send(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        refusal = self.slave_refusal()
        if refusal is not None:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        if self.sync_master and self.ha is not None and (refusal := self.ha.too_few_in_sync()) is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, refusal)  # RocketMQ 5's answer to it
        h = parse_send_request_header(cmd.code, cmd.ext_fields)
        topic = self.topics.get(h.topic)
        if topic is None:  # a known topic passed the naming rule when it was added
            try:
                validate_topic(h.topic)
            except InvalidNameError as e:
                client_faults.warning(conn.peer_host, "invalid topic", "%s: %s refused: %s", conn.peer,
                                      cmd.describe(), e)
                return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        try:
            batch = self._batch(cmd, h, max(h.queue_id, 0), conn)  # its queue is chosen below
            props = JoinedProperties(batch.properties)  # read once, for every feature that looks at them
            prepared = is_prepared_transaction(h.sys_flag, props)
        except (BatchBodyError, MessageValidationError) as e:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        outcome = await self.store_send(batch, props, prepared, h.producer_group, h.default_topic,
                                        h.default_topic_queue_nums, h.queue_id if h.queue_id >= 0 else None,
                                        sender=RemotingCheckBack(conn))
        if outcome.result is None:
            return cmd.make_response(outcome.code, outcome.remark)
        return cmd.make_response(outcome.code, wire_fields={
            "msgId": joined_offset_msg_ids(outcome.result.store_host, outcome.result.physical_offsets),
            "queueId": str(outcome.queue_id),
            "queueOffset": str(outcome.result.queue_offset),
        })

    async def store_send(self, batch: MessageBatch, props: JoinedProperties, prepared: bool, producer_group: str,
                         default_topic: str = "", default_queue_nums: int = 0, queue_id: int | None = None,
                         queue_key: int | None = None, sender: CheckBackSender | None = None) -> SendOutcome:
        """Store a send's ``batch`` (of topic ``batch.topic``, validated) in queue ``queue_id``, or the queue
        ``queue_key`` hashes to (a FIFO message group), else a random one; every check, routing and wait of a
        send. ``sender``: the channel a prepared send came on (a check-back may go there). Shared by the remoting
        codes and the gRPC endpoint."""
        name = batch.topic
        if prepared and self.reject_transaction_message:  # refused before anything (a topic) is created
            return SendOutcome(ResponseCode.NO_PERMISSION,
                               f"the broker[{self.transactions.broker_name}] sending transaction message is "
                               f"forbidden (rejectTransactionMessage=true)")
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics.create_on_send(name, default_topic, default_queue_nums)
            if topic is None:
                return SendOutcome(ResponseCode.TOPIC_NOT_EXIST,
                                   f"topic[{name}] not exist, apply first please! (autoCreateTopicEnable is off)")
            self.on_topic_created()
        if not topic.perm & PERM_WRITE:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"the topic[{name}] sending is forbidden")
        if queue_id is None:
            queue_id = (queue_key % topic.write_queue_nums if queue_key is not None
                        else random.randrange(topic.write_queue_nums))
        if queue_id >= max(topic.write_queue_nums, topic.read_queue_nums):
            return SendOutcome(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal, topic {name} "
                                                          f"has {topic.write_queue_nums} write queues")
        batch.queue_id = queue_id
        try:
            if prepared:
                batch = self.transactions.half_batch(batch, producer_group)
            started = time.perf_counter()
            parts = [batch] if prepared else stored_runs(batch, self.max_delay_level, self.timer, props=props)
            result = put_all(self.store, parts)
        except MessageValidationError as e:
            return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, str(e))
        except StoreNotWritableError as e:
            return SendOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        self.metrics.stored(batch.topic, result.count, units_total(result.sizes), time.perf_counter() - started)
        if prepared:
            self.transactions.stored_half(result.queue_offset, batch, props, producer_group, sender)
        if self.ha is not None:
            self.ha.appended()
        # a put all in the requested queue is handed to the pulls held there: they answer from it
        arrived = result if len(parts) == 1 and parts[0].topic == name else None
        if self.hold.notify(name, queue_id, self._queue_end(name, queue_id, parts, result), arrived):
            self._dispatch_when_idle()
            if self.hold.deferred:
                # one loop turn: the woken pulls not answered in ``notify`` answer before this ack goes out
                # (the consumer, not the producer, is who waits for these messages)
                await asyncio.sleep(0)
        durable = self.store.durable(result.end_offset)
        status = (result.status if durable is None and not (self.sync_master and self.ha is not None)
                  else await self._stored_status(result, durable))  # nothing to wait for: no coroutine either
        refusal = self.ack_refusal()
        if refusal is not None:  # stored, but never acknowledged once the master lease ran out
            return SendOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, f"{refusal} (the message was stored here but is "
                                                                   f"not acknowledged: send it again)")
        return SendOutcome(_STORED_CODES[status], "", result, queue_id)

    def _dispatch_when_idle(self, backlog: int = -1) -> None:
        """Dispatch the appends so far at the loop's next turn (see ``store.dispatch_queues``), when
        ``IDLE_DISPATCH_BACKLOG`` messages wait: a long-polling consumer's next pull then rarely finds more than
        ``AT_END_MAX_BACKLOG`` and reads, which dispatched them between a put and its pull's answer (a 0.1-0.3 ms
        pass every 32 messages). The next turn is right after the woken pulls' answers and this ack went out: the
        start of the gap before the next send (a wait of 0.5 ms put the pass at its end, where the next send
        met it: most of the latency row's slowest 1 %). ``backlog``: the store's dispatch backlog when the wait
        began; a different one means a put (or a read) came meanwhile: wait again while enough is left."""
        if backlog < 0 and self._idle_dispatch is not None:  # a wait runs: it sees this put's backlog
            return
        now = self.store.dispatch_backlog()
        if now == backlog:
            self._idle_dispatch = None
            self.store.dispatch_queues()
        elif now >= IDLE_DISPATCH_BACKLOG:
            self._idle_dispatch = asyncio.get_running_loop().call_soon(self._dispatch_when_idle, now)
        else:
            self._idle_dispatch = None

    async def _stored_status(self, result: PutResult, durable: Future[None] | None) -> PutStatus:
        """The put's status once it is as durable as the broker's flush and replication settings ask
        (``durable``: the store's flush future for it, None when nothing is to be waited for)."""
        status = result.status
        if durable is not None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(durable), self.sync_flush_timeout_s)
            except (asyncio.TimeoutError, StoreNotWritableError):
                status = PutStatus.FLUSH_DISK_TIMEOUT
        if self.sync_master and self.ha is not None:
            replicated = await self.ha.replicated(result.end_offset, self.sync_flush_timeout_s)
            if replicated != PutStatus.PUT_OK:  # as RocketMQ: the slave's status wins over the disk's
                status = replicated
        return status

    def _queue_end(self, topic: str, queue_id: int, parts: list[MessageBatch], result: PutResult) -> int:
        """The end of the requested queue after this put, for held pulls (0 when every message went to
        the schedule or timer topic: nothing arrived in it)."""
        if len(parts) == 1:  # the usual send: one run (no generator for it)
            return 0 if parts[0].topic in _NOT_ARRIVED else result.queue_offset + result.count
        if all(p.topic in _NOT_ARRIVED for p in parts):
            return 0
        return self.store.get_max_offset(topic, queue_id)

    @staticmethod
    def _batch(cmd: RemotingCommand, h: SendMessageRequestHeader, queue_id: int, conn: Connection) -> MessageBatch:
        if h.batch:
            return decode_batch_body(cmd.body, h.topic, queue_id, h.born_timestamp, h.sys_flag,
                                     h.reconsume_times or 0, born_host(conn))
        # one message: its columns made from the header's values at once (``MessageBatch.of``'s defaults, then
        # overwritten, cost numpy's fill and three slice assignments more, on every send); the flags and
        # reconsume times, nearly always 0, are shared arrays (``one_row``): one array made per send, not four
        return MessageBatch(topic=h.topic, queue_id=queue_id, bodies=[cmd.body],
                            properties=[(h.properties or "").encode()], flags=one_row(h.flag, np.int32),
                            born_timestamps=np.array([h.born_timestamp], dtype=np.int64),
                            sys_flags=one_row(h.sys_flag, np.int32),
                            reconsume_times=one_row(h.reconsume_times or 0, np.int32),
                            born_host=born_host(conn))
