"""``Admin``: topics, clusters, consumer-group progress, offset resets and message lookups
(RocketMQ's ``DefaultMQAdminExt``, the part the ``spark-mq admin|query|status`` commands use).

Every call asks the NameServers first (routes, cluster info), then the brokers they name; a
NameServer that does not answer is skipped for the next one. Results are small dataclasses.
``SyncAdmin`` is the blocking facade (same methods and signatures) on a private loop thread.

Thread-safety: ``Admin`` coroutines run on one event loop and may interleave; ``SyncAdmin`` may
be called from any number of threads.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from spark_mq.client.api import MQClientAPI
from spark_mq.client.config import ClientConfig
from spark_mq.client.results import TieredOffset
from spark_mq.common.errors import ClientError, MQClientError, RemotingError
from spark_mq.common.message import unpack_host
from spark_mq.common.message_id import offset_msg_id, parse_offset_msg_id
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import (
    ClientConnection,
    ClusterInfo,
    ConsumerConnection,
    MessageQueue,
    ReplicasInfo,
    SubscriptionGroupConfig,
    TopicRouteData,
)
from spark_mq.remoting.codes import ResponseCode

T = TypeVar("T")

MASTER_ID = 0
ROUTE_WAIT_S = 5.0  # how long create_topic waits for the NameServers to route the topic to every broker written
DEFAULT_QUERY_MAX = 64


# -- results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerStatus:
    """One broker of GET_BROKER_CLUSTER_INFO with its GET_BROKER_RUNTIME_INFO figures (``error``
    says why they are missing when the broker did not answer)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    runtime: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def _int(self, name: str) -> int | None:
        value = self.runtime.get(name)
        return int(value) if value not in (None, "") and value.lstrip("-").isdigit() else None

    def _float(self, name: str) -> float | None:
        value = self.runtime.get(name)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    @property
    def version(self) -> str | None:
        v = self.runtime.get("sparkMqVersion")
        rocketmq = self.runtime.get("brokerVersionDesc")
        return f"{v} ({rocketmq})" if v and rocketmq else v or rocketmq

    @property
    def commitlog_min_offset(self) -> int | None:
        return self._int("commitLogMinOffset")

    @property
    def commitlog_max_offset(self) -> int | None:
        return self._int("commitLogMaxOffset")

    @property
    def disk_ratio(self) -> float | None:
        return self._float("commitLogDiskRatio")

    @property
    def topic_count(self) -> int | None:
        return self._int("topicCount")

    @property
    def msg_put_total(self) -> int | None:
        return self._int("msgPutTotalTodayNow")

    @property
    def msg_get_total(self) -> int | None:
        return self._int("msgGetTotalTodayNow")

    @property
    def delay_pending(self) -> int | None:
        """Delayed (delay-level) messages the broker holds, not yet delivered (None: it does not say)."""
        return self._int("scheduleMessagePending")

    @property
    def timer_pending(self) -> int | None:
        """Timer messages in the broker's timing wheel, not yet due (None: it runs none, or does not say)."""
        return self._int("timerPending")

    @property
    def half_undecided(self) -> int | None:
        """Half (transactional) messages the broker has no decision for yet (None: it does not say)."""
        return self._int("transactionHalfUndecided")

    @property
    def pop_in_flight(self) -> dict[tuple[str, str, int], int] | None:
        """Popped messages not acknowledged yet, by (group, topic, queue id) (None: the broker does not say)."""
        value = self.runtime.get("popInFlight")
        if value is None:
            return None
        try:
            return {(str(g), str(t), int(q)): int(n) for g, t, q, n in json.loads(value)}
        except (ValueError, TypeError):
            return None

    @property
    def role(self) -> str:
        """``brokerRole`` as the broker answered, else what its id says (0 is a set's master)."""
        return self.runtime.get("brokerRole") or ("MASTER" if self.broker_id == 0 else "SLAVE")

    @property
    def replica_id(self) -> int | None:
        """Controller mode: the broker's id at the controller (the NameServers list the master as 0)."""
        return self._int("replicaId")

    @property
    def epoch(self) -> tuple[int, int] | None:
        """Controller mode: the last master epoch in the broker's epoch file and the commitlog offset it starts at."""
        epoch, start = self._int("masterEpoch"), self._int("masterEpochStartOffset")
        return None if epoch is None or start is None else (epoch, start)

    @property
    def slave_lag_bytes(self) -> int | None:
        """A master's: bytes its most advanced connected slave lacks (None without one)."""
        return self._int("slaveFallBehindMuch")

    @property
    def slave_lag_seconds(self) -> float | None:
        """A master's: seconds since that slave last had the master's whole commitlog."""
        return self._float("slaveFallBehindSeconds")


@dataclass(frozen=True)
class QueueStats:
    """GET_TOPIC_STATS_INFO for one queue: offsets [min, max) and the last message's store time (ms);
    ``archived_offset``: offsets below it are in the tiered archive (None: the broker keeps no
    tiered offsets, as RocketMQ's own); ``cold_offset``: offsets below it lie in closed commitlog files,
    what an offload may archive (the boundary between hot and cold)."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    archived_offset: int | None = None
    cold_offset: int | None = None

    @property
    def count(self) -> int:
        return max(self.max_offset - self.min_offset, 0)


@dataclass(frozen=True)
class TopicStats:
    topic: str
    queues: list[QueueStats]

    @property
    def total_messages(self) -> int:
        return sum(q.count for q in self.queues)


@dataclass(frozen=True)
class QueueProgress:
    """A group's position in one queue (GET_CONSUME_STATS): ``lag`` = broker_offset - consumer_offset."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int  # store time (ms) of the last consumed message, 0 if none

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)


@dataclass(frozen=True)
class GroupProgress:
    group: str
    queues: list[QueueProgress]
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True)
class FoundMessage:
    """A message found by key or id: the decoded unit, the broker that holds it, its offsetMsgId."""

    message: StoredMessage
    broker_name: str | None
    msg_id: str  # offsetMsgId (store host + commitlog offset)

    @property
    def uniq_key(self) -> str | None:
        return self.message.properties.get("UNIQ_KEY")


@dataclass(frozen=True)
class ControllerView:
    """What the replication controllers say: each one's role (or why it did not answer), the leader, and
    from the leader every broker set's master, epochs and replicas in and out of the SyncStateSet."""

    roles: dict[str, str]  # controller address -> "leader", "follower" or "unreachable: <why>"
    leader: str | None
    broker_sets: dict[str, ReplicasInfo] = field(default_factory=dict)


def _found(message: StoredMessage, broker_name: str | None) -> FoundMessage:
    return FoundMessage(message, broker_name, offset_msg_id(message.store_host, message.physical_offset))


# -- the admin ------------------------------------------------------------------------------------


class Admin:
    """Administration over the NameServers of ``config``: ``async with Admin(config) as admin: ...``."""

    def __init__(self, config: ClientConfig, api: MQClientAPI | None = None) -> None:
        self.config = config
        self.api = api or MQClientAPI(timeout=config.request_timeout_s, ssl_context=config.ssl_context(),
                                      credentials=config.credentials)
        self._owns_api = api is None

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_api:
            await self.api.close()

    # -- NameServer plumbing ----------------------------------------------------------------------

    async def _from_namesrv(self, ask: Callable[[str], Awaitable[T]]) -> T:
        """``ask(addr)`` of the first NameServer that answers (in random order)."""
        addrs = self.config.namesrv_addrs
        errors = []
        for addr in random.sample(addrs, len(addrs)):
            try:
                return await ask(addr)
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
        raise RemotingError(f"no NameServer answered ({'; '.join(errors)}): check --namesrv / SPARK_MQ_NAMESRV "
                            f"and that `spark-mq namesrv` runs there")

    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route, None when no NameServer knows it."""
        return await self._from_namesrv(lambda addr: self.api.get_route_info(addr, topic))

    async def _route_or_raise(self, topic: str) -> TopicRouteData:
        route = await self.route(topic)
        if route is None:
            raise ClientError(f"topic {topic!r} is not known to the NameServers: create it, or check its name "
                              f"(`spark-mq admin topic list`)")
        return route

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO from a NameServer."""
        return await self._from_namesrv(self.api.get_cluster_info)

    @staticmethod
    def _masters(route: TopicRouteData) -> dict[str, str]:
        """broker name -> master address of the brokers in ``route``."""
        return {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs}

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address of every broker of ``cluster`` (None: of every cluster)."""
        info = await self.cluster_info()
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                known = ", ".join(sorted(info.cluster_addr_table)) or "none"
                raise ClientError(f"cluster {cluster!r} is not registered with the NameServers (known: {known})")
            names = info.cluster_addr_table[cluster]
        else:
            names = list(info.broker_addr_table)
        out = {}
        for name in names:
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out[name] = data.broker_addrs[MASTER_ID]
        return out

    # -- topics -----------------------------------------------------------------------------------

    async def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                           read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                           order: bool = False, wait_s: float = ROUTE_WAIT_S) -> list[str]:
        """Create or update ``topic`` (UPDATE_AND_CREATE_TOPIC) on ``broker_addr``, or on every master
        of ``cluster`` (None: of every cluster). Waits up to ``wait_s`` for the NameServers to route
        the topic to every broker written (0: don't wait). Returns the broker addresses written."""
        if read_queue_nums <= 0 or write_queue_nums <= 0:
            raise ClientError("queue counts must be positive")
        addrs = [broker_addr] if broker_addr else sorted((await self.master_addrs(cluster)).values())
        if not addrs:
            raise ClientError("no broker is registered with the NameServers: start `spark-mq broker` first")
        for addr in addrs:
            await self.api.create_topic(addr, topic, read_queue_nums, write_queue_nums, perm, order=order)
        if wait_s > 0:
            await self._wait_for_route(topic, set(addrs), wait_s)
        return addrs

    async def _wait_for_route(self, topic: str, addrs: set[str], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            route = await self.route(topic)
            if route is not None and addrs <= set(self._masters(route).values()):
                return
            if time.monotonic() >= deadline:
                raise ClientError(f"topic {topic!r} was created on {', '.join(sorted(addrs))} but the NameServers "
                                  f"did not route it there within {wait_s:g}s: check the brokers' namesrvAddr")
            await asyncio.sleep(0.05)

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from its brokers (those of ``cluster`` only, if given) and from every
        NameServer. Returns the broker addresses it was deleted from."""
        route = await self.route(topic)
        masters = self._masters(route) if route is not None else {}
        if cluster is not None:
            in_cluster = await self.master_addrs(cluster)
            masters = {name: addr for name, addr in masters.items() if name in in_cluster}
        for addr in sorted(masters.values()):
            await self.api.delete_topic_in_broker(addr, topic)
        for namesrv in self.config.namesrv_addrs:
            await self.api.delete_topic_in_namesrv(namesrv, topic, cluster)
        return sorted(masters.values())

    async def list_topics(self) -> list[str]:
        """Every topic a NameServer knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted."""
        topics = await self._from_namesrv(self.api.get_all_topic_list)
        return sorted(topics.topic_list)

    async def topic_stats(self, topic: str) -> TopicStats:
        """GET_TOPIC_STATS_INFO from every broker of the topic's route, with each queue's archived
        offset (QUERY_TIERED_OFFSET)."""
        route = await self._route_or_raise(topic)
        queues = []
        for addr in sorted(self._masters(route).values()):
            table = await self.api.get_topic_stats_info(addr, topic)
            tiered = await self._tiered_at(addr, topic, [mq.queue_id for mq in table.offset_table])
            queues += [QueueStats(mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, o.last_update_timestamp,
                                  *((None, None) if tiered is None else
                                    (tiered[mq.queue_id].offset, tiered[mq.queue_id].cold_offset)))
                       for mq, o in table.offset_table.items()]
        return TopicStats(topic, sorted(queues, key=lambda q: (q.broker_name, q.queue_id)))

    async def tiered_offsets(self, topic: str) -> dict[MessageQueue, TieredOffset]:
        """Every queue's archived-up-to, cold, min and max offsets (QUERY_TIERED_OFFSET on each
        master of the topic's route, for every queue it holds)."""
        route = await self._route_or_raise(topic)
        masters = self._masters(route)
        out: dict[MessageQueue, TieredOffset] = {}
        for q in route.queue_datas:
            addr = masters.get(q.broker_name)
            if addr is None:
                continue
            tiered = await self._tiered_at(addr, topic, range(max(q.read_queue_nums, q.write_queue_nums)))
            if tiered is None:
                raise ClientError(f"broker {q.broker_name} at {addr} keeps no tiered offsets: it is not a spark_mq "
                                  f"broker")
            out.update({MessageQueue(topic, q.broker_name, queue_id): t for queue_id, t in tiered.items()})
        return out

    async def _tiered_at(self, addr: str, topic: str, queue_ids: Iterable[int]) -> dict[int, TieredOffset] | None:
        """QUERY_TIERED_OFFSET of ``queue_ids`` on one broker; None from a broker that does not
        serve it (RocketMQ's own)."""
        ids = list(queue_ids)
        try:
            found = await asyncio.gather(*(self.api.query_tiered_offset(addr, topic, q) for q in ids))
        except MQClientError as e:
            if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return None
            raise
        return dict(zip(ids, found, strict=True))

    # -- clusters ---------------------------------------------------------------------------------

    async def brokers(self) -> list[BrokerStatus]:
        """Every broker of every cluster, with its runtime figures (GET_BROKER_RUNTIME_INFO)."""
        info = await self.cluster_info()
        cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
        members = [(cluster_of.get(name, data.cluster), name, broker_id, addr)
                   for name, data in info.broker_addr_table.items() for broker_id, addr in data.broker_addrs.items()]

        async def status(cluster: str, name: str, broker_id: int, addr: str) -> BrokerStatus:
            try:
                return BrokerStatus(cluster, name, broker_id, addr, await self.api.get_broker_runtime_info(addr))
            except (RemotingError, MQClientError) as e:
                return BrokerStatus(cluster, name, broker_id, addr, error=str(e))

        return list(await asyncio.gather(*(status(*m) for m in sorted(members))))

    async def controller_view(self, controller_addrs: Iterable[str],
                              broker_names: Iterable[str] | None = None) -> ControllerView:
        """Ask every controller whether it leads (CONTROLLER_GET_METADATA_INFO), then the leader (or the
        leader a follower names) for the replication state of ``broker_names`` (None: every broker set the
        NameServers know) with CONTROLLER_GET_SYNC_STATE_DATA."""
        roles: dict[str, str] = {}
        leader = named = None
        for addr in controller_addrs:
            try:
                meta = await self.api.get_controller_metadata(addr)
            except (RemotingError, MQClientError) as e:
                roles[addr] = f"unreachable: {e}"
                continue
            roles[addr] = "leader" if meta.is_leader else "follower"
            leader = addr if meta.is_leader else leader
            named = named or meta.controller_leader_address
        leader = leader or named
        if leader is None:
            return ControllerView(roles, None)
        if broker_names is None:
            broker_names = sorted((await self.cluster_info()).broker_addr_table)
        names = list(broker_names)
        state = await self.api.get_sync_state_data(leader, names) if names else None
        return ControllerView(roles, leader, state.replicas_info_table if state is not None else {})

    # -- consumer groups --------------------------------------------------------------------------

    async def update_group(self, group: str, *, orderly: bool = False, retry_max_times: int = 16,
                           cluster: str | None = None) -> list[str]:
        """Create or update consumer group ``group`` (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, an admin request) on every
        master of ``cluster`` (None: of every cluster): ``orderly`` is RocketMQ's ``consumeMessageOrderly`` (its 5.x
        consumers read each queue in order), ``retry_max_times`` the redeliveries before the DLQ. Returns the
        broker addresses written."""
        addrs = sorted((await self.master_addrs(cluster)).values())
        if not addrs:
            raise ClientError("no broker is registered with the NameServers: start `spark-mq broker` first")
        config = SubscriptionGroupConfig(group, retry_max_times=retry_max_times, consume_message_orderly=orderly)
        for addr in addrs:
            await self.api.update_subscription_group(addr, config)
        return addrs

    async def group_clients(self, group: str, *, producers: bool = False) -> dict[str, list[ClientConnection]]:
        """The online clients of consumer group ``group`` (``producers``: of producer group ``group``) per master
        address (GET_CONSUMER_CONNECTION_LIST / GET_PRODUCER_CONNECTION_LIST): remoting clients and RocketMQ 5.x
        gRPC clients alike. A broker with none is left out."""
        out: dict[str, list[ClientConnection]] = {}
        for addr in sorted((await self.master_addrs()).values()):
            if producers:
                listing = await self.api.get_producer_connection_list(addr, group)
            else:
                listing = await self.api.get_consumer_connection_list(addr, group)
            if listing is not None:
                out[addr] = sorted(listing.connection_set, key=lambda c: c.client_id)
        return out

    async def group_progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """The group's broker offset, committed offset and lag per queue (GET_CONSUME_STATS on every
        broker of ``topic``'s route, or of every cluster). No queues: the group has no offsets."""
        if topic is not None:
            masters = self._masters(await self._route_or_raise(topic))
        else:
            masters = await self.master_addrs()
        queues, tps = [], 0.0
        for addr in sorted(masters.values()):
            try:
                stats = await self.api.get_consume_stats(addr, group, topic)
            except MQClientError as e:
                if e.code == ResponseCode.CONSUMER_NOT_ONLINE:
                    continue  # this broker has neither offsets nor members of the group
                raise
            tps += stats.consume_tps
            queues += [QueueProgress(mq.topic, mq.broker_name, mq.queue_id, o.broker_offset, o.consumer_offset,
                                     o.last_timestamp) for mq, o in stats.offset_table.items()]
        return GroupProgress(group, sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id)), tps)

    async def groups(self) -> dict[str, set[str]]:
        """Every consumer group the masters know, with the topics it has committed offsets of: the
        subscription group configs and the offset tables of every master (GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        GET_ALL_CONSUMER_OFFSET: admin requests when the brokers check ACLs). A master that does not answer
        is left out."""
        out: dict[str, set[str]] = {}
        for addr in sorted(set((await self.master_addrs()).values())):
            try:
                configs = await self.api.get_all_subscription_groups(addr)
                offsets = await self.api.get_all_consumer_offsets(addr)
            except RemotingError:
                continue
            for name in configs.subscription_group_table:
                out.setdefault(name, set())
            for key in offsets.offset_table:
                topic, _, group = key.rpartition("@")
                out.setdefault(group, set()).add(topic)
        return out

    async def members(self, group: str) -> ConsumerConnection:
        """``group``'s online members (client id, address, language, version) and subscriptions, as the
        masters know them (GET_CONSUMER_CONNECTION_LIST), merged; empty when no member is online."""
        merged = ConsumerConnection()
        seen: dict[str, ClientConnection] = {}
        for addr in sorted(set((await self.master_addrs()).values())):
            try:
                found = await self.api.get_consumer_connection_list(addr, group)
            except (RemotingError, MQClientError):
                continue  # a dead master
            if found is None:
                continue  # no member of the group online there
            seen.update((c.client_id, c) for c in found.connection_set)
            merged = ConsumerConnection([], {**merged.subscription_table, **found.subscription_table},
                                        found.consume_type, found.message_model, found.consume_from_where)
        merged.connection_set = sorted(seen.values(), key=lambda c: c.client_id)
        return merged

    async def set_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        """Commit ``offset`` as ``group``'s position in ``queue`` (UPDATE_CONSUMER_OFFSET to its master), for a
        group with no member online: online members would write their own positions over it (reset those to
        a time instead, :meth:`reset_offsets_by_time`). The offset must lie in the queue's [min, max]."""
        if (await self.members(group)).connection_set:
            raise ClientError(f"group {group} has members online, which would overwrite an offset set by hand: "
                              f"stop them first, or reset the group to a time")
        route = await self._route_or_raise(queue.topic)
        addr = self._masters(route).get(queue.broker_name)
        if addr is None:
            raise ClientError(f"broker set {queue.broker_name} has no master serving {queue.topic}")
        low = await self.api.get_min_offset(addr, queue.topic, queue.queue_id)
        high = await self.api.get_max_offset(addr, queue.topic, queue.queue_id)
        if not low <= offset <= high:
            raise ClientError(f"offset {offset} is outside queue {queue.queue_id} of {queue.topic} on "
                              f"{queue.broker_name}, which holds [{low}, {high}]")
        await self.api.update_consumer_offset(addr, group, queue.topic, queue.queue_id, offset)

    async def delete_group(self, group: str) -> list[str]:
        """Delete ``group`` from every master: its subscription config and committed offsets
        (DELETE_SUBSCRIPTIONGROUP with cleanOffset, an admin request). Online members keep consuming
        from where the broker then starts them. Returns the broker addresses it was deleted from."""
        addrs = sorted(set((await self.master_addrs()).values()))
        for addr in addrs:
            await self.api.delete_subscription_group(addr, group)
        return addrs

    async def reset_offsets_by_time(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        """Move ``group``'s committed offset of every readable queue of ``topic`` to the first message
        stored at or after ``timestamp_ms`` (a queue with nothing that late gets its max offset), forward
        or backward: INVOKE_BROKER_TO_RESET_OFFSET to each master of the topic (an admin request when
        the brokers check ACLs). Returns the new offsets.

        Online consumers of the group (spark_mq's push and lite-pull consumers, Java and C++ clients) are
        told by the brokers and go on from the new offsets: no need to stop them first.
        """
        route = await self._route_or_raise(topic)
        out: dict[MessageQueue, int] = {}
        for addr in sorted(set(self._masters(route).values())):
            out.update((await self.api.reset_offset_by_time(addr, group, topic, timestamp_ms)).offset_table)
        return out

    # -- lookups ----------------------------------------------------------------------------------

    async def query_by_key(self, topic: str, key: str, begin_ms: int = 0, end_ms: int | None = None,
                           max_num: int = DEFAULT_QUERY_MAX, *, unique_key: bool = False) -> list[FoundMessage]:
        """Messages of ``topic`` carrying ``key`` (in KEYS, or as UNIQ_KEY) stored within
        [begin_ms, end_ms] (None: now), from every broker of the topic (QUERY_MESSAGE); merged,
        newest first, at most ``max_num``."""
        route = await self._route_or_raise(topic)
        end_ms = int(time.time() * 1000) + 1000 if end_ms is None else end_ms
        names_by_addr = {addr: name for name, addr in self._masters(route).items()}

        async def one(addr: str) -> list[FoundMessage]:
            found = await self.api.query_message(addr, topic, key, max_num, begin_ms, end_ms, unique_key=unique_key)
            return [_found(m, names_by_addr[addr]) for m in found]

        merged = [f for part in await asyncio.gather(*map(one, sorted(names_by_addr))) for f in part]
        merged.sort(key=lambda f: (f.message.store_timestamp, f.message.physical_offset), reverse=True)
        return merged[:max_num]

    async def view_message(self, msg_id: str, topic: str | None = None) -> FoundMessage | None:
        """The message with id ``msg_id``: an offsetMsgId is read (VIEW_MESSAGE_BY_ID) from the broker
        its address names; a UNIQ_KEY (the producer's msgId) is looked up by key on ``topic``.
        None when no such message is stored."""
        host, phys = parse_offset_msg_id(msg_id)
        addr = unpack_host(host)
        info = await self.cluster_info()
        name_by_addr = {a: name for name, data in info.broker_addr_table.items() for a in data.broker_addrs.values()}
        if addr not in name_by_addr and topic is not None:
            hits = await self.query_by_key(topic, msg_id, max_num=1, unique_key=True)
            return hits[0] if hits else None
        if not 0 < int.from_bytes(host[4:8], "big") < 65536:
            raise ClientError(f"{msg_id} is not an offsetMsgId (it names no host:port): if it is a producer msgId "
                              f"(UNIQ_KEY), give its topic")
        try:
            message = await self.api.view_message(addr, phys)
        except MQClientError as e:
            if e.code == ResponseCode.SYSTEM_ERROR:  # RocketMQ's broker answers a missing offset so
                message = None
            else:
                raise
        except RemotingError as e:
            if addr in name_by_addr:
                raise
            raise ClientError(f"{msg_id} names no registered broker (it would be at {addr}) and none answered "
                              f"there: if it is a producer msgId (UNIQ_KEY), give its topic") from e
        if message is None and topic is not None:
            hits = await self.query_by_key(topic, msg_id, max_num=1, unique_key=True)
            return hits[0] if hits else None
        return None if message is None else _found(message, name_by_addr.get(addr))


# -- blocking facade ------------------------------------------------------------------------------


class SyncAdmin(BlockingFacade[Admin]):
    """A blocking :class:`Admin`: ``with SyncAdmin(ClientConfig("127.0.0.1:9876")) as admin: ...``.

    Thread-safe: calls from any number of threads interleave on the one private loop thread.
    """

    def __init__(self, config: ClientConfig) -> None:
        super().__init__(lambda: Admin(config), "spark-mq-admin")

    @property
    def admin(self) -> Admin:
        return self._target

    @property
    def config(self) -> ClientConfig:
        return self._target.config

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def close(self) -> None:
        """Blocking :meth:`Admin.close`."""
        self._close_with(self._target.close)

    def route(self, topic: str) -> TopicRouteData | None:
        """Blocking :meth:`Admin.route`."""
        return self._run(self._target.route(topic=topic))

    def cluster_info(self) -> ClusterInfo:
        """Blocking :meth:`Admin.cluster_info`."""
        return self._run(self._target.cluster_info())

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """Blocking :meth:`Admin.master_addrs`."""
        return self._run(self._target.master_addrs(cluster=cluster))

    def create_topic(self, topic: str, *, cluster: str | None = None, broker_addr: str | None = None,
                     read_queue_nums: int = 8, write_queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                     order: bool = False, wait_s: float = ROUTE_WAIT_S) -> list[str]:
        """Blocking :meth:`Admin.create_topic`."""
        return self._run(self._target.create_topic(topic=topic, cluster=cluster, broker_addr=broker_addr,
                                                   read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums,
                                                   perm=perm, order=order, wait_s=wait_s))

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Blocking :meth:`Admin.delete_topic`."""
        return self._run(self._target.delete_topic(topic=topic, cluster=cluster))

    def list_topics(self) -> list[str]:
        """Blocking :meth:`Admin.list_topics`."""
        return self._run(self._target.list_topics())

    def topic_stats(self, topic: str) -> TopicStats:
        """Blocking :meth:`Admin.topic_stats`."""
        return self._run(self._target.topic_stats(topic=topic))

    def tiered_offsets(self, topic: str) -> dict[MessageQueue, TieredOffset]:
        """Blocking :meth:`Admin.tiered_offsets`."""
        return self._run(self._target.tiered_offsets(topic=topic))

    def brokers(self) -> list[BrokerStatus]:
        """Blocking :meth:`Admin.brokers`."""
        return self._run(self._target.brokers())

    def controller_view(self, controller_addrs: Iterable[str],
                        broker_names: Iterable[str] | None = None) -> ControllerView:
        """Blocking :meth:`Admin.controller_view`."""
        return self._run(self._target.controller_view(controller_addrs=controller_addrs, broker_names=broker_names))

    def update_group(self, group: str, *, orderly: bool = False, retry_max_times: int = 16,
                     cluster: str | None = None) -> list[str]:
        """Blocking :meth:`Admin.update_group`."""
        return self._run(self._target.update_group(group=group, orderly=orderly, retry_max_times=retry_max_times,
                                                   cluster=cluster))

    def group_clients(self, group: str, *, producers: bool = False) -> dict[str, list[ClientConnection]]:
        """Blocking :meth:`Admin.group_clients`."""
        return self._run(self._target.group_clients(group=group, producers=producers))

    def group_progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """Blocking :meth:`Admin.group_progress`."""
        return self._run(self._target.group_progress(group=group, topic=topic))

    def groups(self) -> dict[str, set[str]]:
        """Blocking :meth:`Admin.groups`."""
        return self._run(self._target.groups())

    def members(self, group: str) -> ConsumerConnection:
        """Blocking :meth:`Admin.members`."""
        return self._run(self._target.members(group=group))

    def set_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        """Blocking :meth:`Admin.set_offset`."""
        return self._run(self._target.set_offset(group=group, queue=queue, offset=offset))

    def delete_group(self, group: str) -> list[str]:
        """Blocking :meth:`Admin.delete_group`."""
        return self._run(self._target.delete_group(group=group))

    def reset_offsets_by_time(self, group: str, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        """Blocking :meth:`Admin.reset_offsets_by_time`."""
        return self._run(self._target.reset_offsets_by_time(group=group, topic=topic, timestamp_ms=timestamp_ms))

    def query_by_key(self, topic: str, key: str, begin_ms: int = 0, end_ms: int | None = None,
                     max_num: int = DEFAULT_QUERY_MAX, *, unique_key: bool = False) -> list[FoundMessage]:
        """Blocking :meth:`Admin.query_by_key`."""
        return self._run(self._target.query_by_key(topic=topic, key=key, begin_ms=begin_ms, end_ms=end_ms,
                                                   max_num=max_num, unique_key=unique_key))

    def view_message(self, msg_id: str, topic: str | None = None) -> FoundMessage | None:
        """Blocking :meth:`Admin.view_message`."""
        return self._run(self._target.view_message(msg_id=msg_id, topic=topic))
    # -- end of generated blocking twins --
