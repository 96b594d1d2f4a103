"""``PullConsumer`` (RocketMQ's DefaultMQPullConsumer): explicit pulls — the caller lists a topic's
queues, pulls from a queue at an offset of its choosing and stores offsets of the group when it
likes. ``SyncPullConsumer`` is its blocking twin on a private loop thread.

A member of a group that owns queues and polls them is :mod:`spark_mq.client.lite_pull_consumer`'s.

Thread-safety: ``PullConsumer`` runs on one event loop (not thread-safe); its coroutines may
interleave freely. ``SyncPullConsumer`` may be called from any thread.
"""

from __future__ import annotations

from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import RemoteBrokerOffsetStore
from spark_mq.client.queue_pull import ConsumerPullBatch, ConsumerPullResult, pull_queue, pull_queue_batch
from spark_mq.client.subscription import subscription_data
from spark_mq.common.errors import ClientError, ConfigError
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import EXPRESSION_TAG, SUB_ALL, ConsumerData, MessageQueue


def _consumer_data(group: str, subscriptions: dict[str, str], consume_from: str) -> ConsumerData:
    return ConsumerData(group, consume_type="CONSUME_ACTIVELY", message_model="CLUSTERING",
                        consume_from_where=consume_from,
                        subscription_data_set=[subscription_data(t, e) for t, e in sorted(subscriptions.items())])


class PullConsumer:
    """Explicit pulls and offsets of consumer group ``group`` (clustering, offsets at the broker).

    ``await start()`` first; ``await shutdown()`` persists the offsets set with ``update_offset``.
    """

    def __init__(self, group: str, config: ClientConfig, *, instance: ClientInstance | None = None) -> None:
        if not group:
            raise ConfigError("consumer group is empty")
        self.group = group
        self.config = config
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(config)
        self.offset_store = RemoteBrokerOffsetStore(self.instance, group)
        self._topics: dict[str, str] = {}
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        if self._own_instance:
            await self.instance.start()
        self.instance.register_consumer(self.group, self._consumer_data, lambda: None)
        self._started = True

    def _consumer_data(self) -> ConsumerData:
        return _consumer_data(self.group, self._topics, "CONSUME_FROM_LAST_OFFSET")

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        try:
            await self.offset_store.persist_all(set(self.offset_store.offsets()))
        finally:
            self.instance.unregister_consumer(self.group)
            await self.instance.unregister_everywhere(None, self.group)
            if self._own_instance:
                await self.instance.close()

    def _check_started(self) -> None:
        if not self._started:
            raise ClientError(f"pull consumer of group {self.group} is not started: call start() first")

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (sorted), from a fresh route; ClientError if no such topic."""
        self._check_started()
        queues = await self.instance.subscribe_queues(topic, refresh=True)
        if not queues:
            raise ClientError(f"topic {topic!r} has no readable queue: does it exist?")
        self._topics.setdefault(topic, SUB_ALL)
        return queues

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = SUB_ALL,
                   timeout: float | None = None, *, block_s: float = 0.0,
                   expression_type: str = EXPRESSION_TAG) -> ConsumerPullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset`` whose tag matches
        ``expression`` (or that satisfy it, with ``expression_type="SQL92"``: a bad expression raises
        MQClientError SUBSCRIPTION_PARSE_FAILED with its position); ``block_s`` > 0 lets the broker
        hold the pull until a message arrives."""
        self._check_started()
        return await pull_queue(self.instance, self.group, mq, offset, max_nums, expression, suspend_s=block_s,
                                timeout=timeout, expression_type=expression_type)

    async def pull_batch(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = SUB_ALL,
                         timeout: float | None = None, *, block_s: float = 0.0,
                         expression_type: str = EXPRESSION_TAG) -> ConsumerPullBatch:
        """``pull`` with the messages as columns (:class:`StoredBatch`: bodies, offsets and
        timestamps as lists and arrays, properties decoded on demand): for large pulls, several
        times faster than a StoredMessage per message."""
        self._check_started()
        return await pull_queue_batch(self.instance, self.group, mq, offset, max_nums, expression,
                                      suspend_s=block_s, timeout=timeout, expression_type=expression_type)

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Set the group's offset of ``mq`` in memory (``persist`` writes it to the broker)."""
        self.offset_store.update(mq, offset)

    async def read_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        """The group's offset of ``mq`` (-1: none committed)."""
        self._check_started()
        return await self.offset_store.read(mq, from_store)

    async def persist(self, mq: MessageQueue | None = None) -> None:
        """Write the offset of ``mq`` (or of every queue updated) to its broker."""
        self._check_started()
        if mq is None:
            await self.offset_store.persist_all(set(self.offset_store.offsets()))
        else:
            await self.offset_store.persist(mq)



class SyncPullConsumer(BlockingFacade[PullConsumer]):
    """A blocking :class:`PullConsumer`: ``with SyncPullConsumer(group, config) as c: c.start() ...``."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig) -> None:
        super().__init__(lambda: PullConsumer(group, config), f"spark-mq-pull-{group}")

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def start(self) -> None:
        """Blocking :meth:`PullConsumer.start`."""
        return self._run(self._target.start())

    def shutdown(self) -> None:
        """Blocking :meth:`PullConsumer.shutdown`."""
        self._close_with(self._target.shutdown)

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Blocking :meth:`PullConsumer.fetch_queues`."""
        return self._run(self._target.fetch_queues(topic=topic))

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = SUB_ALL,
             timeout: float | None = None, *, block_s: float = 0.0,
             expression_type: str = EXPRESSION_TAG) -> ConsumerPullResult:
        """Blocking :meth:`PullConsumer.pull`."""
        return self._run(self._target.pull(mq=mq, offset=offset, max_nums=max_nums, expression=expression,
                                           timeout=timeout, block_s=block_s, expression_type=expression_type))

    def pull_batch(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = SUB_ALL,
                   timeout: float | None = None, *, block_s: float = 0.0,
                   expression_type: str = EXPRESSION_TAG) -> ConsumerPullBatch:
        """Blocking :meth:`PullConsumer.pull_batch`."""
        return self._run(self._target.pull_batch(mq=mq, offset=offset, max_nums=max_nums, expression=expression,
                                                 timeout=timeout, block_s=block_s, expression_type=expression_type))

    def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Blocking :meth:`PullConsumer.update_offset`."""
        return self._call(self._target.update_offset, mq=mq, offset=offset)

    def read_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        """Blocking :meth:`PullConsumer.read_offset`."""
        return self._run(self._target.read_offset(mq=mq, from_store=from_store))

    def persist(self, mq: MessageQueue | None = None) -> None:
        """Blocking :meth:`PullConsumer.persist`."""
        return self._run(self._target.persist(mq=mq))
    # -- end of generated blocking twins --
