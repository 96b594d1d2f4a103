"""The gRPC endpoints of a topic's other broker sets, so that one broker's QueryRoute and QueryAssignment name every
set's queues: a 5.x client pointed at one broker reaches all of them.

RocketMQ's local-mode proxy names each broker of a route at the host of its remoting address with the proxy's own
gRPC port (every broker is assumed to serve gRPC on the same port). Brokers sharing a host cannot share a port, so
here each broker announces its port in its runtime info (GET_BROKER_RUNTIME_INFO key ``grpcListenPort``, a remoting
request every broker answers, so any NameServer and any client keep working): the answering broker takes the
topic's route from the NameServers (GET_ROUTEINFO_BY_TOPIC) and asks each other set's master for its port (kept
``PORT_TTL_S``). Masters only, as RocketMQ's proxy builds its routes (a pop is served by a master). A set whose master
announces no port (no gRPC endpoint, or another broker) is left out: a 5.x client cannot speak remoting.

Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from spark_mq.common.errors import RemotingError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.remoting.bodies import KVTable, QueueData, TopicRouteData
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

GRPC_PORT_KEY = "grpcListenPort"  # in GET_BROKER_RUNTIME_INFO: the broker's gRPC port, absent without the endpoint
PORT_TTL_S = 30.0  # a peer's announced port (or its lack of one) is asked again after this long
PEER_TIMEOUT_S = 2.0  # a NameServer or peer slower than this is left out of this route
MASTER_ID = 0


@lazy_dataclass(frozen=True)
class PeerSet(LazyDataclass):
    """Another broker set's queues of a topic and its master's gRPC address."""

    queues: QueueData
    host: str
    port: int


class GrpcPeers:
    """The other sets of a route with their masters' gRPC addresses (``client``: the broker's peer client)."""

    def __init__(self, client: RemotingClient, namesrv_addrs: Callable[[], list[str]], own_broker: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.own_broker = own_broker
        self.clock = clock
        self._ports: dict[str, tuple[float, int]] = {}  # master address -> (when asked, gRPC port; 0: none)

    async def other_sets(self, topic: str) -> list[PeerSet]:
        """The sets of ``topic`` other than this broker's that serve gRPC; none when no NameServer answers."""
        route = await self._route(topic)
        if route is None:
            return []
        masters = {b.broker_name: b.broker_addrs.get(MASTER_ID) for b in route.broker_datas}
        others = [(q, masters[q.broker_name]) for q in route.queue_datas
                  if q.broker_name != self.own_broker and masters.get(q.broker_name)]
        ports = await asyncio.gather(*(self._grpc_port(addr) for _, addr in others))
        return [PeerSet(q, addr.rpartition(":")[0], port)
                for (q, addr), port in zip(others, ports, strict=True) if port]

    async def _route(self, topic: str) -> TopicRouteData | None:
        for addr in self.namesrv_addrs():
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            try:
                resp = await self.client.invoke(addr, cmd, PEER_TIMEOUT_S)
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    return TopicRouteData.from_json(resp.body)
            except RemotingError as e:
                log.warning("gRPC route of %s: namesrv %s not answering (%s); naming this broker's queues only",
                            topic, addr, e)
                continue
            return None  # the topic is on no registered broker yet (or only here, not registered so far)
        return None

    async def _grpc_port(self, addr: str) -> int:
        cached = self._ports.get(addr)
        if cached is not None and self.clock() - cached[0] < PORT_TTL_S:
            return cached[1]
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                            PEER_TIMEOUT_S)
            raw = KVTable.from_json(resp.body).table.get(GRPC_PORT_KEY, "") if resp.code == ResponseCode.SUCCESS else ""
        except RemotingError as e:
            log.warning("gRPC route: broker %s did not give its runtime info (%s); its queues are left out", addr, e)
            return 0  # not cached: asked again at the next route
        port = int(raw) if raw.isdigit() else 0
        if not port:
            log.info("gRPC route: broker %s announces no %s (enableGrpcEndpoint off?); its queues are left out",
                     addr, GRPC_PORT_KEY)
        self._ports[addr] = (self.clock(), port)
        return port
