"""One module per measured system, each a :class:`~peer_systems.base.Server` and a
:class:`~peer_systems.base.Client`; ``benchmarks/peers.py`` runs the same workloads on each.

Client libraries are imported inside the adapters' methods, so listing the systems (and
skipping one whose server is not installed) needs none of them.
"""

from __future__ import annotations

from peer_systems.base import Server
from peer_systems.nats_jetstream import NatsServer
from peer_systems.rabbitmq_streams import RabbitMQServer
from peer_systems.redis_streams import RedisServer
from peer_systems.spark_mq_broker import SparkMQServer

OURS = SparkMQServer.name
SYSTEMS: dict[str, type[Server]] = {s.name: s for s in (SparkMQServer, RedisServer, NatsServer, RabbitMQServer)}
