"""Client configuration shared by producers, consumers and the admin (RocketMQ's ClientConfig).

``access_key``/``secret_key`` are the account every request is signed with (RocketMQ's
``AclClientRPCHook``), for servers with ``aclEnable``; the secret is in no repr, log or error text.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_mq.common.config import split_addresses
from spark_mq.common.errors import ConfigError
from spark_mq.common.tls import client_context
from spark_mq.remoting.signature import Credentials

if TYPE_CHECKING:
    from spark_mq.client.sync_api import SyncMQClientAPI

# the TLS fields as errors name them (the CLI's options alongside)
TLS_FIELDS = ("tls_trust_cert_path (--tls-ca)", "tls_cert_path (--tls-cert)", "tls_key_path (--tls-key)")
# the account in the environment: spark-mq and the jobs read both, Spark's source and sink the secret (for a
# catalog table, which keeps no secret)
ACCESS_KEY_ENV = "SPARK_MQ_ACCESS_KEY"
SECRET_KEY_ENV = "SPARK_MQ_SECRET_KEY"
# TLS in the environment: spark-mq and the jobs (as the defaults of --tls...), the notebooks
TLS_ENV = "SPARK_MQ_TLS"  # 1 or true: --tls
TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV = "SPARK_MQ_TLS_CA", "SPARK_MQ_TLS_CERT", "SPARK_MQ_TLS_KEY"


@dataclass(frozen=True)
class ClientConfig:
    namesrv_addr: str  # ';'-separated NameServer addresses
    instance_name: str = "DEFAULT"  # part of the client id; two consumers of one group in a process need two
    client_ip: str | None = None  # None: the local address RocketMQ would pick
    poll_name_server_interval_s: float = 30.0  # route refresh
    heartbeat_broker_interval_s: float = 30.0  # HEART_BEAT to every broker of the client's topics
    persist_consumer_offset_interval_s: float = 5.0  # consumer offsets committed to the broker this often
    request_timeout_s: float = 3.0  # one request's wait for its response
    gc_freeze_on_start: bool = True  # the process's objects at its first client start (imports) frozen out of the GC
    tls_enable: bool = False  # talk to NameServers and brokers over TLS (servers with tls.server.mode on)
    tls_trust_cert_path: str = ""  # PEM CA certificates the servers' are checked against (empty: the system's)
    tls_cert_path: str = ""  # PEM client certificate, for servers requiring one (tls.server.need.client.auth)
    tls_key_path: str = ""  # PEM private key of tls_cert_path
    access_key: str = ""  # the account requests are signed with (ACL); empty: unsigned
    secret_key: str = field(default="", repr=False)  # that account's secret key: never in reprs, logs or errors

    def __post_init__(self) -> None:
        if not self.namesrv_addrs:
            raise ConfigError("namesrv_addr is empty: give at least one NameServer as host:port")
        for addr in self.namesrv_addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"NameServer address {addr!r} is not host:port")
        if not self.tls_enable and (self.tls_trust_cert_path or self.tls_cert_path or self.tls_key_path):
            raise ConfigError("TLS certificates are given but tls_enable is off: set tls_enable=True (--tls)")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key and secret_key go together: give both (an account of the servers' "
                              "plain_acl.yml) or neither")

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv_addr)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context connections are dialled with; None without ``tls_enable``. Raises ``ConfigError``
        naming the field for a file that is missing or not PEM."""
        if not self.tls_enable:
            return None
        return client_context(self.tls_trust_cert_path, self.tls_cert_path, self.tls_key_path, keys=TLS_FIELDS)

    @property
    def credentials(self) -> Credentials | None:
        """The account requests are signed with; None: unsigned."""
        return Credentials(self.access_key, self.secret_key) if self.access_key else None


def open_api(config: ClientConfig | None, timeout: float | None = None) -> SyncMQClientAPI:
    """A ``SyncMQClientAPI`` dialling and signing as ``config`` says (its TLS files, its account); plaintext and
    unsigned for None. ``timeout``: the config's request timeout by default."""
    # lazy import: sync_api's own imports load this module
    from spark_mq.client.sync_api import SyncMQClientAPI

    if config is None:
        return SyncMQClientAPI() if timeout is None else SyncMQClientAPI(timeout=timeout)
    return SyncMQClientAPI(timeout=config.request_timeout_s if timeout is None else timeout,
                           ssl_context=config.ssl_context(), credentials=config.credentials)
