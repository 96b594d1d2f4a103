"""Who is connected: producers and consumers per group, learned from HEART_BEAT, and RocketMQ 5.x clients learned from
their Telemetry settings and gRPC heartbeats (``grpc/telemetry.py``): each client is keyed by its connection, a
remoting ``Connection`` or a 5.x client's Telemetry stream (a :class:`ClientConn` both are).

A consumer group's member list is what rebalancing runs on, so every change (a new client, an
unregister, a dropped connection, a heartbeat older than the expiry) is reported to the
caller, which has the group's members told (``notify_group_changes``: NOTIFY_CONSUMER_IDS_CHANGED),
as RocketMQ's ConsumerManager does.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Protocol

from spark_mq.common.errors import RemotingError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.remoting.bodies import ConsumerData, SubscriptionData
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import LanguageCode, RemotingCommand
from spark_mq.remoting.connection import Connection

CHANNEL_EXPIRED_S = 120.0


class ClientConn(Protocol):
    """What the registry and the admin listings use of a client's connection."""

    peer: str
    closed: bool

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """A notice to the client (a 5.x client's stream takes none: it needs no rebalance)."""


@lazy_dataclass
class ClientChannel(LazyDataclass):
    client_id: str
    conn: ClientConn
    last_update: float
    language: str = LanguageCode.JAVA.name  # the client's, from its heartbeat (what it can read)
    version: int = 0  # the client's RocketMQ version code, from its heartbeat


@lazy_dataclass
class ConsumerGroupInfo(LazyDataclass):
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[ClientConn, ClientChannel] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ClientRegistry:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[ClientConn, ClientChannel]] = {}

    def register_producer(self, group: str, client_id: str, conn: ClientConn, language: str = LanguageCode.JAVA.name,
                          version: int = 0) -> None:
        self.producers.setdefault(group, {})[conn] = ClientChannel(client_id, conn, self.clock(), language, version)

    def producer_connections(self, group: str) -> list[Connection]:
        """The remoting connections of the group's producers (a transaction check goes to one of them; a 5.x
        producer is checked over its Telemetry stream)."""
        return [c for c in self.producers.get(group, {}) if isinstance(c, Connection)]

    def producer_channels(self, group: str) -> list[ClientChannel]:
        """The group's producers with what their heartbeats said (GET_PRODUCER_CONNECTION_LIST)."""
        return list(self.producers.get(group, {}).values())

    def register_consumer(self, data: ConsumerData, client_id: str, conn: ClientConn,
                          language: str = LanguageCode.JAVA.name, version: int = 0) -> bool:
        """Record a consumer heartbeat; True if the group's membership changed."""
        info = self.consumers.setdefault(data.group_name, ConsumerGroupInfo(data.group_name))
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where
        info.subscriptions = {s.topic: s for s in data.subscription_data_set}
        before = info.client_ids()
        info.channels[conn] = ClientChannel(client_id, conn, self.clock(), language, version)
        return info.client_ids() != before

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> list[str]:
        """UNREGISTER_CLIENT; returns consumer groups whose membership changed."""
        if producer_group and producer_group in self.producers:
            group = self.producers[producer_group]
            for conn in [c for c, ch in group.items() if ch.client_id == client_id]:
                del group[conn]
        changed = []
        info = self.consumers.get(consumer_group or "")
        if info is not None:
            before = info.client_ids()
            for conn in [c for c, ch in info.channels.items() if ch.client_id == client_id]:
                del info.channels[conn]
            if info.client_ids() != before:
                changed.append(info.group)
        return changed

    def drop_connection(self, conn: ClientConn) -> list[str]:
        """A connection closed: forget its registrations; returns changed consumer groups."""
        for group in self.producers.values():
            group.pop(conn, None)
        changed = []
        for info in self.consumers.values():
            if info.channels.pop(conn, None) is not None:
                changed.append(info.group)
        return changed

    def expire(self, max_age_s: float = CHANNEL_EXPIRED_S) -> list[str]:
        """Drop channels silent for longer than ``max_age_s``; returns changed consumer groups."""
        cutoff = self.clock() - max_age_s
        for group in self.producers.values():
            for conn in [c for c, ch in group.items() if ch.last_update < cutoff]:
                del group[conn]
        changed = []
        for info in self.consumers.values():
            stale = [c for c, ch in info.channels.items() if ch.last_update < cutoff]
            for conn in stale:
                del info.channels[conn]
            if stale:
                changed.append(info.group)
        return changed

    def expire_silent(self) -> None:
        """Drop the channels silent past the expiry and tell their groups (the broker's periodic scan)."""
        self.notify_group_changes(self.expire())

    def notify_group_changes(self, groups: Iterable[str]) -> None:
        """Tell every member of each group that the member list changed (they rebalance)."""
        for group in groups:
            info = self.consumers.get(group)
            if info is None:
                continue
            for conn in list(info.channels):
                with contextlib.suppress(RemotingError):
                    conn.send_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                             {"consumerGroup": group}))

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info else None
