"""Our side of the variant rows: the same ``spark-mq`` processes and client as
``spark_mq_broker.py``, with conf/broker.conf as shipped plus a variant's keys.

- REPLICATED: a SYNC_MASTER and two slaves (brokerRole=SLAVE, brokerId 1 and 2, same brokerName),
  three replicas of the commitlog; a send is acknowledged once a slave has its bytes (as a quorum
  of three: the master and one slave). Ready once the master reports both slaves connected.
- AUTH: ``aclEnable`` on the NameServer and the broker with a plain_acl.yml of two accounts: an
  admin (the cluster's own, which the broker registers as and the benchmark creates topics as) and
  a user allowed PUB|SUB on every topic and group, which every produce request is signed as and
  checked against.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from peer_systems.base import (
    AUTH_PASSWORD,
    AUTH_USER,
    LOOPBACK,
    READY_TIMEOUT_S,
    REPLICAS,
    Child,
    Endpoint,
    PeerError,
    free_port,
)
from peer_systems.spark_mq_broker import (
    BROKER_CONF,
    BROKER_READY,
    NAMESRV_READY,
    QUEUES,
    SparkMQClient,
    SparkMQServer,
    _cli,
    _read_ready,
)

ADMIN_KEY, ADMIN_SECRET = "bench_admin", "bench_admin_secret_1"  # the cluster's account in the AUTH variant
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
  - accessKey: {AUTH_USER}
    secretKey: {AUTH_PASSWORD}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
SLAVES_POLL_S = 0.05


class _ConfiguredServer(SparkMQServer):
    """A NameServer and a broker as ``SparkMQServer`` starts them, each with a variant's keys."""

    def namesrv_keys(self) -> str:
        return ""

    def broker_keys(self) -> str:
        return ""

    def _broker(self, what: str, port: int, keys: str) -> Child:
        conf = self.workdir / f"{what}.conf"
        conf.write_text(f"{BROKER_CONF.read_text()}\n# {what} of the {self.__class__.__name__}\n{keys}")
        return Child(_cli("broker", "-c", str(conf), "--namesrv", self.namesrv_addr, "--port", str(port),
                          "--store", str(self.data_dir / what), "--metrics-port", "0"),
                     self.workdir / f"{what}.log", stdout_pipe=True)

    def start(self) -> None:
        if self.helper is None:
            conf = self.workdir / "namesrv.conf"
            conf.write_text(self.namesrv_keys())
            self.helper = Child(_cli("namesrv", "-c", str(conf), "--port", "0"), self.workdir / "namesrv.log",
                                stdout_pipe=True)
            self.namesrv_addr = _read_ready(self.helper, NAMESRV_READY, "spark-mq namesrv")
        self.child = self._broker("broker", self.broker_port, self.broker_keys())


class SparkMQAuthServer(_ConfiguredServer):
    durability = f"{SparkMQServer.durability}; aclEnable, every request signed by an account and checked"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.acl_file = workdir / "plain_acl.yml"
        self.acl_file.write_text(PLAIN_ACL)

    def namesrv_keys(self) -> str:
        return f"aclEnable=true\naclFile={self.acl_file}\naccessKey={ADMIN_KEY}\nsecretKey={ADMIN_SECRET}\n"

    def broker_keys(self) -> str:
        return self.namesrv_keys()

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "access_key": AUTH_USER, "secret_key": AUTH_PASSWORD,
                "admin_key": ADMIN_KEY, "admin_secret": ADMIN_SECRET}


class SparkMQAuthClient(SparkMQClient):
    """Signs every request as the endpoint's user; creates topics as its admin."""

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        self.config = dataclasses.replace(self.config, access_key=endpoint["access_key"],
                                          secret_key=endpoint["secret_key"])

    async def create(self, stream: str) -> None:
        from spark_mq.client.admin import Admin

        admin = dataclasses.replace(self.config, access_key=self.endpoint["admin_key"],
                                    secret_key=self.endpoint["admin_secret"])
        async with Admin(admin) as a:
            await a.create_topic(stream, broker_addr=self.endpoint["broker"], read_queue_nums=QUEUES,
                                 write_queue_nums=QUEUES)


SparkMQAuthServer.client_class = SparkMQAuthClient


class SparkMQReplicatedServer(_ConfiguredServer):
    durability = (f"SYNC_MASTER + {REPLICAS - 1} slaves ({REPLICAS} replicas of the commitlog): a send "
                  "acknowledged once a slave has its bytes; ASYNC_FLUSH on each")

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.ha_port = free_port()
        self.slave_ports = [free_port() for _ in range(REPLICAS - 1)]

    def broker_keys(self) -> str:
        return f"brokerRole=SYNC_MASTER\nhaListenPort={self.ha_port}\n"

    def wait_ready(self) -> None:
        """The master serving, then the slaves started and serving, then the master reporting
        every slave connected (a send before that could be answered SLAVE_NOT_AVAILABLE)."""
        super().wait_ready()
        for i, port in enumerate(self.slave_ports, start=1):
            self.nodes.append(self._broker(f"slave{i}", port, f"brokerRole=SLAVE\nbrokerId={i}\n"
                                                               f"haListenPort={free_port()}\n"))
        for i, slave in enumerate(self.nodes, start=1):
            _read_ready(slave, BROKER_READY, f"spark-mq broker slave{i}")
        asyncio.run(self._wait_slaves())

    async def _wait_slaves(self) -> None:
        from spark_mq.client.admin import Admin
        from spark_mq.client.config import ClientConfig

        deadline = time.monotonic() + READY_TIMEOUT_S
        async with Admin(ClientConfig(namesrv_addr=self.namesrv_addr)) as admin:
            while True:
                info = await admin.api.get_broker_runtime_info(f"{LOOPBACK}:{self.broker_port}")
                if int(info.get("haConnectedSlaves", "0")) >= len(self.slave_ports):
                    return
                if time.monotonic() > deadline:
                    raise PeerError(f"the master has {info.get('haConnectedSlaves')} of {len(self.slave_ports)} "
                                    f"slaves connected after {READY_TIMEOUT_S:g}s")
                await asyncio.sleep(SLAVES_POLL_S)
