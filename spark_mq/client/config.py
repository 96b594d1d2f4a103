"""Client configuration shared by producers, consumers and the admin (RocketMQ's ClientConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError


@dataclass(frozen=True)
class ClientConfig:
    namesrv_addr: str  # ';'-separated NameServer addresses
    instance_name: str = "DEFAULT"  # part of the client id; two consumers of one group in a process need two
    client_ip: str | None = None  # None: the local address RocketMQ would pick
    poll_name_server_interval_s: float = 30.0  # route refresh
    heartbeat_broker_interval_s: float = 30.0  # HEART_BEAT to every broker of the client's topics
    persist_consumer_offset_interval_s: float = 5.0  # consumer offsets committed to the broker this often
    request_timeout_s: float = 3.0  # one request's wait for its response

    def __post_init__(self) -> None:
        if not self.namesrv_addrs:
            raise ConfigError("namesrv_addr is empty: give at least one NameServer as host:port")
        for addr in self.namesrv_addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"NameServer address {addr!r} is not host:port")

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv_addr)
