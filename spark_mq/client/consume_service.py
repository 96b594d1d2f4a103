"""How a :class:`~spark_mq.client.push_consumer.PushConsumer` consumes what it pulled (RocketMQ's
``ConsumeMessageConcurrentlyService`` and ``ConsumeMessageOrderlyService``): the listener runs on a
pool of threads, over the messages the pulls put in each queue's :class:`ProcessQueue`.

- concurrently: batches of ``batch_size`` in any order; a failed batch is sent back to the broker
  (CONSUMER_SEND_MSG_BACK), one whose send-back failed is consumed again here after
  :data:`SEND_BACK_RETRY_DELAY_S`. A finished batch leaves the ProcessQueue and its lowest
  unfinished offset is committed.
- orderly: one batch of a queue at a time, in offset order, while the queue's broker lock holds; a
  failed batch is retried in place after :data:`ORDERLY_SUSPEND_S`, never skipped.

The commit itself is the consumer's (``commit(slot, offset)``): it knows the offset store.

Thread-safety: every method runs on the consumer's event loop; only the listener runs on the pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import broker_addr_of
from spark_mq.client.process_queue import ProcessQueue
from spark_mq.common.errors import ClientError, MQClientError, RemotingError
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import UNIQ_KEY
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import MessageQueue
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader

log = logging.getLogger(__name__)

FLOW_CONTROL_DELAY_S = 0.05  # a queue paused (flow control, or its orderly lock expired) looks again after this
SEND_BACK_RETRY_DELAY_S = 5.0  # a batch whose send-back failed is consumed again locally after this
ORDERLY_SUSPEND_S = 1.0  # suspendCurrentQueueTimeMillis


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[StoredMessage]], "bool | ConsumeStatus | None"]


def listener_verdict(listener: Listener, messages: list[StoredMessage], group: str, source: object) -> bool:
    """On a pool thread: whether ``listener`` consumed ``messages`` (of ``source``, for the log) successfully;
    False, None, RECONSUME_LATER or an exception mean failure."""
    try:
        status = listener(messages)
    except Exception:
        log.exception("group %s: the listener raised on %d messages of %s", group, len(messages), source)
        return False
    return status is True or status == ConsumeStatus.CONSUME_SUCCESS


@dataclasses.dataclass(eq=False)
class QueueSlot:
    """One queue a push consumer was assigned: its ProcessQueue, pull position and tasks."""

    mq: MessageQueue
    pq: ProcessQueue
    tags: frozenset[str] | None
    expression: str
    expression_type: str
    next_offset: int = -1
    task: asyncio.Task | None = None
    consuming: set[asyncio.Task] = dataclasses.field(default_factory=set)
    retries: set[asyncio.TimerHandle] = dataclasses.field(default_factory=set)
    orderly_task: asyncio.Task | None = None
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    released: bool = False  # committed and handed over: late consumption results are not committed


Commit = Callable[[QueueSlot, int], None]
"""``commit(slot, offset)``: the queue's messages below ``offset`` are consumed."""


class ConsumeService:
    """Runs ``listener`` for consumer group ``group`` on a pool of ``threads`` (see the module doc);
    ``close`` stops the pool."""

    def __init__(self, group: str, listener: Listener, instance: ClientInstance, commit: Commit, *, threads: int,
                 batch_size: int, orderly: bool, clustering: bool, max_reconsume_times: int,
                 retry_delay_level: int) -> None:
        self.group = group
        self.listener = listener
        self.instance = instance
        self._commit = commit
        self.batch_size = batch_size
        self.orderly = orderly
        self.clustering = clustering
        self.max_reconsume_times = max_reconsume_times
        self.retry_delay_level = retry_delay_level
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=f"consume-{group}")

    def close(self) -> None:
        """Stop the pool: listener calls not started yet are cancelled, running ones finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _call_listener(self, slot: QueueSlot, messages: list[StoredMessage]) -> bool | None:
        """On a pool thread: the listener's verdict; None when the queue was dropped before it ran."""
        if slot.pq.dropped and not self.orderly:
            return None
        return listener_verdict(self.listener, messages, self.group, slot.mq)

    def dispatch(self, slot: QueueSlot, messages: list[StoredMessage]) -> None:
        if self.orderly:
            slot.wake.set()
            return
        loop = asyncio.get_running_loop()
        for i in range(0, len(messages), self.batch_size):
            self._submit(slot, messages[i:i + self.batch_size], loop)

    def _submit(self, slot: QueueSlot, batch: list[StoredMessage], loop: asyncio.AbstractEventLoop) -> None:
        task = loop.create_task(self._consume_concurrently(slot, batch))
        slot.consuming.add(task)
        task.add_done_callback(slot.consuming.discard)

    async def _consume_concurrently(self, slot: QueueSlot, batch: list[StoredMessage]) -> None:
        loop = asyncio.get_running_loop()
        ok = await loop.run_in_executor(self._executor, self._call_listener, slot, batch)
        if ok is None:
            return
        done = batch
        if not ok and self.clustering:
            failed = []
            for m in batch:
                if not await self._send_back(slot, m):
                    failed.append(m)
            if failed:
                done = [m for m in batch if m not in failed]
                if not slot.pq.dropped:
                    handle = loop.call_later(SEND_BACK_RETRY_DELAY_S, self._submit, slot, failed, loop)
                    slot.retries.add(handle)
        elif not ok:
            log.warning("group %s: broadcasting consumption of %d messages failed; they are not retried",
                        self.group, len(batch))
        if slot.released:
            return
        self._commit(slot, slot.pq.remove(m.queue_offset for m in done))

    async def _send_back(self, slot: QueueSlot, m: StoredMessage) -> bool:
        """CONSUMER_SEND_MSG_BACK to the broker the message came from; False if that failed."""
        origin = m.properties.get(UNIQ_KEY) or offset_msg_id(m.store_host, m.physical_offset)
        header = ConsumerSendMsgBackRequestHeader(
            offset=m.physical_offset, group=self.group, delay_level=self.retry_delay_level, origin_msg_id=origin,
            origin_topic=m.topic, max_reconsume_times=self.max_reconsume_times)
        try:
            addr = await broker_addr_of(self.instance, slot.mq)
            await self.instance.api.consumer_send_msg_back(addr, header)
        except (RemotingError, ClientError, MQClientError) as e:
            log.warning("group %s: send-back of %s failed: %s", self.group, origin, e)
            return False
        return True

    async def consume_orderly(self, slot: QueueSlot) -> None:
        loop = asyncio.get_running_loop()
        pq = slot.pq
        while not pq.dropped:
            if pq.lock_expired():
                await asyncio.sleep(FLOW_CONTROL_DELAY_S)
                continue
            batch = pq.take(self.batch_size)
            if not batch:
                slot.wake.clear()
                await slot.wake.wait()
                continue
            while not await loop.run_in_executor(self._executor, self._call_listener, slot, batch):
                if pq.dropped:  # the release commits below this batch; the next owner consumes it
                    return
                await asyncio.sleep(ORDERLY_SUSPEND_S)
                if pq.dropped:
                    return
            if slot.released:
                return
            self._commit(slot, pq.remove(m.queue_offset for m in batch))
