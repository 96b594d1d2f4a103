"""One module per measured system, each a :class:`~peer_systems.base.Server` and a
:class:`~peer_systems.base.Client`; ``benchmarks/peers.py`` runs the same workloads on each.
``VARIANTS`` names the classes that run a system replicated or with its authentication on (the
produce rows of those variants), under the system's own name.

Client libraries are imported inside the adapters' methods, so listing the systems (and
skipping one whose server is not installed) needs none of them.
"""

from __future__ import annotations

from peer_systems.base import AUTH, REPLICATED, Server
from peer_systems.nats_jetstream import NatsAuthServer, NatsClusterServer, NatsServer
from peer_systems.rabbitmq_streams import RabbitMQAuthServer, RabbitMQClusterServer, RabbitMQServer
from peer_systems.redis_streams import RedisAuthServer, RedisServer
from peer_systems.spark_mq_broker import SparkMQServer
from peer_systems.spark_mq_variants import SparkMQAuthServer, SparkMQReplicatedServer

OURS = SparkMQServer.name
SYSTEMS: dict[str, type[Server]] = {s.name: s for s in (SparkMQServer, RedisServer, NatsServer, RabbitMQServer)}
VARIANTS: dict[str, dict[str, type[Server]]] = {  # Redis: its replication acknowledges before a replica has a write
    OURS: {REPLICATED: SparkMQReplicatedServer, AUTH: SparkMQAuthServer},
    RedisServer.name: {AUTH: RedisAuthServer},
    NatsServer.name: {REPLICATED: NatsClusterServer, AUTH: NatsAuthServer},
    RabbitMQServer.name: {REPLICATED: RabbitMQClusterServer, AUTH: RabbitMQAuthServer},
}
