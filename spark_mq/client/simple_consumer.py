"""``SimpleConsumer`` (RocketMQ 5's SimpleConsumer, over remoting): the broker hands messages out (pop), the
application acknowledges each one; one not acknowledged within its invisible duration is handed out again,
to this consumer or another of the group. Any number of consumers share a topic's queues: no rebalance, no
queue left idle behind a slow consumer. Delivery is at least once; ``delivery_attempt`` says which.

``SyncSimpleConsumer`` is its blocking twin on a private loop thread.

Thread-safety: ``SimpleConsumer`` runs on one event loop; its coroutines may interleave freely.
``SyncSimpleConsumer`` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import ClientInstance
from spark_mq.common.errors import ClientError, ConfigError
from spark_mq.common.names import RETRY_GROUP_TOPIC_PREFIX
from spark_mq.common.properties import RETRY_TOPIC
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import EXPRESSION_TAG, SUB_ALL, BatchAck, BatchAckMessageRequestBody
from spark_mq.remoting.headers import AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, PopMessageRequestHeader
from spark_mq.remoting.pop_receipt import Receipt, parse_queue_info, pop_of

MAX_RECEIVE = 32  # the broker's maximum per pop
INIT_MODE_MIN = 0  # ConsumeInitMode.MIN: a group new to a queue starts at its first message
INIT_MODE_MAX = 1  # ConsumeInitMode.MAX: ... at its end


@dataclass(frozen=True)
class ReceivedMessage:
    """A message handed out to this consumer: ``ack`` it (or change its invisible duration) before
    ``invisible_until`` (epoch ms), else it is handed out again."""

    message: StoredMessage
    topic: str  # the topic subscribed (a redelivery is read from the group's pop retry topic)
    broker_name: str
    receipt: str  # RocketMQ's receipt handle (extraInfo)

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def delivery_attempt(self) -> int:
        return self.message.reconsume_times + 1

    @property
    def invisible_until(self) -> int:
        return Receipt.parse(self.receipt).visible_at


class SimpleConsumer:
    """Pop consumption of ``subscriptions`` (topic → tag expression, or SQL92 with ``expression_type``)
    by consumer group ``group``. ``await start()`` first."""

    def __init__(self, group: str, config: ClientConfig, subscriptions: dict[str, str], *,
                 expression_type: str = EXPRESSION_TAG, init_mode: int = INIT_MODE_MIN, order: bool = False,
                 instance: ClientInstance | None = None) -> None:
        """``init_mode``: where a group new to a queue starts (INIT_MODE_MIN: its first message; INIT_MODE_MAX:
        messages sent from now on); ``order``: orderly pop (a queue's next message only once the previous ones
        are acknowledged)."""
        if not group:
            raise ConfigError("consumer group is empty")
        if not subscriptions:
            raise ConfigError("a simple consumer subscribes at least one topic")
        self.group = group
        self.config = config
        self.subscriptions = dict(subscriptions)
        self.expression_type = expression_type
        self.init_mode = init_mode
        self.order = order
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(config)
        self._turn = itertools.count()
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        if self._own_instance:
            await self.instance.start()
        for topic in self.subscriptions:
            if not await self.instance.subscribe_queues(topic, refresh=True):
                raise ClientError(f"topic {topic!r} has no readable queue: does it exist?")
        self._started = True

    async def shutdown(self) -> None:
        """Stop (messages not acknowledged come back after their invisible duration)."""
        if not self._started:
            return
        self._started = False
        if self._own_instance:
            await self.instance.close()

    def _check_started(self) -> None:
        if not self._started:
            raise ClientError(f"simple consumer of group {self.group} is not started: call start() first")

    async def brokers(self, topic: str) -> list[str]:
        """The names of the brokers serving ``topic``'s readable queues."""
        return sorted({mq.broker_name for mq in await self.instance.subscribe_queues(topic)})

    async def receive(self, max_nums: int = 16, invisible_s: float = 30.0,
                      wait_s: float = 0.0) -> list[ReceivedMessage]:
        """Up to ``max_nums`` messages (1..32) of the subscribed topics, invisible to the group's other
        consumers for ``invisible_s``; waits up to ``wait_s`` for some when none is there. Every broker of
        every topic is asked in turn (the last one asked holds the request while it waits)."""
        self._check_started()
        if not 0 < max_nums <= MAX_RECEIVE:
            raise ConfigError(f"max_nums must be in 1..{MAX_RECEIVE}, got {max_nums}")
        turn = next(self._turn)
        targets = [(t, b) for t in self.subscriptions for b in await self.brokers(t)]
        targets = targets[turn % len(targets):] + targets[:turn % len(targets)]
        for i, (topic, broker) in enumerate(targets):
            last = i == len(targets) - 1
            found = await self.pop(topic, broker, max_nums, invisible_s, wait_s if last else 0.0)
            if found:
                return found
        return []

    async def pop(self, topic: str, broker: str, max_nums: int, invisible_s: float,
                  wait_s: float, queue_id: int = -1) -> list[ReceivedMessage]:
        """One POP_MESSAGE of ``topic`` (queue ``queue_id``, -1: every queue) at broker ``broker``:
        :meth:`receive` asks each broker in turn with it; a push consumer long-polls each one."""
        self._check_started()
        addr = self.instance.broker_addr(broker)
        if addr is None:
            return []
        header = PopMessageRequestHeader(
            consumer_group=self.group, topic=topic, queue_id=queue_id, max_msg_nums=max_nums,
            invisible_time=int(invisible_s * 1000), poll_time=int(wait_s * 1000), born_time=int(time.time() * 1000),
            init_mode=self.init_mode, exp_type=self.expression_type, exp=self.subscriptions[topic] or SUB_ALL,
            order=self.order)
        response = await self.instance.api.pop_message(addr, header)
        if response.header is None:
            return []
        h = response.header
        starts = parse_queue_info(h.start_offset_info)  # where the pop started in each queue: names its checkpoint
        prefixes: dict[tuple[bool, int], str] = {}  # the receipt fields the messages of one queue share
        out = []
        for msg in response.messages:
            retry = msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            prefix = prefixes.get((retry, msg.queue_id))
            if prefix is None:
                receipt = Receipt(int(starts.get((retry, msg.queue_id), msg.queue_offset)), h.pop_time,
                                  h.invisible_time, h.revive_qid, retry, broker, msg.queue_id, None)
                prefix = prefixes[(retry, msg.queue_id)] = receipt.prefix
            if retry:
                msg = replace(msg, topic=msg.properties.get(RETRY_TOPIC, topic))
            out.append(ReceivedMessage(msg, topic, broker, prefix + str(msg.queue_offset)))
        return out

    async def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge ``message``: done, never handed out again. MQClientError NO_MESSAGE when it is no longer
        in flight (its invisible duration passed: it is, or will be, handed out again)."""
        self._check_started()
        r = Receipt.parse(message.receipt)
        await self.instance.api.ack_message(self._addr(message), AckMessageRequestHeader(
            consumer_group=self.group, topic=message.topic, queue_id=r.queue_id, extra_info=message.receipt,
            offset=message.message.queue_offset))

    async def ack_many(self, messages: Sequence[ReceivedMessage]) -> None:
        """Acknowledge ``messages`` with one BATCH_ACK_MESSAGE per broker, an entry per pop of one queue (as
        RocketMQ 5's clients batch acks): one request and one revive record per pop instead of one per message.
        MQClientError NO_MESSAGE when a pop's messages were all no longer in flight; the others are
        acknowledged all the same."""
        self._check_started()
        by_pop: dict[tuple[str, str, str], list[ReceivedMessage]] = {}
        for m in messages:
            by_pop.setdefault((m.broker_name, m.topic, pop_of(m.receipt)), []).append(m)
        by_broker: dict[str, list[BatchAck]] = {}
        for (broker, topic, _), acked in by_pop.items():
            r = Receipt.parse(acked[0].receipt)
            by_broker.setdefault(broker, []).append(BatchAck(
                self.group, topic, r.retry, r.ck_offset, r.queue_id, r.revive_qid, r.pop_time, r.invisible_ms,
                tuple(m.message.queue_offset for m in acked)))
        requests = []
        for broker, acks in by_broker.items():
            addr = self.instance.broker_addr(broker)
            if addr is None:
                raise ClientError(f"broker {broker} of the messages is not in the route of their topic")
            requests.append(self.instance.api.batch_ack_message(addr, BatchAckMessageRequestBody(broker, acks)))
        results = await asyncio.gather(*requests, return_exceptions=True)
        for e in results:
            if isinstance(e, BaseException):
                raise e

    async def change_invisible_duration(self, message: ReceivedMessage, invisible_s: float) -> ReceivedMessage:
        """Keep ``message`` invisible for ``invisible_s`` from now; returns it with its new receipt (ack that
        one: the old receipt is spent)."""
        self._check_started()
        r = Receipt.parse(message.receipt)
        h = await self.instance.api.change_invisible_time(self._addr(message), ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group, topic=message.topic, queue_id=r.queue_id, extra_info=message.receipt,
            offset=message.message.queue_offset, invisible_time=int(invisible_s * 1000)))
        ck_offset = r.ck_offset if r.order else message.message.queue_offset
        new = replace(r, ck_offset=ck_offset, pop_time=h.pop_time, invisible_ms=h.invisible_time,
                      revive_qid=h.revive_qid)
        return replace(message, receipt=new.encode())

    def _addr(self, message: ReceivedMessage) -> str:
        addr = self.instance.broker_addr(message.broker_name)
        if addr is None:
            raise ClientError(f"broker {message.broker_name} of the message is not in the route of {message.topic}")
        return addr


class SyncSimpleConsumer(BlockingFacade[SimpleConsumer]):
    """A blocking :class:`SimpleConsumer`: ``with SyncSimpleConsumer(group, config, {topic: "*"}) as c: ...``."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, subscriptions: dict[str, str], *,
                 expression_type: str = EXPRESSION_TAG, init_mode: int = INIT_MODE_MIN, order: bool = False) -> None:
        super().__init__(lambda: SimpleConsumer(group, config, subscriptions, expression_type=expression_type,
                                                init_mode=init_mode, order=order), f"spark-mq-simple-{group}")

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def start(self) -> None:
        """Blocking :meth:`SimpleConsumer.start`."""
        return self._run(self._target.start())

    def shutdown(self) -> None:
        """Blocking :meth:`SimpleConsumer.shutdown`."""
        self._close_with(self._target.shutdown)

    def brokers(self, topic: str) -> list[str]:
        """Blocking :meth:`SimpleConsumer.brokers`."""
        return self._run(self._target.brokers(topic=topic))

    def receive(self, max_nums: int = 16, invisible_s: float = 30.0, wait_s: float = 0.0) -> list[ReceivedMessage]:
        """Blocking :meth:`SimpleConsumer.receive`."""
        return self._run(self._target.receive(max_nums=max_nums, invisible_s=invisible_s, wait_s=wait_s))

    def pop(self, topic: str, broker: str, max_nums: int, invisible_s: float, wait_s: float,
            queue_id: int = -1) -> list[ReceivedMessage]:
        """Blocking :meth:`SimpleConsumer.pop`."""
        return self._run(self._target.pop(topic=topic, broker=broker, max_nums=max_nums, invisible_s=invisible_s,
                                          wait_s=wait_s, queue_id=queue_id))

    def ack(self, message: ReceivedMessage) -> None:
        """Blocking :meth:`SimpleConsumer.ack`."""
        return self._run(self._target.ack(message=message))

    def ack_many(self, messages: Sequence[ReceivedMessage]) -> None:
        """Blocking :meth:`SimpleConsumer.ack_many`."""
        return self._run(self._target.ack_many(messages=messages))

    def change_invisible_duration(self, message: ReceivedMessage, invisible_s: float) -> ReceivedMessage:
        """Blocking :meth:`SimpleConsumer.change_invisible_duration`."""
        return self._run(self._target.change_invisible_duration(message=message, invisible_s=invisible_s))
    # -- end of generated blocking twins --
