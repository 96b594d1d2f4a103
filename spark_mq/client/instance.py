"""``ClientInstance``: what every producer and consumer of a process shares (RocketMQ's
MQClientInstance): the connection pool (one ``MQClientAPI``), topic routes from the
NameServers refreshed every 30 s and on demand, broker addresses, and heartbeats to every
broker the routes name, carrying all registered producer and consumer groups.

Consumers register a callback that the broker's NOTIFY_CONSUMER_IDS_CHANGED triggers (they
rebalance at once), and may register one for RESET_CONSUMER_CLIENT_OFFSET (they adopt the offsets an
admin reset). Everything runs on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from spark_mq.client.api import MQClientAPI
from spark_mq.client.config import ClientConfig
from spark_mq.client.ids import client_id
from spark_mq.client.results import PullResult
from spark_mq.common.errors import ClientError, MQClientError, RemotingError
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.remoting.bodies import ConsumerData, HeartbeatData, MessageQueue, ProducerData, TopicRouteData
from spark_mq.remoting.headers import PullMessageRequestHeader
from spark_mq.remoting.loop import every

log = logging.getLogger(__name__)

MASTER_ID = 0

ConsumerDataProvider = Callable[[], ConsumerData]
IdsChanged = Callable[[], Awaitable[None] | None]
OffsetsReset = Callable[[str, dict[MessageQueue, int]], Awaitable[None] | None]  # (topic, new offsets)


_start_up_frozen = False  # set by the first client start of the process that freezes


def _freeze_start_up() -> None:
    """Freeze what the process holds at its first client start (modules, classes, functions: ~100k objects
    that live as long as it) out of the cyclic GC: else each full collection walks them all, ~10 ms that
    the messages on their way wait out (the slowest 1 % of a long-polling consumer's latency). Once per
    process, so that a process making many clients does not keep freezing the garbage of the moment."""
    global _start_up_frozen
    if not _start_up_frozen:
        _start_up_frozen = True
        gc.freeze()


class ClientInstance:
    def __init__(self, config: ClientConfig, api: MQClientAPI | None = None) -> None:
        self.config = config
        self.client_id = client_id(config.instance_name, ip=config.client_ip)
        self.api = api or MQClientAPI(timeout=config.request_timeout_s, ssl_context=config.ssl_context(),
                                      credentials=config.credentials)
        self.routes: dict[str, TopicRouteData] = {}
        self.broker_addrs: dict[str, str] = {}  # broker name -> master address
        self.broker_sets: dict[str, dict[int, str]] = {}  # broker name -> {broker id: address}, as last routed
        # the broker id each queue's last pull answer suggested (RocketMQ's PullAPIWrapper.pullFromWhichNodeTable)
        self.pull_from_which_node: dict[MessageQueue, int] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerDataProvider] = {}
        self._ids_changed: dict[str, IdsChanged] = {}
        self._offsets_reset: dict[str, OffsetsReset] = {}
        self._tasks: list[asyncio.Task] = []
        self.api.on_consumer_ids_changed(self._on_ids_changed)
        self.api.on_reset_offset(self._on_offsets_reset)

    async def start(self) -> None:
        if self.config.gc_freeze_on_start:
            _freeze_start_up()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(every(self.config.poll_name_server_interval_s, self.refresh_routes,
                                   "client duty refresh_routes"), name="client-routes"),
            loop.create_task(every(self.config.heartbeat_broker_interval_s, self.heartbeat_all,
                                   "client duty heartbeat_all"), name="client-heartbeat"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.api.close()

    # -- routes ------------------------------------------------------------------------------
    async def route(self, topic: str, refresh: bool = False) -> TopicRouteData | None:
        """The topic's route (cached unless ``refresh``); None if no NameServer knows it."""
        if not refresh and topic in self.routes:
            return self.routes[topic]
        last_error: Exception | None = None
        addrs = self.config.namesrv_addrs
        for addr in random.sample(addrs, len(addrs)):
            try:
                route = await self.api.get_route_info(addr, topic)
            except (RemotingError, MQClientError) as e:
                last_error = e
                continue
            if route is None:
                self.routes.pop(topic, None)
                return None
            self.routes[topic] = route
            for b in route.broker_datas:
                self.broker_sets[b.broker_name] = dict(b.broker_addrs)
                if MASTER_ID in b.broker_addrs:
                    self.broker_addrs[b.broker_name] = b.broker_addrs[MASTER_ID]
            return route
        raise RemotingError(f"no NameServer answered for topic {topic!r} ({', '.join(addrs)}): {last_error}")

    async def refresh_routes(self) -> None:
        for topic in list(self.routes):
            with contextlib.suppress(RemotingError):
                await self.route(topic, refresh=True)

    def broker_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name)

    def subscribe_addr(self, broker_name: str) -> str | None:
        """Where a consumer reads and commits (RocketMQ's findBrokerAddressInSubscribe): the master, or
        while the route has none (it died), a slave of the same broker name."""
        addrs = self.broker_sets.get(broker_name)
        if not addrs:
            return self.broker_addr(broker_name)
        return addrs.get(MASTER_ID) or addrs[min(addrs)]

    def pull_addrs(self, mq: MessageQueue) -> list[str]:
        """The members of ``mq``'s broker set to try for a pull: the one its last answer suggested first
        (suggestWhichBrokerId), then the others, master before slaves."""
        addrs = self.broker_sets.get(mq.broker_name, {})
        if len(addrs) == 1:  # a lone master: nothing to order
            return list(addrs.values())
        want = self.pull_from_which_node.get(mq, MASTER_ID)
        first = [addrs[want]] if want in addrs else []
        return first + [addr for broker_id, addr in sorted(addrs.items()) if broker_id != want]

    async def pull_message(self, mq: MessageQueue, header: PullMessageRequestHeader, timeout: float | None = None,
                           answered: Callable[[PullResult], Any] | None = None,
                           ext_fields: dict[str, str] | None = None) -> Any:
        """PULL_MESSAGE of ``mq`` from the member of its broker set the last answer suggested, moving on to
        the others while one is unreachable (a killed master stays in a cached route until the next
        refresh); the answer's suggestWhichBrokerId picks the member for the next pull of ``mq``.
        ``answered`` and ``ext_fields``: as ``MQClientAPI.pull_message``'s."""

        def note(result: PullResult) -> Any:
            self.pull_from_which_node[mq] = result.suggest_which_broker_id
            return result if answered is None else answered(result)

        addrs = self.pull_addrs(mq)
        for i, addr in enumerate(addrs):
            try:
                return await self.api.pull_message(addr, header, timeout, note, ext_fields)
            except RemotingError:
                if i == len(addrs) - 1:
                    raise
        raise ClientError(f"broker {mq.broker_name} of {mq.topic}:{mq.queue_id} has no address in the topic's route")

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Writable queues of ``topic`` across its brokers (empty if the topic is unknown)."""
        route = await self.route(topic)
        if route is None:
            return []
        return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                      if q.perm & PERM_WRITE for i in range(q.write_queue_nums))

    async def subscribe_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Readable queues of ``topic`` across its brokers."""
        route = await self.route(topic, refresh)
        if route is None:
            return []
        return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                      if q.perm & PERM_READ for i in range(q.read_queue_nums))

    def all_broker_addrs(self) -> list[str]:
        return sorted(set(self.broker_addrs.values()))

    # -- groups and heartbeats -----------------------------------------------------------------
    def register_producer(self, group: str) -> None:
        self.producer_groups.add(group)

    def unregister_producer(self, group: str) -> None:
        self.producer_groups.discard(group)

    def register_consumer(self, group: str, data: ConsumerDataProvider, on_ids_changed: IdsChanged,
                          on_offsets_reset: OffsetsReset | None = None) -> None:
        """``on_offsets_reset``: how the consumer adopts offsets an admin reset (none: it ignores resets)."""
        if group in self.consumers:
            raise ClientError(f"consumer group {group} already has a consumer in client instance "
                              f"{self.config.instance_name}: give the second consumer another instance_name")
        self.consumers[group] = data
        self._ids_changed[group] = on_ids_changed
        if on_offsets_reset is not None:
            self._offsets_reset[group] = on_offsets_reset

    def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)
        self._ids_changed.pop(group, None)
        self._offsets_reset.pop(group, None)

    async def heartbeat_all(self) -> None:
        """HEART_BEAT to every known broker with every registered group."""
        data = HeartbeatData(
            self.client_id,
            [ProducerData(g) for g in sorted(self.producer_groups)],
            [provider() for provider in self.consumers.values()],
        )
        if not data.producer_data_set and not data.consumer_data_set:
            return
        # consumers also tell slaves (RocketMQ's sendHeartbeatToAllBroker): a slave answers the group's
        # member list while the master is down
        slaves = {a for addrs in self.broker_sets.values() for i, a in addrs.items() if i != MASTER_ID}
        targets = sorted(set(self.all_broker_addrs()) | slaves) if data.consumer_data_set else self.all_broker_addrs()
        for addr in targets:
            try:
                await self.api.heartbeat(addr, data)
            except (RemotingError, MQClientError) as e:
                log.warning("heartbeat to broker %s failed: %s", addr, e)

    async def unregister_everywhere(self, producer_group: str | None, consumer_group: str | None) -> None:
        for addr in self.all_broker_addrs():
            with contextlib.suppress(RemotingError, MQClientError):
                await self.api.unregister_client(addr, self.client_id, producer_group, consumer_group)

    async def group_members(self, topic: str, group: str) -> list[str]:
        """The client ids of ``group``, from the first broker of ``topic`` (by name) that answers;
        empty when none does (callers then keep what they own)."""
        route = await self.route(topic)
        for b in sorted(route.broker_datas, key=lambda b: b.broker_name) if route else []:
            addr = self.broker_addr(b.broker_name)
            if addr is None:
                continue
            try:
                return await self.api.get_consumer_list_by_group(addr, group)
            except (RemotingError, MQClientError) as e:
                log.warning("group %s: member list from %s failed: %s", group, addr, e)
        return []

    async def _on_ids_changed(self, group: str, broker_addr: str) -> None:
        callback = self._ids_changed.get(group)
        if callback is not None:
            outcome = callback()
            if outcome is not None:
                await outcome

    async def _on_offsets_reset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        callback = self._offsets_reset.get(group)
        if callback is None:
            log.warning("offsets of group %s on topic %s were reset, but its consumer here cannot adopt them",
                        group, topic)
            return
        outcome = callback(topic, offsets)
        if outcome is not None:
            await outcome
