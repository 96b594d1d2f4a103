"""A spark_mq cluster on the machines of ``tests/netns.py``: each server on its own host, bound to that
host's address, with the security the test asks for (``Security``: ACL on or off, TLS on or off, one
switch each), and our client in the root namespace reaching them over the bridge.

With ACL off the servers run with ``allowInsecureRemote=true`` (they listen beyond loopback); with it
on, every server has ``aclEnable`` and the accounts of one ``plain_acl.yml`` (RocketMQ's format) and
signs what it sends its peers as the cluster's admin account; the test's clients sign as the admin
(topic creation) or as an application account that may publish and subscribe. With TLS on, a throwaway
CA and certificates (``scripts/make_certs.py``) with each host's address as a SAN, the servers in
``tls.server.mode=enforcing`` asking for client certificates, and every peer dialling over TLS.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from integration.controller._support import FAST_CONF, start_controller
from integration.ha.ledger import key_of
from netns import Network
from servers import NAMESRV_READY, ServerProcess

from spark_mq.client.config import (
    ACCESS_KEY_ENV,
    SECRET_KEY_ENV,
    TLS_CA_ENV,
    TLS_CERT_ENV,
    TLS_ENV,
    TLS_KEY_ENV,
    ClientConfig,
)
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI

REPO = Path(__file__).resolve().parents[3]
NAMESRV_PORT = 9876
CONTROLLER_PORT = 9878
HA_PORT = 10912  # every broker on its own host: RocketMQ's default HA port
ADMIN = ("rocketmq2", "12345678-admin")  # the cluster's own account: brokers sign with it, topics are made with it
APP = ("spark-app", "app-secret-d2a5")  # the application's: publish and subscribe, nothing else
PULL_BATCH = 256
CLIENT_TIMEOUT_S = 10.0

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    whiteRemoteAddress:
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {APP[0]}
    secretKey: {APP[1]}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


@dataclass(frozen=True)
class Security:
    """Which protections the cluster runs with; ``root`` holds plain_acl.yml and the certificates."""

    acl: bool
    tls: bool
    root: Path

    def prepare(self, addresses: list[str]) -> None:
        """Write plain_acl.yml and, with TLS, a CA and certificates naming ``addresses``."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "plain_acl.yml").write_text(PLAIN_ACL)
        if self.tls:
            subprocess.run([sys.executable, str(REPO / "scripts" / "make_certs.py"), str(self.root / "certs"),
                            *(f"--ip={a}" for a in addresses)], check=True, capture_output=True, timeout=60)

    def server_conf(self) -> str:
        """The keys every server's conf gets."""
        lines = []
        if self.acl:
            lines += ["aclEnable=true", f"aclFile={self.root / 'plain_acl.yml'}", f"accessKey={ADMIN[0]}",
                      f"secretKey={ADMIN[1]}"]
        else:
            lines.append("allowInsecureRemote=true")
        if self.tls:
            certs = self.root / "certs"
            lines += ["tls.server.mode=enforcing", f"tls.server.certPath={certs / 'server.pem'}",
                      f"tls.server.keyPath={certs / 'server.key'}", f"tls.server.trustCertPath={certs / 'ca.pem'}",
                      "tls.server.need.client.auth=require", "tls.enable=true",
                      f"tls.client.certPath={certs / 'client.pem'}", f"tls.client.keyPath={certs / 'client.key'}",
                      f"tls.client.trustCertPath={certs / 'ca.pem'}"]
        return "".join(f"{line}\n" for line in lines)

    def client_options(self, account: tuple[str, str] = APP) -> dict[str, object]:
        """ClientConfig keywords for ``account`` (with ACL on) and TLS (with it on)."""
        options: dict[str, object] = {}
        if self.acl:
            options.update(access_key=account[0], secret_key=account[1])
        if self.tls:
            certs = self.root / "certs"
            options.update(tls_enable=True, tls_cert_path=str(certs / "client.pem"),
                           tls_key_path=str(certs / "client.key"), tls_trust_cert_path=str(certs / "ca.pem"))
        return options

    def job_env(self, account: tuple[str, str] = APP) -> dict[str, str]:
        """The environment a Spark job takes ``account`` (with ACL on) and its TLS files (with TLS on) from, as the
        jobs/ scripts do: not their command line, which Spark shows (``sun.java.command``)."""
        env = {ACCESS_KEY_ENV: account[0], SECRET_KEY_ENV: account[1]} if self.acl else {}
        if self.tls:
            certs = self.root / "certs"
            env.update({TLS_ENV: "1", TLS_CA_ENV: str(certs / "ca.pem"), TLS_CERT_ENV: str(certs / "client.pem"),
                        TLS_KEY_ENV: str(certs / "client.key")})
        return env

    def client_config(self, namesrv: str, account: tuple[str, str] = APP) -> ClientConfig:
        return ClientConfig(namesrv, request_timeout_s=CLIENT_TIMEOUT_S, **self.client_options(account))

    def api(self, namesrv: str) -> SyncMQClientAPI:
        """Requests as the admin account (topic creation, routes)."""
        config = self.client_config(namesrv, ADMIN)
        signed = {"credentials": config.credentials} if self.acl else {}
        dialled = {"ssl_context": config.ssl_context()} if self.tls else {}
        return SyncMQClientAPI(timeout=CLIENT_TIMEOUT_S, **signed, **dialled)


def start_namesrv_on(net: Network, role: str, root: Path, security: Security) -> ServerProcess:
    """A NameServer on host ``role`` at NAMESRV_PORT of its address."""
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "namesrv.conf"
    conf.write_text(f"listenAddress={net.hosts[role].address}\nlistenPort={NAMESRV_PORT}\n{security.server_conf()}")
    return ServerProcess(["namesrv", "-c", str(conf)], root / "namesrv.log", NAMESRV_READY, verbose=False,
                         launcher=net.launcher(role))


def start_controller_on(net: Network, role: str, root: Path, security: Security,
                        extra_conf: str = "") -> ServerProcess:
    """A controller on host ``role`` at CONTROLLER_PORT of its address: controllerType=file, unless ``extra_conf``
    says otherwise (``_support.zookeeper_conf``)."""
    return start_controller(root, f"{FAST_CONF}listenAddress={net.hosts[role].address}\n{security.server_conf()}"
                            f"{extra_conf}", port=CONTROLLER_PORT, launcher=net.launcher(role))


def broker_host_conf(net: Network, role: str, security: Security) -> str:
    """A broker's keys for host ``role``: bound to its address, registered under it, HA on HA_PORT."""
    address = net.hosts[role].address
    return f"listenAddress={address}\nbrokerIP1={address}\nhaListenPort={HA_PORT}\n{security.server_conf()}"


def read_back(config: ClientConfig, group: str, topic: str) -> Counter[str]:
    """Every ledger key in ``topic``, read from offset 0 of each queue to its end, with its count."""
    found: Counter[str] = Counter()
    with SyncPullConsumer(group, config) as consumer:
        consumer.start()
        for mq in consumer.fetch_queues(topic):
            offset = 0
            while (got := consumer.pull(mq, offset, PULL_BATCH)).status == PullStatus.FOUND:
                found.update(k for m in got.messages if (k := key_of(m.body)) is not None)
                offset = got.next_begin_offset
    return found
