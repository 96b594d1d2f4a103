"""The consumer-group member that lives in the Spark driver (the ``group`` option of a stream).

A streaming query with ``group`` is a member of that consumer group, as a RocketMQ pull consumer
is: it heartbeats to every broker of the topic (so ``spark-mq admin group lag``, other Spark
applications and plain RocketMQ consumers of the group see it), asks a broker for the group's
member list, and takes the queues ``allocateStrategy`` gives it
(:mod:`spark_mq.client.rebalance`). A queue changes hands only through the broker's queue lock
(LOCK_BATCH_MQ, renewed every 20 s; :class:`~spark_mq.client.group_membership.GroupMembership`
does the allocation and the locks for every kind of member): a member reads a queue only while
it holds its lock, and unlocks it only after committing the offset it processed up to — so the
next owner, which locks it and reads the committed offset, neither skips nor repeats messages. A
member that died leaves its locks to expire at the broker (60 s, the broker's
``rebalanceLockMaxLiveTime``). Besides the 20 s renewal, the stream reader confirms its locks
(:meth:`DriverGroupMember.confirm`) before every commit and every plan: a member stopped past the
expiry, whose queues were taken over meanwhile, learns it there and not after reading them again.

The allocation is recomputed when the broker says the group changed (NOTIFY_CONSUMER_IDS_CHANGED)
and at least every ``rebalanceIntervalMs``; the stream reader asks for it at every trigger. As
RocketMQ rebalances, it is per topic: a query of several topics (or a ``topicPattern``) subscribes
to each topic it reads and takes its share of each topic's queues.

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

from spark_mq.arrow.queues import QueueKey, TopicQueues
from spark_mq.client.config import ClientConfig
from spark_mq.client.group_membership import GroupMembership
from spark_mq.client.ids import spark_driver_instance
from spark_mq.client.instance import ClientInstance
from spark_mq.client.rebalance import get_strategy
from spark_mq.common.errors import RemotingError
from spark_mq.remoting.bodies import ConsumerData, MessageQueue
from spark_mq.remoting.loop import LoopThread, stop_tasks
from spark_mq.spark.offsets import COMMITTED, EARLIEST, LATEST
from spark_mq.spark.options import SourceOptions

log = logging.getLogger(__name__)

SIGTERM_GRACE_S = 5.0  # how long a SIGTERMed reader process may take to leave the group before it exits
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


def _key(mq: MessageQueue) -> QueueKey:
    return mq.broker_name, mq.queue_id


class DriverGroupMember:
    """This query's membership of ``opts.group`` (see the module doc): a
    :class:`~spark_mq.client.group_membership.GroupMembership` on a private loop thread, in the
    stream reader's ``(broker, queueId)`` keys."""

    def __init__(self, opts: SourceOptions) -> None:
        assert opts.group is not None
        self.group = opts.group
        self._subscription = opts.subscription  # a topic's subscription: the tags, or the SQL92 filter
        self.rebalance_interval_s = opts.rebalance_interval_ms / 1000
        self._strategy = get_strategy(opts.allocate_strategy)
        self._consume_from = ("CONSUME_FROM_TIMESTAMP" if opts.starting_timestamp is not None
                              else _CONSUME_FROM.get(opts.starting, "CONSUME_FROM_FIRST_OFFSET")
                              if isinstance(opts.starting, str) else "CONSUME_FROM_FIRST_OFFSET")
        self._subscriptions = {topic: opts.subscription(topic) for topic in opts.topics}
        self._allocated: dict[str, frozenset[QueueKey]] = {}  # by topic
        self._allocated_at: dict[str, float] = {}
        self._members_changed: set[str] = set()  # topics whose allocation the group's change made stale
        self._renew: asyncio.Task | None = None
        self._thread = LoopThread(f"spark-mq-member-{opts.group}")
        config = opts.connection.client_config(opts.namesrv, instance_name=spark_driver_instance())
        try:
            self.membership: GroupMembership = self._thread.run(self._start(config))
        except BaseException:
            self._thread.stop()
            raise

    @property
    def client_id(self) -> str:
        return self.membership.instance.client_id

    async def _start(self, config: ClientConfig) -> GroupMembership:
        instance = ClientInstance(config)
        await instance.start()
        membership = GroupMembership(instance, self.group, self._strategy)
        instance.register_consumer(self.group, self._consumer_data, self._on_members_changed)
        for topic in self._subscriptions:
            with contextlib.suppress(RemotingError):
                await instance.route(topic)
        await instance.heartbeat_all()  # before the first member list, so it names us
        self._renew = asyncio.get_running_loop().create_task(membership.keep_locks(), name=f"locks-{self.group}")
        log.info("spark_mq: %s joined consumer group %s on %s", instance.client_id, self.group,
                 ", ".join(self._subscriptions) or "the topics its pattern matches")
        return membership

    async def _subscribe(self, topic: str) -> None:
        """Subscribe to a topic first seen now (a topicPattern matched it): its brokers hear of it."""
        self._subscriptions[topic] = self._subscription(topic)
        with contextlib.suppress(RemotingError):
            await self.membership.instance.route(topic)
        await self.membership.instance.heartbeat_all()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, CONSUME_ACTIVELY, "CLUSTERING", self._consume_from,
                            list(self._subscriptions.values()))

    def _on_members_changed(self) -> None:
        self._members_changed = set(self._allocated)

    # -- allocation ---------------------------------------------------------------------------------------------

    def allocation(self, queues: TopicQueues) -> frozenset[QueueKey]:
        """The queues of ``queues.topic`` the strategy gives this member now (recomputed when the group
        changed, the queues changed, or the rebalance interval passed; the last answer while no broker
        answers)."""
        topic = queues.topic
        if topic not in self._subscriptions:
            self._thread.run(self._subscribe(topic))
        allocated = self._allocated.get(topic)
        stale = (topic in self._members_changed or allocated is None
                 or time.monotonic() - self._allocated_at[topic] >= self.rebalance_interval_s
                 or not allocated <= set(queues.queues))
        if stale:
            self._members_changed.discard(topic)
            mine = self._thread.run(self.membership.allocate(topic, [_mq(topic, k) for k in queues.queues]))
            if mine is not None:
                fresh = frozenset(_key(mq) for mq in mine)
                if fresh != allocated:
                    log.info("spark_mq: %s of group %s is allocated %d of %d queues of %s", self.client_id,
                             self.group, len(fresh), len(queues.queues), topic)
                self._allocated[topic] = allocated = fresh
                self._allocated_at[topic] = time.monotonic()
        return allocated or frozenset()

    def has_others(self, topic: str) -> bool:
        """Whether the group has members besides this one now (the member list of a broker of ``topic``;
        False when none answers)."""
        members = self._thread.run(self.membership.instance.group_members(topic, self.group))
        return any(cid != self.client_id for cid in members)

    # -- broker locks -------------------------------------------------------------------------------------------

    def held(self, topic: str) -> frozenset[QueueKey]:
        """The queues of ``topic`` whose broker lock this member holds."""
        return self._thread.run(self._copy_held(topic))

    async def _copy_held(self, topic: str) -> frozenset[QueueKey]:
        return frozenset(_key(mq) for mq in self.membership.held if mq.topic == topic)

    def confirm(self, topic: str) -> frozenset[QueueKey]:
        """Renew the held locks of ``topic`` at their brokers now and return its queues still held: a
        lock another member took meanwhile (this process was stopped past the expiry) is given up here,
        so the caller neither commits nor plans that queue. A broker that does not answer keeps its
        queues (their reads fail there anyway)."""
        self._thread.run(self._renew_topic(topic))
        return self.held(topic)

    async def _renew_topic(self, topic: str) -> None:
        await self.membership.renew({mq for mq in self.membership.held if mq.topic == topic})

    def lock(self, topic: str, keys: set[QueueKey]) -> frozenset[QueueKey]:
        """Lock ``keys`` of ``topic`` at their brokers; the ones now held (another member may still hold some)."""
        if not keys:
            return frozenset()
        locked = self._thread.run(self.membership.lock(_mq(topic, k) for k in keys))
        return frozenset(_key(mq) for mq in locked)

    def unlock(self, topic: str, keys: set[QueueKey]) -> None:
        """Give ``keys`` of ``topic`` up (their offsets must be committed first)."""
        if keys:
            self._thread.run(self.membership.unlock(_mq(topic, k) for k in keys))

    # -- leaving ------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Unlock every held queue, leave the group at every broker, stop (idempotent)."""
        if not self._thread.alive:
            return
        try:
            self._thread.run(self._close())
        finally:
            self._thread.stop()

    async def _close(self) -> None:
        if self._renew is not None:
            await stop_tasks([self._renew])
        await self.membership.leave()
        await self.membership.instance.close()
        log.info("spark_mq: %s left consumer group %s", self.client_id, self.group)
