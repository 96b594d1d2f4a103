"""The overview's view of the cluster: broker sets with their replicas (role, version, rates, disk), the
NameServers and whether they answer, how many topics and groups there are.

A broker that does not answer stays in its set, greyed out with the reason: a dead broker never breaks
the page.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from spark_mq.client.admin import Admin, BrokerStatus
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.common.names import is_system_topic
from spark_mq.dashboard.sampler import BrokerRate, Sampler


@dataclass(frozen=True)
class Replica:
    status: BrokerStatus
    rate: BrokerRate | None  # None until the sampler has two samples of it

    @property
    def alive(self) -> bool:
        return self.status.error is None

    @property
    def store_bytes(self) -> int | None:
        low, high = self.status.commitlog_min_offset, self.status.commitlog_max_offset
        return None if low is None or high is None else high - low


@dataclass(frozen=True)
class BrokerSet:
    cluster: str
    name: str
    replicas: list[Replica]

    @property
    def alive(self) -> bool:
        return any(r.alive for r in self.replicas)


@dataclass(frozen=True)
class NameServer:
    addr: str
    error: str | None  # None: it answered


@dataclass(frozen=True)
class Overview:
    broker_sets: list[BrokerSet]
    namesrvs: list[NameServer]
    topics: int  # user topics (not retry, DLQ or system)
    system_topics: int
    groups: int | None  # None: not known (the sampler has not listed them, or may not)


async def _namesrv(admin: Admin, addr: str) -> NameServer:
    try:
        await admin.api.get_cluster_info(addr)
    except (RemotingError, MQClientError) as e:
        return NameServer(addr, str(e))
    return NameServer(addr, None)


async def overview(admin: Admin, sampler: Sampler) -> Overview:
    """What the overview shows: one request per broker and NameServer, all at once."""
    namesrvs, statuses, topics = await asyncio.gather(
        asyncio.gather(*(_namesrv(admin, a) for a in admin.config.namesrv_addrs)),
        admin.brokers(), admin.list_topics())
    sets: dict[tuple[str, str], list[Replica]] = {}
    for s in statuses:
        sets.setdefault((s.cluster, s.broker_name), []).append(Replica(s, sampler.brokers.get(s.addr)))
    system = sum(1 for t in topics if is_system_topic(t))
    broker_sets = [BrokerSet(c, n, sorted(r, key=lambda r: r.status.broker_id)) for (c, n), r in sorted(sets.items())]
    return Overview(broker_sets, list(namesrvs), len(topics) - system, system,
                    len(sampler.groups) if sampler.groups else None)
