"""``PushConsumer``: a listener called with messages as they arrive (RocketMQ's DefaultMQPushConsumer).

"Push" is long-polling pull: one asyncio task per assigned queue sends PULL_MESSAGE with the
suspend flag (the broker holds it up to 15 s until a message arrives) and, in clustering mode,
the commit flag carrying the queue's commit offset. Pulled messages go to the queue's
:class:`ProcessQueue`; a queue holding more than ``pull_threshold_per_queue`` messages or
``pull_threshold_size_per_queue_mib`` MiB pauses its pulls (flow control).

Consumption runs the listener on a thread pool of ``consume_threads``
(:mod:`spark_mq.client.consume_service`):

- concurrently (default): batches of ``consume_batch_size`` in any order; a failed batch is sent
  back to the broker (CONSUMER_SEND_MSG_BACK: redelivered through ``%RETRY%<group>`` after a delay,
  to ``%DLQ%<group>`` after ``max_reconsume_times``); a send-back that fails is retried locally
  after 5 s. The commit offset is the queue's lowest unfinished offset.
- orderly: the queues are locked at the broker (LOCK_BATCH_MQ, renewed every 20 s by
  ``GroupMembership.keep_locks``); one batch of a queue at a time, in offset order; a failed
  batch is retried in place after a pause and never skipped.

A listener returns True / ``ConsumeStatus.CONSUME_SUCCESS`` for success; False, None,
``RECONSUME_LATER`` or an exception mean failure (None as Java's null status).

Clustering mode subscribes ``%RETRY%<group>`` too and gives its messages back their original
topic (property RETRY_TOPIC). Offsets live at the broker (clustering, persisted every 5 s and
whenever a queue is released) or in a local file (broadcasting).

An admin's offset reset (RESET_CONSUMER_CLIENT_OFFSET from the brokers) releases the topic's queues as a
rebalance does but commits the reset offsets instead of the consumed ones, then takes them up again from
there (RocketMQ's MQClientInstance.resetOffset); messages in flight finish, their commits are dropped.

Rebalance runs every 20 s and at once on NOTIFY_CONSUMER_IDS_CHANGED. A queue changes hands
through the broker's queue lock, in both modes: its owner locks it before pulling; a member
giving it up stops pulling, lets in-flight consumption finish (up to ``release_wait_s``),
commits the lowest unfinished offset, and only then unlocks it; the new owner reads the
committed offset once it holds the lock. So a clean hand-over delivers every message once. A
member that died never unlocks: in concurrent mode a new owner takes the queue anyway after
``handoff_timeout_s`` (at-least-once across a crash); in orderly mode only when the broker's
lock expires (60 s). Shutdown releases every queue that way before unregistering from the
brokers, so the remaining members find the offsets committed.

Thread-safety: every coroutine and method runs on one event loop (``SyncPushConsumer`` wraps it
for threads); only the listener runs on the pool's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from spark_mq.client.config import ClientConfig
from spark_mq.client.consume_service import FLOW_CONTROL_DELAY_S, ConsumeService, Listener, QueueSlot
from spark_mq.client.group_membership import GroupMembership
from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore, broker_addr_of
from spark_mq.client.process_queue import MiB, ProcessQueue
from spark_mq.client.rebalance import diff, get_strategy
from spark_mq.client.results import PullStatus
from spark_mq.client.subscription import (
    check_in_brokers,
    consume_from_where,
    filter_by_tags,
    parse_consume_from,
    parse_tags,
    resolve_start_offset,
    subscription_data,
)
from spark_mq.common.errors import ClientError, ConfigError, MQClientError, RemotingError
from spark_mq.common.names import RETRY_GROUP_TOPIC_PREFIX
from spark_mq.common.properties import RETRY_TOPIC
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import EXPRESSION_TAG, MESSAGE_MODELS, ConsumerData, MessageQueue, SubscriptionData
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag
from spark_mq.remoting.loop import stop_tasks, wait_event

log = logging.getLogger(__name__)

REBALANCE_INTERVAL_S = 20.0
REBALANCE_RETRY_S = 1.0  # a subscribed topic without a route yet (the retry topic at first start)
LOCK_RETRY_S = 0.3
SUSPEND_TIMEOUT_MS = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS
PULL_ERROR_DELAY_S = 1.0


def restore_retry_topic(m: StoredMessage) -> StoredMessage:
    """A message of a retry topic with its original topic back (RETRY_TOPIC); others unchanged."""
    original = m.properties.get(RETRY_TOPIC)
    if original and m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return dataclasses.replace(m, topic=original)
    return m


class PushConsumer:
    def __init__(self, group: str, config: ClientConfig, *, message_model: str = "CLUSTERING",
                 consume_from: str | int = "last", allocate_strategy: str = "average", consume_threads: int = 20,
                 pull_batch_size: int = 32, consume_batch_size: int = 1, max_reconsume_times: int = 16,
                 pull_threshold_per_queue: int = 1000, pull_threshold_size_per_queue_mib: int = 100,
                 orderly: bool = False, retry_delay_level: int = 0, offset_store_path: Path | None = None,
                 handoff_timeout_s: float = 10.0, release_wait_s: float = 10.0) -> None:
        if message_model not in MESSAGE_MODELS:
            raise ConfigError(f"message_model must be one of {', '.join(MESSAGE_MODELS)}, got {message_model!r}")
        for name, value in (("consume_threads", consume_threads), ("pull_batch_size", pull_batch_size),
                            ("consume_batch_size", consume_batch_size)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        self.group = group
        self.config = config
        self.message_model = message_model
        self.consume_from = parse_consume_from(consume_from)
        self.strategy = get_strategy(allocate_strategy)
        self.consume_threads = consume_threads
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.threshold_count = pull_threshold_per_queue
        self.threshold_bytes = pull_threshold_size_per_queue_mib * MiB
        self.orderly = orderly
        self.retry_delay_level = retry_delay_level
        self.offset_store_path = offset_store_path
        self.handoff_timeout_s = handoff_timeout_s
        self.release_wait_s = release_wait_s
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.listener: Listener | None = None
        self.instance: ClientInstance | None = None
        self.membership: GroupMembership | None = None
        self.offset_store: OffsetStore | None = None
        self._slots: dict[MessageQueue, QueueSlot] = {}
        self._consume: ConsumeService | None = None
        self._tasks: list[asyncio.Task] = []
        self._rebalance_now = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._running = False

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    # -- set-up ----------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = EXPRESSION_TAG) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"a || b"``, ``"*"``), or,
        with ``expression_type="SQL92"``, whose properties satisfy it (``"a > 5 AND TAGS IN ('x')"``;
        the brokers filter, and ``start`` fails with their reason if one refuses the expression)."""
        self.subscriptions[topic] = subscription_data(topic, expression, int(time.time() * 1000), expression_type)
        if self.clustering:
            retry = RETRY_GROUP_TOPIC_PREFIX + self.group
            self.subscriptions.setdefault(retry, subscription_data(retry, "*", int(time.time() * 1000)))
        if self._running:
            self._rebalance_now.set()
            asyncio.get_running_loop().create_task(self._heartbeat())

    def register_listener(self, listener: Listener) -> None:
        """``listener(messages) -> bool | ConsumeStatus``, called on a pool thread."""
        self.listener = listener

    def assignment(self) -> list[MessageQueue]:
        """The queues this member consumes now."""
        return sorted(mq for mq, slot in self._slots.items() if not slot.pq.dropped)

    def ready_queues(self) -> list[MessageQueue]:
        """Assigned queues whose pull position is known (locked where needed, offset read)."""
        return sorted(mq for mq, slot in self._slots.items() if slot.next_offset >= 0 and not slot.pq.dropped)

    def process_queue(self, mq: MessageQueue) -> ProcessQueue | None:
        slot = self._slots.get(mq)
        return slot.pq if slot else None

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_PASSIVELY", self.message_model,
                            consume_from_where(self.consume_from), list(self.subscriptions.values()))

    async def start(self) -> PushConsumer:
        if self._running:
            return self
        if self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to at least one topic before starting the consumer")
        self.instance = ClientInstance(self.config)
        await self.instance.start()
        self.membership = GroupMembership(self.instance, self.group, self.strategy, clustering=self.clustering)
        if self.clustering:
            self.offset_store = RemoteBrokerOffsetStore(self.instance, self.group)
        else:
            self.offset_store = LocalFileOffsetStore(self.instance, self.group, self.offset_store_path)
        await self.offset_store.load()
        for topic in self.subscriptions:
            with contextlib.suppress(RemotingError):
                await self.instance.route(topic)
        try:
            for sub in self.subscriptions.values():
                await check_in_brokers(self.instance, self.group, sub)
        except BaseException:  # a broker refused a SQL92 subscription: leave nothing running
            await self.instance.close()
            raise
        self._consume = ConsumeService(self.group, self.listener, self.instance, self._commit,
                                       threads=self.consume_threads, batch_size=self.consume_batch_size,
                                       orderly=self.orderly, clustering=self.clustering,
                                       max_reconsume_times=self.max_reconsume_times,
                                       retry_delay_level=self.retry_delay_level)
        self.instance.register_consumer(self.group, self.consumer_data, self._rebalance_now.set, self._reset_offsets)
        self._running = True
        await self._heartbeat()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._rebalance_loop(), name=f"rebalance-{self.group}"),
            loop.create_task(self._persist_loop(), name=f"offsets-{self.group}"),
        ]
        if self.clustering:
            self._tasks.append(loop.create_task(self.membership.keep_locks(self.ready_queues, self._locks_renewed),
                                                name=f"locks-{self.group}"))
        await self.rebalance()
        return self

    async def _heartbeat(self) -> None:
        assert self.instance is not None
        await self.instance.heartbeat_all()

    async def shutdown(self) -> None:
        """Release every queue (commit, unlock), unregister from the brokers, stop."""
        if not self._running:
            return
        self._running = False
        await stop_tasks(self._tasks)
        self._tasks = []
        async with self._rebalance_lock:
            await asyncio.gather(*(self._release(mq) for mq in list(self._slots)))
        assert self.instance is not None and self.membership is not None and self._consume is not None
        await self.membership.leave()
        self._consume.close()
        await self.instance.close()

    async def __aenter__(self) -> PushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- rebalance -------------------------------------------------------------------------------
    async def _rebalance_loop(self) -> None:
        complete = True
        while self._running:
            await wait_event(self._rebalance_now, REBALANCE_INTERVAL_S if complete else REBALANCE_RETRY_S)
            self._rebalance_now.clear()
            try:
                complete = await self.rebalance()
            except Exception:
                log.exception("group %s: rebalance failed", self.group)
                complete = False

    async def rebalance(self) -> bool:
        """Reallocate the queues of every subscribed topic; True if every topic could be done."""
        complete = True
        async with self._rebalance_lock:
            if not self._running:
                return True
            assert self.membership is not None
            for topic, sub in list(self.subscriptions.items()):
                mine = await self.membership.allocate(topic)
                if mine is None:
                    complete = False
                    continue
                current = {mq for mq in self._slots if mq.topic == topic}
                added, removed = diff(current, set(mine))
                if removed:
                    log.info("group %s: %s gives up %s", self.group, self.instance.client_id, _names(removed))
                    await asyncio.gather(*(self._release(mq) for mq in removed))
                for mq in sorted(added):
                    self._open(mq, sub)
                if added:
                    log.info("group %s: %s takes %s", self.group, self.instance.client_id, _names(added))
        return complete

    def _open(self, mq: MessageQueue, sub: SubscriptionData) -> None:
        slot = QueueSlot(mq, ProcessQueue(self.threshold_count, self.threshold_bytes),
                     parse_tags(sub.sub_string, sub.expression_type), sub.sub_string, sub.expression_type)
        self._slots[mq] = slot
        slot.task = asyncio.get_running_loop().create_task(self._run_queue(slot), name=f"pull-{mq}")

    async def _reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Adopt an admin's reset: release each reset queue held here with its new offset committed;
        the rebalance that follows opens it again from there."""
        async with self._rebalance_lock:
            mine = [mq for mq in self._slots if mq.topic == topic and mq in offsets]
            await asyncio.gather(*(self._release(mq, offsets[mq]) for mq in mine))
        if mine:
            log.info("group %s: offsets of %s reset by an admin", self.group, _names(mine))
            self._rebalance_now.set()

    async def _release(self, mq: MessageQueue, reset_to: int | None = None) -> None:
        """Stop the queue, let in-flight consumption finish, commit (``reset_to``, an admin's reset,
        instead of what was consumed), persist, unlock."""
        slot = self._slots.get(mq)
        if slot is None:
            return
        assert self.offset_store is not None
        pq = slot.pq
        pq.dropped = True
        slot.wake.set()
        if slot.task is not None:
            await stop_tasks([slot.task])
        for handle in slot.retries:
            handle.cancel()
        waiting = set(slot.consuming)
        if slot.orderly_task is not None:
            waiting.add(slot.orderly_task)
        finished = True
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=self.release_wait_s)
            finished = not pending
            if pending:
                log.warning("group %s: %s released with consumption still running; its messages will be "
                            "delivered again", self.group, mq)
        slot.released = True
        commit = pq.commit_offset() if reset_to is None else reset_to
        if commit >= 0:
            self.offset_store.update(mq, commit)
        # an orderly queue whose consumption is still running keeps its lock (to expire), so no
        # other member consumes it in parallel
        unlock = self.clustering and pq.locked and (finished or not self.orderly)
        assert self.membership is not None
        await self.membership.hand_over([mq], lambda: self.offset_store.persist(mq), unlock=unlock)
        self.offset_store.remove(mq)
        self._slots.pop(mq, None)

    # -- broker locks ----------------------------------------------------------------------------
    async def _acquire(self, slot: QueueSlot) -> bool:
        """Wait for the queue's broker lock (its previous owner unlocks it once it committed).
        Concurrent mode gives up waiting after ``handoff_timeout_s`` (a crashed owner)."""
        deadline = None if self.orderly else time.monotonic() + self.handoff_timeout_s
        assert self.membership is not None
        while not slot.pq.dropped:
            if slot.mq in await self.membership.lock([slot.mq]):
                slot.pq.set_locked(True)
                return True
            if deadline is not None and time.monotonic() >= deadline:
                log.warning("group %s: %s is still locked by another member after %.0f s; taking it over "
                            "(messages in flight there may be delivered twice)", self.group, slot.mq,
                            self.handoff_timeout_s)
                return True
            await asyncio.sleep(LOCK_RETRY_S)
        return False

    def _locks_renewed(self, lost: set[MessageQueue]) -> None:
        """After a renewal of the ready queues' locks (``keep_locks``): a queue taken over from a
        crashed member without its lock has it once that lock expired; an orderly queue whose lock
        another member took stops consuming."""
        assert self.membership is not None
        for mq in self.ready_queues():
            slot = self._slots[mq]
            if mq in self.membership.held:
                slot.pq.set_locked(True)
            elif self.orderly and mq in lost:
                slot.pq.set_locked(False)

    # -- offsets ---------------------------------------------------------------------------------
    async def _persist_loop(self) -> None:
        assert self.offset_store is not None
        while self._running:
            await asyncio.sleep(self.config.persist_consumer_offset_interval_s)
            try:
                await self.offset_store.persist_all({mq for mq, s in self._slots.items() if not s.released})
            except Exception:
                log.exception("group %s: persisting offsets failed", self.group)

    def _commit(self, slot: QueueSlot, offset: int) -> None:
        if offset >= 0 and not slot.released:
            assert self.offset_store is not None
            self.offset_store.update(slot.mq, offset, increase_only=True)

    # -- pulling ---------------------------------------------------------------------------------
    async def _run_queue(self, slot: QueueSlot) -> None:
        assert self.instance is not None and self.offset_store is not None and self._consume is not None
        mq, pq = slot.mq, slot.pq
        try:
            if self.clustering and not await self._acquire(slot):
                return
            while not pq.dropped:
                try:
                    slot.next_offset = await resolve_start_offset(self.instance, self.offset_store, mq,
                                                                  self.consume_from)
                    break
                except (RemotingError, MQClientError, ClientError) as e:
                    log.warning("group %s: start offset of %s unknown yet: %s", self.group, mq, e)
                    await asyncio.sleep(PULL_ERROR_DELAY_S)
            if self.orderly:
                slot.orderly_task = asyncio.get_running_loop().create_task(self._consume.consume_orderly(slot),
                                                                           name=f"orderly-{mq}")
            await self._pull_loop(slot)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("group %s: the pull task of %s failed", self.group, mq)

    async def _pull_loop(self, slot: QueueSlot) -> None:
        assert self.instance is not None and self.offset_store is not None and self._consume is not None
        mq, pq = slot.mq, slot.pq
        while not pq.dropped:
            if pq.flow_controlled() or (self.orderly and pq.lock_expired()):
                await asyncio.sleep(FLOW_CONTROL_DELAY_S)
                continue
            commit = await self.offset_store.read(mq, from_store=False) if self.clustering else -1
            header = PullMessageRequestHeader(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=slot.next_offset,
                max_msg_nums=self.pull_batch_size,
                sys_flag=build_pull_sys_flag(commit_offset=commit > 0, suspend=True, subscription=True),
                commit_offset=max(commit, 0), suspend_timeout_millis=SUSPEND_TIMEOUT_MS,
                sub_version=self.subscriptions[mq.topic].sub_version if mq.topic in self.subscriptions else 0,
                subscription=slot.expression, expression_type=slot.expression_type)
            try:
                await broker_addr_of(self.instance, mq)  # the route, fetched once if unknown
                result = await self.instance.pull_message(mq, header)
            except (RemotingError, MQClientError, ClientError) as e:
                log.warning("group %s: pull of %s at %d failed: %s", self.group, mq, slot.next_offset, e)
                await asyncio.sleep(PULL_ERROR_DELAY_S)
                continue
            if pq.dropped:
                return
            if result.status == PullStatus.FOUND:
                messages = filter_by_tags(result.messages(), slot.tags)
                slot.next_offset = result.next_begin_offset
                added = pq.put(restore_retry_topic(m) for m in messages)
                if added:
                    self._consume.dispatch(slot, added)
            elif result.status == PullStatus.OFFSET_ILLEGAL:
                log.warning("group %s: offset %d of %s is illegal; moving to %d", self.group, slot.next_offset, mq,
                            result.next_begin_offset)
                slot.next_offset = result.next_begin_offset
            else:
                slot.next_offset = result.next_begin_offset
            if not len(pq):  # nothing unfinished: what was skipped (filtered, empty) is done too
                self._commit(slot, slot.next_offset)

def _names(mqs: Any) -> str:
    return ", ".join(f"{mq.topic}:{mq.queue_id}" for mq in sorted(mqs))


class SyncPushConsumer(BlockingFacade[PushConsumer]):
    """A blocking ``PushConsumer`` on a private loop thread:
    ``with SyncPushConsumer(group, config) as c: c.subscribe(t); c.register_listener(f); c.start()``.
    The listener still runs on the consumer's thread pool."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, **options: Any) -> None:
        super().__init__(lambda: PushConsumer(group, config, **options), f"spark-mq-push-{group}")

    @property
    def consumer(self) -> PushConsumer:
        return self._target

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def subscribe(self, topic: str, expression: str = '*', expression_type: str = EXPRESSION_TAG) -> None:
        """Blocking :meth:`PushConsumer.subscribe`."""
        return self._call(self._target.subscribe, topic=topic, expression=expression, expression_type=expression_type)

    def register_listener(self, listener: Listener) -> None:
        """Blocking :meth:`PushConsumer.register_listener`."""
        return self._call(self._target.register_listener, listener=listener)

    def assignment(self) -> list[MessageQueue]:
        """Blocking :meth:`PushConsumer.assignment`."""
        return self._call(self._target.assignment)

    def ready_queues(self) -> list[MessageQueue]:
        """Blocking :meth:`PushConsumer.ready_queues`."""
        return self._call(self._target.ready_queues)

    def process_queue(self, mq: MessageQueue) -> ProcessQueue | None:
        """Blocking :meth:`PushConsumer.process_queue`."""
        return self._call(self._target.process_queue, mq=mq)

    def consumer_data(self) -> ConsumerData:
        """Blocking :meth:`PushConsumer.consumer_data`."""
        return self._call(self._target.consumer_data)

    def start(self) -> PushConsumer:
        """Blocking :meth:`PushConsumer.start`."""
        return self._run(self._target.start())

    def shutdown(self) -> None:
        """Blocking :meth:`PushConsumer.shutdown`."""
        self._close_with(self._target.shutdown)

    def rebalance(self) -> bool:
        """Blocking :meth:`PushConsumer.rebalance`."""
        return self._run(self._target.rebalance())
    # -- end of generated blocking twins --
