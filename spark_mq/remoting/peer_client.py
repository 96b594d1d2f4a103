"""The remoting client a server process dials its peers with, built from its config in one place.

A broker registering at the NameServers, a slave asking its master for metadata, a broker's controller
heartbeats and requests, a controller's pushes of an election to the brokers: each of these is an
admin operation at the receiving end, so the process signs them with its own account (``accessKey``/
``secretKey`` of its config, an admin account of the cluster's ``plain_acl.yml``). Without those keys
its requests go unsigned, which a peer with ``aclEnable`` refuses. With ``tls.enable`` it dials over TLS
(``common.tls.peer_context``).
"""

from __future__ import annotations

from spark_mq.common.config import SecurityConfig
from spark_mq.common.tls import peer_context
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.signature import Credentials

PEER_ACCOUNT_HINT = ("give this process's config accessKey and secretKey of an admin account in its peers' "
                     "plain_acl.yml (admin: true)")


def process_credentials(config: SecurityConfig) -> Credentials | None:
    """The process's own account, None when its config gives none (``check_security`` wants both keys or neither)."""
    return Credentials(config.access_key, config.secret_key) if config.access_key else None


def peer_client(config: SecurityConfig, connect_timeout: float = 3.0) -> RemotingClient:
    """A ``RemotingClient`` signing every request with the process's account, over TLS with ``tls.enable``."""
    return RemotingClient(connect_timeout, ssl_context=peer_context(config), credentials=process_credentials(config))
