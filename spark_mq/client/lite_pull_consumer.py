"""``LitePullConsumer`` (RocketMQ's DefaultLitePullConsumer): a group member — it subscribes to
topics, owns the queues the allocation strategy gives it (rebalancing every
``rebalance_interval_s`` and at once on NOTIFY_CONSUMER_IDS_CHANGED), pulls them in background
tasks into a bounded buffer, and hands out messages with ``poll``. With ``auto_commit`` what
``poll`` returned counts as consumed and is persisted to the broker every
``persist_consumer_offset_interval_s``; otherwise ``commit()`` commits what was polled. A queue
given up in a rebalance has its offset persisted before it is released, and ``shutdown`` persists
every offset before leaving the group, so the next owner starts where this one stopped. A queue
that moves between two members that both stay reads from the offset its old owner last persisted
(the new owner may read it before the old one gives it up): what was polled since then is
delivered again — at least once, as RocketMQ.

An admin's offset reset (RESET_CONSUMER_CLIENT_OFFSET from the brokers) moves each owned queue of the
topic to its new offset as ``seek`` does and makes it the offset persisted next; what was buffered but
not polled is dropped.

``SyncLitePullConsumer`` is its blocking twin on a private loop thread.

Thread-safety: ``LitePullConsumer`` runs on one event loop (not thread-safe); its coroutines may
interleave freely. ``SyncLitePullConsumer`` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from spark_mq.client.config import ClientConfig
from spark_mq.client.group_membership import GroupMembership
from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import RemoteBrokerOffsetStore, broker_addr_of, query_committed_offset
from spark_mq.client.queue_pull import ConsumerPullResult, pull_queue
from spark_mq.client.rebalance import AllocateStrategy, RebalanceResult, get_strategy, rebalance_result
from spark_mq.client.results import PullStatus
from spark_mq.client.subscription import (
    ConsumeFrom,
    check_in_brokers,
    consume_from_where,
    parse_consume_from,
    parse_tags,
    resolve_start_offset,
    subscription_data,
)
from spark_mq.common.deadlines import Deadlines
from spark_mq.common.errors import ClientError, ConfigError, MQClientError, RemotingError
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import EXPRESSION_TAG, SUB_ALL, ConsumerData, MessageQueue
from spark_mq.remoting.loop import stop_tasks, wait_event

log = logging.getLogger(__name__)

PULL_RETRY_BACKOFF_S = 1.0  # after a failed pull, as PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


@dataclass(eq=False)
class _QueueState:
    """One owned queue: where its pull task reads next, and its pull task."""

    mq: MessageQueue
    next_offset: int
    version: int = 0  # bumped by seek: batches pulled before are stale
    task: asyncio.Task | None = None
    dropped: bool = False
    offered: bool = False  # the answer of the pull in flight was buffered as the connection read it


@dataclass(eq=False)
class _Batch:
    state: _QueueState
    version: int
    messages: list[StoredMessage]
    next_offset: int  # offset after the pull (past messages filtered out too)


@dataclass
class _Subscription:
    expression: str
    tags: frozenset[str] | None = field(default=None)
    expression_type: str = EXPRESSION_TAG


class LitePullConsumer:
    """A member of consumer group ``group`` that polls messages of the queues it owns.

    ``consume_from`` ("last", "first" or a timestamp in ms) applies to a queue only when the group
    has no committed offset for it. ``poll`` returns one pulled batch (at most ``pull_batch_size``
    messages of one queue), or ``[]`` after ``timeout`` seconds.
    """

    def __init__(self, group: str, config: ClientConfig, *, auto_commit: bool = True,
                 consume_from: ConsumeFrom | str = "last", allocate_strategy: str | AllocateStrategy = "average",
                 pull_batch_size: int = 32, poll_timeout_s: float = 5.0, rebalance_interval_s: float = 20.0,
                 pull_suspend_s: float = 5.0, buffer_batches: int = 64,
                 instance: ClientInstance | None = None) -> None:
        if not group:
            raise ConfigError("consumer group is empty")
        if pull_batch_size <= 0 or buffer_batches <= 0:
            raise ConfigError(f"pull_batch_size ({pull_batch_size}) and buffer_batches ({buffer_batches}) "
                              f"must be positive")
        self.group = group
        self.config = config
        self.auto_commit = auto_commit
        self.consume_from = parse_consume_from(consume_from)
        self.allocate = get_strategy(allocate_strategy) if isinstance(allocate_strategy, str) else allocate_strategy
        self.pull_batch_size = pull_batch_size
        self.poll_timeout_s = poll_timeout_s
        self.rebalance_interval_s = rebalance_interval_s
        self.pull_suspend_s = pull_suspend_s
        self.buffer_batches = buffer_batches
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(config)
        self.offset_store = RemoteBrokerOffsetStore(self.instance, group)
        self.membership = GroupMembership(self.instance, group, self.allocate)
        self._subscriptions: dict[str, _Subscription] = {}
        self._states: dict[MessageQueue, _QueueState] = {}
        self._polled: dict[MessageQueue, int] = {}  # offset after the last polled message, not yet committed
        self._buffer: asyncio.Queue[_Batch] | None = None
        self._pollers: deque[asyncio.Future[bool]] = deque()  # polls waiting for a batch
        self._poll_deadlines = Deadlines()  # their timeouts, behind one loop timer
        self._wake: asyncio.Event | None = None
        self._rebalance_lock: asyncio.Lock | None = None
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self.rebalances: list[RebalanceResult] = []  # the changing ones, newest last (for tests and tools)

    # -- life cycle ---------------------------------------------------------------------------

    async def subscribe(self, topic: str, expression: str = SUB_ALL, expression_type: str = EXPRESSION_TAG) -> None:
        """Read ``topic`` (messages whose tag matches ``expression``, e.g. ``"a || b"``, or with
        ``expression_type="SQL92"`` whose properties satisfy it): a SQL92 expression is checked by
        the topic's brokers here, MQClientError (SUBSCRIPTION_PARSE_FAILED, with the position) if one
        refuses it."""
        sub = subscription_data(topic, expression, expression_type=expression_type)
        await check_in_brokers(self.instance, self.group, sub)
        self._subscriptions[topic] = _Subscription(expression, parse_tags(expression, expression_type),
                                                   expression_type)
        if self._started:
            await self.instance.route(topic, refresh=True)
            await self.instance.heartbeat_all()
            self._wake.set()

    async def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self._started:
            await self.instance.heartbeat_all()
            self._wake.set()

    async def start(self) -> None:
        """Join the group: heartbeat, take this member's queues, start pulling and rebalancing."""
        if self._started:
            return
        self._buffer = asyncio.Queue(self.buffer_batches)
        self._wake = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        if self._own_instance:
            await self.instance.start()
        try:
            for topic in self._subscriptions:
                if await self.instance.route(topic, refresh=True) is None:
                    log.warning("group %s: topic %s has no route yet; rebalancing will retry", self.group, topic)
        except BaseException:  # no NameServer answered: leave nothing running behind
            if self._own_instance:
                await self.instance.close()
            raise
        self.instance.register_consumer(self.group, self._consumer_data, self._wake.set, self._reset_offsets)
        self._started = True
        await self.instance.heartbeat_all()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._rebalance_loop(), name=f"rebalance-{self.group}"),
                       loop.create_task(self._persist_loop(), name=f"persist-offsets-{self.group}")]

    async def shutdown(self) -> None:
        """Stop pulling, persist every owned queue's offset, then leave the group."""
        if not self._started:
            if self._own_instance:  # a SQL92 subscribe may have connected (CHECK_CLIENT_CONFIG)
                await self.instance.close()
            return
        self._started = False
        await stop_tasks(self._tasks)
        self._tasks = []
        owned = set(self._states)
        for state in self._states.values():
            state.dropped = True
        await stop_tasks([s.task for s in self._states.values() if s.task is not None])
        try:
            await self.offset_store.persist_all(owned)
        finally:
            self._states.clear()
            await self.membership.leave()
            if self._own_instance:
                await self.instance.close()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, consume_type="CONSUME_ACTIVELY", message_model="CLUSTERING",
                            consume_from_where=consume_from_where(self.consume_from),
                            subscription_data_set=[subscription_data(t, s.expression, expression_type=s.expression_type)
                                                   for t, s in sorted(self._subscriptions.items())])

    # -- rebalance ----------------------------------------------------------------------------

    def assignment(self) -> frozenset[MessageQueue]:
        """The queues this member owns now."""
        return frozenset(self._states)

    async def _rebalance_loop(self) -> None:
        while True:
            await wait_event(self._wake, self.rebalance_interval_s)
            self._wake.clear()
            try:
                await self.rebalance()
            except Exception:  # retried at the next notification or interval
                log.exception("group %s: rebalance failed", self.group)

    async def rebalance(self) -> RebalanceResult:
        """Allocate the subscribed topics' queues now; give up removed queues (offset persisted
        first), start pulling added ones from the group's committed offset or ``consume_from``."""
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            kept: set[MessageQueue] = set()  # topics whose member list is unknown now: keep what we own
            for topic in list(self._subscriptions):
                mine = await self.membership.allocate(topic)
                if mine is None:
                    kept |= {mq for mq in self._states if mq.topic == topic}
                    continue
                wanted |= set(mine)
            result = rebalance_result(set(self._states), wanted | kept)
            for mq in sorted(result.removed):
                await self._release(mq)
            for mq in sorted(result.added):
                if not self._started:
                    break
                try:
                    offset = await resolve_start_offset(self.instance, self.offset_store, mq, self.consume_from)
                except (RemotingError, MQClientError, ClientError) as e:
                    log.warning("group %s: no start offset for %s (retried at the next rebalance): %s",
                                self.group, mq, e)
                    continue
                self._assign(mq, offset)
            if result.changed:
                log.info("group %s: %s owns %d queues (+%d -%d)", self.group, self.instance.client_id,
                         len(self._states), len(result.added), len(result.removed))
                self.rebalances.append(result)
            return result

    def _assign(self, mq: MessageQueue, offset: int) -> None:
        state = _QueueState(mq, offset)
        self._states[mq] = state
        state.task = asyncio.get_running_loop().create_task(self._pull_loop(state), name=f"pull-{mq}")

    async def _release(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq``, persist its offset, forget it (polls ignore its buffered batches)."""
        state = self._states.pop(mq)
        state.dropped = True  # from here on poll skips its batches: the offset below is final
        self._polled.pop(mq, None)
        if state.task is not None:
            await stop_tasks([state.task])
        try:
            await self.offset_store.persist(mq)
        except (RemotingError, MQClientError, ClientError) as e:
            log.warning("group %s: persisting the offset of released %s failed: %s", self.group, mq, e)
        self.offset_store.remove(mq)

    # -- pulling ------------------------------------------------------------------------------

    async def _pull_loop(self, state: _QueueState) -> None:
        sub = self._subscriptions.get(state.mq.topic)
        expression = sub.expression if sub else SUB_ALL
        expression_type = sub.expression_type if sub else EXPRESSION_TAG
        while not state.dropped:
            version, offset = state.version, state.next_offset
            state.offered = False
            try:
                result = await pull_queue(self.instance, self.group, state.mq, offset, self.pull_batch_size,
                                          expression, suspend_s=self.pull_suspend_s, expression_type=expression_type,
                                          on_answer=lambda r, v=version: self._offer(state, v, r))
            except (RemotingError, MQClientError, ClientError) as e:
                log.warning("group %s: pulling %s at %d failed: %s", self.group, state.mq, offset, e)
                await asyncio.sleep(PULL_RETRY_BACKOFF_S)
                continue
            if state.dropped or version != state.version:
                continue
            if result.status == PullStatus.FOUND and not state.offered:  # the buffer was full: wait for room
                await self._buffer.put(_Batch(state, version, result.messages, result.next_begin_offset))
                if self._wake_poller():
                    # one loop turn: the application gets these messages before the next pull is
                    # built and sent (a message arriving meanwhile waits in the queue, not lost)
                    await asyncio.sleep(0)
            elif result.status == PullStatus.OFFSET_ILLEGAL:
                log.warning("group %s: offset %d of %s is illegal (min %d, max %d); going on from %d", self.group,
                            offset, state.mq, result.min_offset, result.max_offset, result.next_begin_offset)
            if version == state.version:
                state.next_offset = result.next_begin_offset

    def _offer(self, state: _QueueState, version: int, result: ConsumerPullResult) -> None:
        """A pull's answer as the connection reads it: its messages buffered and a waiting ``poll`` woken
        right there, so that ``poll`` resumes in the next loop turn, before the pull loop (which sends the
        next pull after it). With the buffer full the pull loop waits for room instead."""
        if (result.status == PullStatus.FOUND and not state.dropped and version == state.version
                and not self._buffer.full()):
            self._buffer.put_nowait(_Batch(state, version, result.messages, result.next_begin_offset))
            state.offered = True
            self._wake_poller()

    async def poll(self, timeout: float | None = None) -> list[StoredMessage]:
        """The next batch of messages of one owned queue, or ``[]`` once ``timeout`` s pass."""
        if not self._started:
            raise ClientError(f"lite pull consumer of group {self.group} is not started: call start() first")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.poll_timeout_s if timeout is None else timeout)
        while True:
            if self._buffer.empty():
                if not await self._batch_put(deadline - loop.time()):
                    return []
                continue  # another poll may have taken it
            batch = self._buffer.get_nowait()
            state = batch.state
            if state.dropped or self._states.get(state.mq) is not state or batch.version != state.version:
                continue  # the queue was released or seeked since this pull
            if self.auto_commit:
                self.offset_store.update(state.mq, batch.next_offset)
            else:
                self._polled[state.mq] = batch.next_offset
            if batch.messages:
                return batch.messages

    async def _batch_put(self, timeout: float) -> bool:
        """Wait until a pull loop buffers a batch (True) or ``timeout`` s pass (False).

        A bare future woken by the pull loop: ``asyncio.wait_for(queue.get())`` costs a task and
        three loop turns between a pull's response and ``poll`` returning its messages."""
        if timeout <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pollers.append(fut)
        deadline = self._poll_deadlines.add(timeout, _resolve, fut, False)
        try:
            return await fut
        finally:
            self._poll_deadlines.remove(deadline)
            if fut in self._pollers:  # a timeout or a cancel: ``_wake_poller`` did not take it out
                self._pollers.remove(fut)

    def _wake_poller(self) -> bool:
        """Wake one waiting ``poll`` (a batch was just buffered); False if none was waiting."""
        while self._pollers:
            fut = self._pollers.popleft()
            if not fut.done():
                fut.set_result(True)
                return True
        return False

    # -- offsets ------------------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit what ``poll`` returned (manual mode) and persist the owned queues' offsets."""
        for mq, offset in self._polled.items():
            if mq in self._states:
                self.offset_store.update(mq, offset)
        self._polled.clear()
        await self.offset_store.persist_all(set(self._states))

    async def committed(self, mq: MessageQueue) -> int:
        """The group's offset of ``mq`` at its broker (-1: none); the in-memory offset is left alone."""
        addr = await broker_addr_of(self.instance, mq)
        offset = await query_committed_offset(self.instance.api, addr, self.group, mq)
        return -1 if offset is None else offset

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Read ``mq`` from ``offset`` on (it must be owned and min <= offset <= max)."""
        state = self._states.get(mq)
        if state is None:
            raise ClientError(f"{mq} is not assigned to this consumer; assignment: {sorted(self._states)}")
        addr = await broker_addr_of(self.instance, mq)
        low = await self.instance.api.get_min_offset(addr, mq.topic, mq.queue_id)
        high = await self.instance.api.get_max_offset(addr, mq.topic, mq.queue_id)
        if low is not None and high is not None and not low <= offset <= high:
            raise ClientError(f"seek offset {offset} of {mq} is outside [{low}, {high}]")
        await self._move(state, offset)

    async def _move(self, state: _QueueState, offset: int) -> None:
        """Pull ``state``'s queue from ``offset`` on; batches pulled before are ignored."""
        if state.task is not None:
            await stop_tasks([state.task])
        state.version += 1
        state.next_offset = offset
        self._polled.pop(state.mq, None)
        if not state.dropped:
            state.task = asyncio.get_running_loop().create_task(self._pull_loop(state), name=f"pull-{state.mq}")

    async def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Adopt an admin's reset: each owned queue of ``offsets`` goes on from, and next persists, its new offset."""
        for mq, offset in offsets.items():
            state = self._states.get(mq)
            if state is None or mq.topic != topic:
                continue
            self.offset_store.update(mq, offset)
            await self._move(state, offset)
            log.info("group %s: offset of %s reset to %d by an admin", self.group, mq, offset)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.persist_consumer_offset_interval_s)
            try:
                await self.offset_store.persist_all(set(self._states))
            except Exception:
                log.exception("group %s: persisting offsets failed", self.group)



class SyncLitePullConsumer(BlockingFacade[LitePullConsumer]):
    """A blocking :class:`LitePullConsumer` (same keyword arguments)."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, **kwargs: object) -> None:
        super().__init__(lambda: LitePullConsumer(group, config, **kwargs), f"spark-mq-lite-pull-{group}")

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def subscribe(self, topic: str, expression: str = SUB_ALL, expression_type: str = EXPRESSION_TAG) -> None:
        """Blocking :meth:`LitePullConsumer.subscribe`."""
        return self._run(self._target.subscribe(topic=topic, expression=expression, expression_type=expression_type))

    def unsubscribe(self, topic: str) -> None:
        """Blocking :meth:`LitePullConsumer.unsubscribe`."""
        return self._run(self._target.unsubscribe(topic=topic))

    def start(self) -> None:
        """Blocking :meth:`LitePullConsumer.start`."""
        return self._run(self._target.start())

    def shutdown(self) -> None:
        """Blocking :meth:`LitePullConsumer.shutdown`."""
        self._close_with(self._target.shutdown)

    def assignment(self) -> frozenset[MessageQueue]:
        """Blocking :meth:`LitePullConsumer.assignment`."""
        return self._call(self._target.assignment)

    def rebalance(self) -> RebalanceResult:
        """Blocking :meth:`LitePullConsumer.rebalance`."""
        return self._run(self._target.rebalance())

    def poll(self, timeout: float | None = None) -> list[StoredMessage]:
        """Blocking :meth:`LitePullConsumer.poll`."""
        return self._run(self._target.poll(timeout=timeout))

    def commit(self) -> None:
        """Blocking :meth:`LitePullConsumer.commit`."""
        return self._run(self._target.commit())

    def committed(self, mq: MessageQueue) -> int:
        """Blocking :meth:`LitePullConsumer.committed`."""
        return self._run(self._target.committed(mq=mq))

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Blocking :meth:`LitePullConsumer.seek`."""
        return self._run(self._target.seek(mq=mq, offset=offset))
    # -- end of generated blocking twins --
