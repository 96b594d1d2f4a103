"""The consumer-group member that lives in the Spark driver (the ``group`` option of a stream).

A streaming query with ``group`` is a member of that consumer group, as a RocketMQ pull consumer
is: it heartbeats to every broker of the topic (so ``spark-mq admin group lag``, other Spark
applications and plain RocketMQ consumers of the group see it), asks a broker for the group's
member list, and takes the queues ``allocateStrategy`` gives it
(:mod:`spark_mq.client.rebalance`). A queue changes hands only through the broker's queue lock
(LOCK_BATCH_MQ, renewed every :data:`LOCK_RENEW_INTERVAL_S`): a member reads a queue only while it
holds its lock, and unlocks it only after committing the offset it processed up to — so the next
owner, which locks it and reads the committed offset, neither skips nor repeats messages. A
member that died leaves its locks to expire at the broker (60 s).

The allocation is recomputed when the broker says the group changed (NOTIFY_CONSUMER_IDS_CHANGED)
and at least every ``rebalanceIntervalMs``; the stream reader asks for it at every trigger.

Thread-safety: the member runs a :class:`~spark_mq.client.instance.ClientInstance` on a private
loop thread; its public methods block and may be called from any other thread (Spark calls the
stream reader from one). The lock bookkeeping lives on the loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import uuid

from spark_mq.arrow.queues import QueueKey, TopicQueues
from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import ClientInstance
from spark_mq.client.rebalance import get_strategy
from spark_mq.client.subscription import subscription_data
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.remoting.bodies import ConsumerData, MessageQueue
from spark_mq.remoting.loop import LoopThread, stop_tasks
from spark_mq.spark.offsets import COMMITTED, EARLIEST, LATEST
from spark_mq.spark.options import SourceOptions

log = logging.getLogger(__name__)

SIGTERM_GRACE_S = 5.0  # how long a SIGTERMed reader process may take to leave the group before it exits
LOCK_RENEW_INTERVAL_S = 20.0  # RocketMQ's REBALANCE_LOCK_INTERVAL; the broker expires a lock after 60 s
CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # a pull consumer, in the heartbeat's consumer data
_CONSUME_FROM = {EARLIEST: "CONSUME_FROM_FIRST_OFFSET", LATEST: "CONSUME_FROM_LAST_OFFSET",
                 COMMITTED: "CONSUME_FROM_LAST_OFFSET"}


def leave_before_exit() -> None:
    """Let this process leave the group cleanly when Spark ends it.

    Spark ends the driver-side reader's Python process with SIGTERM at the moment it closes the
    reader's socket; the reader's ``stop()`` — unlock the queues, leave the group — runs on that
    socket's EOF, and SIGTERM's default action would kill it halfway (the queues then stay locked
    until the broker expires them, 60 s). So SIGTERM here only arms a timer that exits the process
    :data:`SIGTERM_GRACE_S` later; the runner exits by itself once ``stop()`` is done. Installed only
    from the main thread (where Spark calls the reader)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigterm(signum: int, frame: object) -> None:
        timer = threading.Timer(SIGTERM_GRACE_S, os._exit, (128 + signum,))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_sigterm)


def _mq(topic: str, key: QueueKey) -> MessageQueue:
    return MessageQueue(topic, key[0], key[1])


class DriverGroupMember:
    """This query's membership of ``opts.group`` (see the module doc)."""

    def __init__(self, opts: SourceOptions) -> None:
        assert opts.group is not None
        self.group = opts.group
        self.topic = opts.topic
        self.rebalance_interval_s = opts.rebalance_interval_ms / 1000
        self._strategy = get_strategy(opts.allocate_strategy)
        self._consume_from = (_CONSUME_FROM.get(opts.starting, "CONSUME_FROM_FIRST_OFFSET")
                              if opts.starting_timestamp is None else "CONSUME_FROM_TIMESTAMP")
        self._subscription = subscription_data(opts.topic, opts.tags)
        self._held: set[QueueKey] = set()  # loop thread only
        self._allocated: frozenset[QueueKey] | None = None
        self._allocated_at = float("-inf")
        self._members_changed = False
        self._renew: asyncio.Task | None = None
        self._thread = LoopThread(f"spark-mq-member-{opts.group}")
        config = ClientConfig(opts.namesrv, instance_name=f"spark_mq_{uuid.uuid4().hex[:12]}")
        try:
            self.instance: ClientInstance = self._thread.run(self._start(config))
        except BaseException:
            self._thread.stop()
            raise

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    async def _start(self, config: ClientConfig) -> ClientInstance:
        instance = ClientInstance(config)
        await instance.start()
        instance.register_consumer(self.group, self._consumer_data, self._on_members_changed)
        with contextlib.suppress(RemotingError):
            await instance.route(self.topic)
        await instance.heartbeat_all()  # before the first member list, so it names us
        self._renew = asyncio.get_running_loop().create_task(self._renew_locks(instance),
                                                             name=f"locks-{self.group}")
        log.info("spark_mq: %s joined consumer group %s on %s", instance.client_id, self.group, self.topic)
        return instance

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, CONSUME_ACTIVELY, "CLUSTERING", self._consume_from, [self._subscription])

    def _on_members_changed(self) -> None:
        self._members_changed = True

    # -- allocation ---------------------------------------------------------------------------------------------

    def allocation(self, queues: TopicQueues) -> frozenset[QueueKey]:
        """The queues the strategy gives this member now (recomputed when the group changed, the
        queues changed, or the rebalance interval passed; the last answer while no broker answers)."""
        stale = (self._members_changed or self._allocated is None
                 or time.monotonic() - self._allocated_at >= self.rebalance_interval_s
                 or not self._allocated <= set(queues.queues))
        if stale:
            self._members_changed = False
            members = self._thread.run(self.instance.group_members(self.topic, self.group))
            if members:
                mine = self._strategy(self.group, self.client_id, [_mq(self.topic, k) for k in queues.queues],
                                      members)
                allocated = frozenset((mq.broker_name, mq.queue_id) for mq in mine)
                if allocated != self._allocated:
                    log.info("spark_mq: %s of group %s is allocated %d of %d queues of %s (%d members)",
                             self.client_id, self.group, len(allocated), len(queues.queues), self.topic,
                             len(members))
                self._allocated = allocated
                self._allocated_at = time.monotonic()
        return self._allocated or frozenset()

    # -- broker locks -------------------------------------------------------------------------------------------

    def held(self) -> frozenset[QueueKey]:
        """The queues whose broker lock this member holds."""
        return self._thread.run(self._copy_held())

    async def _copy_held(self) -> frozenset[QueueKey]:
        return frozenset(self._held)

    def lock(self, queues: TopicQueues, keys: set[QueueKey]) -> frozenset[QueueKey]:
        """Lock ``keys`` at their brokers; the ones now held (another member may still hold some)."""
        return self._thread.run(self._lock(queues, keys)) if keys else frozenset()

    async def _lock(self, queues: TopicQueues, keys: set[QueueKey]) -> frozenset[QueueKey]:
        got: set[QueueKey] = set()
        for broker in sorted({k[0] for k in keys}):
            mqs = [_mq(self.topic, k) for k in sorted(keys) if k[0] == broker]
            try:
                locked = await self.instance.api.lock_batch_mq(queues.brokers[broker], self.group, self.client_id,
                                                               mqs)
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq: group %s: locking queues at %s failed: %s", self.group, broker, e)
                continue
            got |= {(mq.broker_name, mq.queue_id) for mq in locked}
        self._held |= got
        return frozenset(got)

    def unlock(self, queues: TopicQueues, keys: set[QueueKey]) -> None:
        """Give ``keys`` up (their offsets must be committed first)."""
        if keys:
            self._thread.run(self._unlock(queues.brokers, keys))

    async def _unlock(self, brokers: dict[str, str], keys: set[QueueKey]) -> None:
        self._held -= keys
        for broker in sorted({k[0] for k in keys}):
            if broker not in brokers:
                continue
            mqs = [_mq(self.topic, k) for k in sorted(keys) if k[0] == broker]
            try:
                await self.instance.api.unlock_batch_mq(brokers[broker], self.group, self.client_id, mqs)
            except (RemotingError, MQClientError) as e:
                log.warning("spark_mq: group %s: unlocking %s failed (the locks expire at the broker): %s",
                            self.group, broker, e)

    async def _renew_locks(self, instance: ClientInstance) -> None:
        """Re-lock the held queues before the broker expires them; a queue whose lock was lost (we
        were cut off longer than the expiry and another member took it) is dropped from ``held``."""
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL_S)
            keys = set(self._held)
            brokers = {name: addr for name in {k[0] for k in keys}
                       if (addr := instance.broker_addr(name)) is not None}
            for broker, addr in sorted(brokers.items()):
                mine = {k for k in keys if k[0] == broker}
                try:
                    locked = await instance.api.lock_batch_mq(addr, self.group, instance.client_id,
                                                              [_mq(self.topic, k) for k in sorted(mine)])
                except (RemotingError, MQClientError) as e:
                    log.warning("spark_mq: group %s: renewing locks at %s failed: %s", self.group, broker, e)
                    continue
                lost = mine - {(mq.broker_name, mq.queue_id) for mq in locked}
                if lost:
                    log.warning("spark_mq: group %s lost the lock of %s", self.group, sorted(lost))
                    self._held -= lost

    # -- leaving ------------------------------------------------------------------------------------------------

    def close(self, queues: TopicQueues | None) -> None:
        """Unlock every held queue, leave the group at every broker, stop (idempotent)."""
        if not self._thread.alive:
            return
        try:
            self._thread.run(self._close(queues))
        finally:
            self._thread.stop()

    async def _close(self, queues: TopicQueues | None) -> None:
        if self._renew is not None:
            await stop_tasks([self._renew])
        if queues is not None:
            await self._unlock(queues.brokers, set(self._held))
        self.instance.unregister_consumer(self.group)
        await self.instance.unregister_everywhere(None, self.group)
        await self.instance.close()
        log.info("spark_mq: %s left consumer group %s", self.client_id, self.group)
