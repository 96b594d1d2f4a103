"""``PopPushConsumer``: a listener called with messages the brokers hand out by pop (RocketMQ 5's
push-on-pop PushConsumer), over remoting.

No rebalance and no queue ownership: one task per (subscribed topic, broker) long-polls POP_MESSAGE over
every queue of the topic there (queue -1, which also serves the group's pop retry topic), so any number of
consumers share any number of queues and a slow one holds only what it popped. The listener runs on the
consume service's pool (:func:`~spark_mq.client.consume_service.listener_verdict`, the same verdicts as
:class:`~spark_mq.client.push_consumer.PushConsumer`'s):

- success acknowledges the batch's messages;
- failure makes them invisible for ``retry_delay_s`` more (CHANGE_MESSAGE_INVISIBLETIME): the broker's
  revive service then hands them out again through the pop retry topic, and after the group's
  ``retryMaxTimes`` sends them to ``%DLQ%<group>``;
- a message still waiting or being consumed once :data:`RENEW_SHARE` of its invisible time passed is made
  invisible for ``invisible_s`` more, so a slow listener is not raced by a redelivery.

Orderly (``orderly=True``) pops orderly (a queue's next messages only once the previous ones are
acknowledged) and consumes each queue's popped messages in offset order, one batch at a time; a failed batch
is retried in place after ``ORDERLY_SUSPEND_S``, never skipped.

At most ``max_cached_messages`` popped messages are held unfinished (flow control: the pops wait). Delivery is
at least once: a consumer that dies, or a shutdown while a pop is answered, leaves its messages to come
back after their invisible time; an acknowledgement that fails (the message came back already) leaves a
duplicate.

Thread-safety: every coroutine and method runs on one event loop (``SyncPopPushConsumer`` wraps it for
threads); only the listener runs on the pool's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spark_mq.client.config import ClientConfig
from spark_mq.client.consume_service import ORDERLY_SUSPEND_S, Listener, listener_verdict
from spark_mq.client.simple_consumer import INIT_MODE_MIN, MAX_RECEIVE, ReceivedMessage, SimpleConsumer
from spark_mq.common.errors import ClientError, ConfigError, MQClientError, RemotingError
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import EXPRESSION_TAG
from spark_mq.remoting.loop import stop_tasks

log = logging.getLogger(__name__)

POLL_S = 15.0  # a pop waits this long at the broker when it has nothing (BROKER_SUSPEND_MAX_TIME_MILLIS)
POP_ERROR_DELAY_S = 1.0  # a failed pop is tried again after this, with the topic's route refreshed
BROKER_CHECK_S = 5.0  # how often new brokers of a subscribed topic get a pop task
RENEW_SHARE = 0.5  # a message not finished once this share of its invisible time passed is renewed
_ERRORS = (RemotingError, MQClientError, ClientError)


class PopPushConsumer:
    """Push consumption by pop for consumer group ``group`` (see the module doc). ``subscribe``,
    ``register_listener``, then ``await start()``."""

    def __init__(self, group: str, config: ClientConfig, *, consume_threads: int = 20, consume_batch_size: int = 1,
                 invisible_s: float = 60.0, retry_delay_s: float = 10.0, max_cached_messages: int | None = None,
                 orderly: bool = False, init_mode: int = INIT_MODE_MIN, expression_type: str = EXPRESSION_TAG,
                 poll_s: float = POLL_S) -> None:
        """``max_cached_messages``: popped messages held unfinished at most (default twice what the pool
        consumes at once, so a slow consumer holds little); ``init_mode``: as SimpleConsumer's."""
        for name, value in (("consume_threads", consume_threads), ("consume_batch_size", consume_batch_size)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        if invisible_s <= 0 or retry_delay_s < 0 or poll_s < 0:
            raise ConfigError("invisible_s must be positive, retry_delay_s and poll_s not negative")
        self.group = group
        self.config = config
        self.consume_threads = consume_threads
        self.consume_batch_size = consume_batch_size
        self.invisible_s = invisible_s
        self.retry_delay_s = retry_delay_s
        self.max_cached = max_cached_messages or 2 * consume_threads * consume_batch_size
        if self.max_cached < 1:
            raise ConfigError(f"max_cached_messages must be at least 1, got {max_cached_messages}")
        self.orderly = orderly
        self.init_mode = init_mode
        self.expression_type = expression_type
        self.poll_s = poll_s
        self.subscriptions: dict[str, str] = {}
        self.listener: Listener | None = None
        self.simple: SimpleConsumer | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pollers: dict[tuple[str, str], asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._consuming: set[asyncio.Task] = set()
        self._cached = 0
        self._room = asyncio.Event()
        self._running = False

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages matching ``expression`` (tags, or SQL92 with ``expression_type``);
        before ``start``."""
        if self._running:
            raise ClientError("subscribe before starting the pop push consumer")
        self.subscriptions[topic] = expression

    def register_listener(self, listener: Listener) -> None:
        """``listener(messages) -> bool | ConsumeStatus``, called on a pool thread."""
        self.listener = listener

    @property
    def cached(self) -> int:
        """Popped messages not finished yet."""
        return self._cached

    async def start(self) -> PopPushConsumer:
        if self._running:
            return self
        if self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to at least one topic before starting the consumer")
        self.simple = SimpleConsumer(self.group, self.config, self.subscriptions, expression_type=self.expression_type,
                                     init_mode=self.init_mode, order=self.orderly)
        await self.simple.start()
        self._executor = ThreadPoolExecutor(self.consume_threads, thread_name_prefix=f"pop-consume-{self.group}")
        self._running = True
        await self._start_pollers()
        self._tasks = [asyncio.get_running_loop().create_task(self._watch_brokers(), name=f"pop-brokers-{self.group}")]
        return self

    async def shutdown(self) -> None:
        """Stop popping, let the listener calls under way finish (their acks sent), stop. Messages popped and
        not consumed come back to the group after their invisible time."""
        if not self._running:
            return
        self._running = False
        await stop_tasks(self._tasks + list(self._pollers.values()))
        self._tasks, self._pollers = [], {}
        assert self._executor is not None and self.simple is not None
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._consuming:
            await asyncio.wait(self._consuming)
        await self.simple.shutdown()

    async def __aenter__(self) -> PopPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- popping ---------------------------------------------------------------------------------
    async def _start_pollers(self) -> None:
        assert self.simple is not None
        loop = asyncio.get_running_loop()
        for topic in self.subscriptions:
            for broker in await self.simple.brokers(topic):
                if (topic, broker) not in self._pollers:
                    self._pollers[(topic, broker)] = loop.create_task(self._poll(topic, broker),
                                                                      name=f"pop-{topic}-{broker}")

    async def _watch_brokers(self) -> None:
        while self._running:
            await asyncio.sleep(BROKER_CHECK_S)
            try:
                await self._start_pollers()
            except _ERRORS as e:
                log.warning("group %s: routes of the subscribed topics unknown: %s", self.group, e)

    async def _poll(self, topic: str, broker: str) -> None:
        assert self.simple is not None
        while self._running:
            room = self.max_cached - self._cached
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                if self.simple.instance.broker_addr(broker) is None:
                    raise ClientError(f"the route of {topic} names no master of broker {broker}")
                got = await self.simple.pop(topic, broker, min(room, MAX_RECEIVE), self.invisible_s, self.poll_s)
            except _ERRORS as e:
                log.warning("group %s: pop of %s at %s failed: %s", self.group, topic, broker, e)
                with contextlib.suppress(*_ERRORS):  # a failed-over master has a new address
                    await self.simple.instance.subscribe_queues(topic, refresh=True)
                await asyncio.sleep(POP_ERROR_DELAY_S)
                continue
            if got:
                self._dispatch(got)

    def _dispatch(self, popped: list[ReceivedMessage]) -> None:
        self._cached += len(popped)
        loop = asyncio.get_running_loop()
        if self.orderly:
            by_queue: dict[tuple[str, str, int], list[ReceivedMessage]] = defaultdict(list)
            for m in popped:
                by_queue[(m.topic, m.broker_name, m.message.queue_id)].append(m)
            runs = [self._consume_orderly(sorted(ms, key=lambda m: m.message.queue_offset))
                    for ms in by_queue.values()]
        else:
            size = self.consume_batch_size
            runs = [self._consume_concurrently(popped[i:i + size]) for i in range(0, len(popped), size)]
        for run in runs:
            task = loop.create_task(run)
            self._consuming.add(task)
            task.add_done_callback(self._consuming.discard)

    def _finished(self, n: int) -> None:
        self._cached -= n
        self._room.set()

    # -- consuming -------------------------------------------------------------------------------
    async def _consume_concurrently(self, batch: list[ReceivedMessage]) -> None:
        try:
            if await self._listen(batch, len(batch)):
                await self._ack(batch)
            else:
                await self._change_invisible(batch, self.retry_delay_s)
        finally:
            self._finished(len(batch))

    async def _consume_orderly(self, held: list[ReceivedMessage]) -> None:
        total = len(held)
        try:
            while held:
                n = min(self.consume_batch_size, len(held))
                while not await self._listen(held, n):
                    if not self._running:  # shut down: the rest comes back after its invisible time
                        return
                    await asyncio.sleep(ORDERLY_SUSPEND_S)
                await self._ack(held[:n])
                del held[:n]
        finally:
            self._finished(total)

    async def _listen(self, held: list[ReceivedMessage], n: int) -> bool:
        """The listener's verdict on ``held[:n]``; every message of ``held`` is renewed (in place) while it
        runs or waits for a thread. False as well when the pool is gone (shutdown)."""
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        try:
            verdict = loop.run_in_executor(self._executor, listener_verdict, self.listener,
                                           [m.message for m in held[:n]], self.group, held[0].topic)
        except RuntimeError:  # the pool was shut down
            return False
        floor = 0.0  # after a renewal: a message whose renewal failed must not make this loop spin
        while True:
            renew_at = min(m.invisible_until for m in held) / 1000 - self.invisible_s * (1 - RENEW_SHARE)
            done, _ = await asyncio.wait({verdict}, timeout=max(floor, renew_at - time.time()))
            if done:
                try:
                    return verdict.result()
                except asyncio.CancelledError:  # cancelled in the pool before it ran
                    return False
            held[:] = await self._change_invisible(held, self.invisible_s)
            floor = self.invisible_s * RENEW_SHARE / 2

    async def _ack(self, batch: list[ReceivedMessage]) -> None:
        assert self.simple is not None
        try:
            await self.simple.ack_many(batch)
        except Exception as e:  # what failed comes back after its invisible time
            log.warning("group %s: ack of %d message(s) failed (those not acknowledged will be delivered again): %s",
                        self.group, len(batch), e)

    async def _change_invisible(self, batch: list[ReceivedMessage], invisible_s: float) -> list[ReceivedMessage]:
        """``batch`` made invisible for ``invisible_s`` from now; a message whose change failed keeps its
        receipt (it is, or will soon be, handed out again)."""
        assert self.simple is not None
        results = await asyncio.gather(*(self.simple.change_invisible_duration(m, invisible_s) for m in batch),
                                       return_exceptions=True)
        out = []
        for m, r in zip(batch, results, strict=True):
            if isinstance(r, Exception):
                log.warning("group %s: invisible time of %s:%d not changed: %s", self.group, m.topic,
                            m.message.queue_offset, r)
                out.append(m)
            else:
                out.append(r)
        return out


class SyncPopPushConsumer(BlockingFacade[PopPushConsumer]):
    """A blocking :class:`PopPushConsumer` on a private loop thread:
    ``with SyncPopPushConsumer(group, config) as c: c.subscribe(t); c.register_listener(f); c.start()``.
    The listener still runs on the consumer's thread pool."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, **options: Any) -> None:
        super().__init__(lambda: PopPushConsumer(group, config, **options), f"spark-mq-poppush-{group}")

    @property
    def consumer(self) -> PopPushConsumer:
        return self._target

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def subscribe(self, topic: str, expression: str = '*') -> None:
        """Blocking :meth:`PopPushConsumer.subscribe`."""
        return self._call(self._target.subscribe, topic=topic, expression=expression)

    def register_listener(self, listener: Listener) -> None:
        """Blocking :meth:`PopPushConsumer.register_listener`."""
        return self._call(self._target.register_listener, listener=listener)

    def start(self) -> PopPushConsumer:
        """Blocking :meth:`PopPushConsumer.start`."""
        return self._run(self._target.start())

    def shutdown(self) -> None:
        """Blocking :meth:`PopPushConsumer.shutdown`."""
        self._close_with(self._target.shutdown)
    # -- end of generated blocking twins --
