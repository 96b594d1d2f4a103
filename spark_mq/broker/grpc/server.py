"""The broker's gRPC endpoint (``enableGrpcEndpoint``): a grpc.aio server on the broker's event loop, bound to
listenAddress:grpcListenPort like every other port, serving ``MessagingService``.

TLS as the other ports (``tls.server.*``): with tls.server.mode enforcing or permissive the endpoint serves TLS
only (gRPC's HTTP/2 connection cannot be told apart from a TLS one by its first byte as remoting's can; a 5.x
client dials TLS when built with ``tls_enable=True``), asking for a client certificate per
tls.server.need.client.auth; with disabled, plaintext (the 5.x client's default).
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import grpc

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.grpc.peers import GrpcPeers
from spark_mq.broker.grpc.service import BrokerParts, MessagingService
from spark_mq.broker.grpc.stubs.service_pb2_grpc import add_MessagingServiceServicer_to_server
from spark_mq.broker.grpc.telemetry import Telemetry, TelemetrySession
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.common.config import BrokerConfig, split_addresses
from spark_mq.common.errors import ConfigError
from spark_mq.common.port_in_use import naming_the_port
from spark_mq.remoting.peer_client import peer_client

log = logging.getLogger(__name__)

STOP_GRACE_S = 1.0  # calls in flight get this long to finish at shutdown
# a 5.x producer's message may be as large as the broker accepts; the stream of a check-back carries one message
MESSAGE_LENGTH_OPTIONS = (("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1))


def _credentials(config: BrokerConfig) -> grpc.ServerCredentials | None:
    """The server's TLS credentials (None: plaintext), from the files tls.server.* name."""
    if config.tls_server_mode == "disabled":
        return None
    try:
        key = Path(config.tls_server_key_path).read_bytes()
        cert = Path(config.tls_server_cert_path).read_bytes()
        trust = Path(config.tls_server_trust_cert_path).read_bytes() if config.tls_server_trust_cert_path else None
    except OSError as e:
        raise ConfigError(f"gRPC endpoint: cannot read a tls.server.* file: {e}") from e
    need = config.tls_server_need_client_auth
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=trust if need != "none" else None,
                                       require_client_auth=need == "require")


class GrpcEndpoint:
    """The endpoint's lifecycle: ``start`` binds and serves, ``stop`` ends the calls in flight."""

    def __init__(self, config: BrokerConfig, parts: BrokerParts, groups: SubscriptionGroupManager,
                 clients: ClientRegistry) -> None:
        self.config = config
        self.telemetry = Telemetry(groups, clients, config.max_message_size)
        self.peer_client = peer_client(config)  # routes ask the NameServers and the other sets' masters
        peers = GrpcPeers(self.peer_client, lambda: split_addresses(config.namesrv_addr), parts.broker_name)
        self.service = MessagingService(parts, self.telemetry, peers)
        self.server: grpc.aio.Server | None = None

    @property
    def port(self) -> int:
        """The port bound (0 before ``start``), announced in the runtime info as ``grpcListenPort``."""
        return self.service.port

    def producers(self, group: str) -> list[TelemetrySession]:
        """The 5.x producers a transaction check of ``group`` may go to (see ``Telemetry.producers``)."""
        return self.telemetry.producers(group)

    async def start(self) -> int:
        """Bind listenAddress:grpcListenPort and serve; returns the port bound. PortInUseError naming the key when it
        cannot be bound."""
        c = self.config
        server = grpc.aio.server(options=MESSAGE_LENGTH_OPTIONS)
        add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{c.listen_address}:{c.grpc_listen_port}"
        credentials = _credentials(c)
        with naming_the_port("grpcListenPort", c.listen_address, c.grpc_listen_port):
            try:
                port = (server.add_insecure_port(address) if credentials is None
                        else server.add_secure_port(address, credentials))
            except RuntimeError:  # grpc's "Failed to bind" (older releases answer port 0 instead)
                port = 0
            if not port:  # grpc says no more than that the bind failed: almost always a port in use
                raise OSError(errno.EADDRINUSE, f"cannot bind {address}")
        await server.start()
        self.server, self.service.port = server, port
        log.info("gRPC endpoint (RocketMQ 5 clients) serving at %s:%d%s", c.listen_address, port,
                 "" if credentials is None else " over TLS")
        return port

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(STOP_GRACE_S)
            self.server = None
        await self.peer_client.close()
