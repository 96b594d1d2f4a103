"""The readable queues of a topic and their offsets at the brokers: what every reader of queue ranges
(the ``spark_mq`` source, the offload, the lookups across tiers) plans with.

A topic's queues come from the NameServer route (readable queues, broker name → master address, or a
slave's while the route has no master);
a read of several topics, or of the topics a pattern matches in the NameServer's topic list
(GET_ALL_TOPIC_LIST_FROM_NAMESERVER, system topics left out), has one :class:`TopicQueues` per topic
(:func:`discover_topics`);
:class:`BrokerOffsets` asks each queue's broker for its min, max, committed and by-time offsets. A
queue is named by its :data:`QueueKey`, written ``"<broker>:<queueId>"`` (:func:`queue_key_text`).

Thread-safety: pure values and functions, plus :class:`BrokerOffsets` whose calls block on one
``SyncMQClientAPI`` (safe from any thread).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError, MQClientError, RemotingError, SparkMQError
from spark_mq.common.names import is_system_topic
from spark_mq.common.perm import PERM_READ
from spark_mq.remoting.bodies import TopicRouteData
from spark_mq.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

MASTER_ID = 0
# how long a read goes round a broker set's members while none answers (first_answering): an election takes
# a controller heartbeat timeout or so, then the replicas switching role restart their parts
FAILOVER_PATIENCE_S = 30.0
RETRY_PAUSE_S = 0.2

T = TypeVar("T")
QueueKey = tuple[str, int]  # (broker name, queue id); the topic is the reader's


class DataLossError(SparkMQError):
    """Messages a read asked for are gone from the broker (below its min offset)."""


def queue_key_text(key: QueueKey) -> str:
    """A queue's key in offsets JSON: ``"<broker>:<queueId>"``."""
    return f"{key[0]}:{key[1]}"


@dataclass(frozen=True)
class TopicQueues:
    """The readable queues of a topic and the address each of their brokers is read at."""

    topic: str
    brokers: dict[str, str]  # broker name -> master "ip:port" (a slave's while the master is down)
    queues: tuple[QueueKey, ...]  # sorted
    # broker name -> its set's members (broker id, address) from the route: where a reader goes when its
    # address stops answering or a pull answer suggests another member (suggestWhichBrokerId)
    members: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)

    def addr(self, key: QueueKey) -> str:
        return self.brokers[key[0]]

    def members_of(self, key: QueueKey) -> tuple[tuple[int, str], ...]:
        return self.members.get(key[0], ())

    def addrs_of(self, key: QueueKey) -> list[str]:
        """Where the queue is read: its planned address first, then the other members of its broker set."""
        addr = self.addr(key)
        return [addr, *(a for _, a in self.members_of(key) if a != addr)]


def _elsewhere(e: Exception) -> bool:
    """Whether another member of the set may answer what this one did not: it is unreachable, or it
    refused to serve (SERVICE_NOT_AVAILABLE: a slave of a controller-mode set whose puts wait for
    replicas serves no pulls, or a broker stopping for a role change)."""
    return isinstance(e, RemotingError) or (isinstance(e, MQClientError)
                                            and e.code == ResponseCode.SERVICE_NOT_AVAILABLE)


def first_answering(addrs: list[str], call: Callable[[str], T], what: str,
                    refresh: Callable[[], list[str]] | None = None) -> T:
    """``call(addr)`` at the first of ``addrs`` (a broker set's members, the preferred one first) that
    answers: one that does not (a master killed since the route was read; a member that refuses to serve,
    see ``_elsewhere``) moves to the end of ``addrs``,
    so the caller's next calls with the same list ask the member that answered first. While none answers
    it goes round them again, :data:`RETRY_PAUSE_S` apart, for :data:`FAILOVER_PATIENCE_S` (an election
    under way: the master is dead and the replicas switching role restart their parts, refusing
    connections for a moment); then the last error is raised. ``refresh`` (the set's members as the
    NameServer routes them now, the master first) is asked after each round in which none answered: a
    member planned from a route read mid-election may be all the list had, while the new master is
    another."""
    deadline = time.monotonic() + FAILOVER_PATIENCE_S
    rounds = 0
    while True:
        for _ in range(len(addrs)):
            try:
                return call(addrs[0])
            except (RemotingError, MQClientError) as e:
                if not _elsewhere(e) or time.monotonic() >= deadline:
                    raise
                (log.warning if not rounds else log.debug)("%s: broker %s does not answer (%s); asking %s", what,
                                                           addrs[0], e, addrs[1 % len(addrs)])
                addrs.append(addrs.pop(0))
        rounds += 1
        time.sleep(RETRY_PAUSE_S)
        if refresh is not None:
            _learn_members(addrs, refresh)


def _learn_members(addrs: list[str], refresh: Callable[[], list[str]]) -> None:
    """Put the members ``refresh`` names first in ``addrs`` (in its order), keeping the others after them."""
    try:
        fresh = refresh()
    except SparkMQError as e:  # no NameServer answered: go round the members already known
        log.debug("cannot refresh the broker set's members: %s", e)
        return
    rest = [a for a in addrs if a not in fresh]
    addrs[:] = [*fresh, *rest]


def routed_members(api: SyncMQClientAPI, namesrv_addrs: Sequence[str], topic: str, broker_name: str) -> list[str]:
    """The addresses of ``broker_name``'s set in the topic's route now, its master (id 0) first; [] when no
    NameServer routes it (see ``route_with_masters`` for the errors)."""
    route, _ = route_with_masters(api, list(namesrv_addrs), topic)
    return [a for b in route.broker_datas if b.broker_name == broker_name for _, a in sorted(b.broker_addrs.items())]


def route_with_masters(
    api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str
) -> tuple[TopicRouteData, dict[str, str]]:
    """The topic's route from the first NameServer that answers, with each broker's master
    address; ConfigError when none answers or none knows the topic (a clear error before a query
    plans or writes anything). Shared by the source and the sink."""
    last_error: Exception | None = None
    for namesrv in namesrv_addrs:
        try:
            route = api.get_route_info(namesrv, topic)
        except (RemotingError, MQClientError) as e:
            last_error = e
            continue
        if route is None:
            raise ConfigError(f"topic {topic!r} is not known to the NameServer at {namesrv}: check option 'topic' "
                              f"(`spark-mq admin topic list`) or create it (`spark-mq admin topic create`)")
        brokers = {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas
                   if MASTER_ID in b.broker_addrs}
        return route, brokers
    raise ConfigError(f"cannot reach any NameServer of option 'namesrv' ({';'.join(namesrv_addrs)}): {last_error}; "
                      f"check the address and that `spark-mq namesrv` runs there")


def discover_queues(api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str, *,
                    slaves: bool = True) -> TopicQueues:
    """The topic's readable queues (see ``route_with_masters`` for the errors). With ``slaves`` (a pure
    reader), a broker set whose master is gone from the route (dead) is read at its slave (lowest id), as
    RocketMQ's consumers do (findBrokerAddressInSubscribe); without, its queues are left out."""
    route, brokers = route_with_masters(api, namesrv_addrs, topic)
    for b in route.broker_datas if slaves else ():
        if b.broker_name not in brokers and b.broker_addrs:
            slave = b.broker_addrs[min(b.broker_addrs)]
            log.warning("topic %s: broker %s has no master online; reading its slave %s", topic, b.broker_name, slave)
            brokers[b.broker_name] = slave
    queues: list[QueueKey] = []
    for q in route.queue_datas:
        if not q.perm & PERM_READ:
            continue
        if q.broker_name not in brokers:
            log.warning("topic %s: broker %s has no broker online; its queues are not read", topic, q.broker_name)
            continue
        queues.extend((q.broker_name, i) for i in range(q.read_queue_nums))
    members = {b.broker_name: tuple(sorted(b.broker_addrs.items())) for b in route.broker_datas}
    return TopicQueues(topic, brokers, tuple(sorted(queues)), members)


def matching_topics(api: SyncMQClientAPI, namesrv_addrs: list[str], pattern: str) -> list[str]:
    """The topics the first answering NameServer knows whose whole name matches ``pattern``, sorted;
    system topics (retry, DLQ, TBW102...) never match."""
    last_error: Exception | None = None
    for namesrv in namesrv_addrs:
        try:
            listed = api.get_all_topic_list(namesrv).topic_list
        except (RemotingError, MQClientError) as e:
            last_error = e
            continue
        regex = re.compile(pattern)
        return sorted(t for t in listed if not is_system_topic(t) and regex.fullmatch(t))
    raise ConfigError(f"cannot reach any NameServer of option 'namesrv' ({';'.join(namesrv_addrs)}): {last_error}; "
                      f"check the address and that `spark-mq namesrv` runs there")


def discover_topics(api: SyncMQClientAPI, namesrv_addrs: list[str], topics: Sequence[str],
                    pattern: str | None = None) -> list[TopicQueues]:
    """The readable queues of each of ``topics``, or of each topic ``pattern`` matches now. A named
    topic the NameServer does not know is a ConfigError; a matched one that is gone by the time its
    route is asked for (deleted meanwhile), or has no readable queue (a broker's own topic named
    after it or its cluster), is left out until that changes."""
    if pattern is None:
        return [discover_queues(api, namesrv_addrs, topic) for topic in topics]
    found: list[TopicQueues] = []
    for topic in matching_topics(api, namesrv_addrs, pattern):
        try:
            queues = discover_queues(api, namesrv_addrs, topic)
        except ConfigError as e:
            log.info("topic %s matched %r but has no route now: %s", topic, pattern, e)
            continue
        if queues.queues:
            found.append(queues)
    return found


class BrokerOffsets:
    """A topic's queue offsets at their brokers (an ``OffsetSource`` of :mod:`spark_mq.spark.offset_reader`).

    Each queue is asked at its route address, and at the other members of its broker set when that
    one does not answer (its master was killed after the route was read: the NameServer drops it only
    once it sees the connection close), as the range reader pulls; once a member failed, the rest of
    this source's questions about that broker go to the one that answered first."""

    def __init__(self, api: SyncMQClientAPI, queues: TopicQueues) -> None:
        self.api = api
        self.queues = queues
        self._addrs: dict[str, list[str]] = {}  # broker name -> its members, the one to ask first first

    def _ask(self, key: QueueKey, call: Callable[[str], T]) -> T:
        addrs = self._addrs.setdefault(key[0], self.queues.addrs_of(key))
        return first_answering(addrs, call, f"offsets of {self.queues.topic}@{queue_key_text(key)}")

    def _required(self, what: str, key: QueueKey, value: int | None) -> int:
        if value is None or value < 0:
            raise SparkMQError(f"broker {self.queues.addr(key)} gave no {what} for queue "
                               f"{self.queues.topic}@{queue_key_text(key)}")
        return value

    def min_offset(self, key: QueueKey) -> int:
        return self._required("min offset", key, self._ask(
            key, lambda addr: self.api.get_min_offset(addr, self.queues.topic, key[1])))

    def max_offset(self, key: QueueKey) -> int:
        return self._required("max offset", key, self._ask(
            key, lambda addr: self.api.get_max_offset(addr, self.queues.topic, key[1])))

    def committed_offset(self, group: str, key: QueueKey) -> int | None:
        # not the broker's 0 for a group without an offset on a queue starting at 0: a start rule decides that
        offset = self._ask(key, lambda addr: self.api.query_consumer_offset(addr, group, self.queues.topic, key[1],
                                                                            zero_if_not_found=False))
        return offset if offset is not None and offset >= 0 else None

    def offset_by_timestamp(self, key: QueueKey, timestamp_ms: int) -> int:
        return self._required("offset by timestamp", key, self._ask(
            key, lambda addr: self.api.search_offset_by_timestamp(addr, self.queues.topic, key[1], timestamp_ms)))
