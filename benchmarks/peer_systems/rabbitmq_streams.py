"""RabbitMQ Streams (Debian's ``rabbitmq-server`` with the ``rabbitmq_stream`` plugin) through
``rstream`` on the stream protocol.

Durability: a stream queue (one node); its segment files are written as chunks are stored and
left to the OS to flush (RabbitMQ counts on replication, not fsync), like our ASYNC_FLUSH.

The node runs unprivileged in our directory: its own ``epmd`` on a free port (a child of ours,
kept across broker restarts as our NameServer is), node name, Mnesia/stream data, logs, config,
enabled-plugins file and Erlang cookie (``HOME``) under ``workdir``; AMQP, stream and
distribution ports free loopback ports.

- produce: ``send_batch`` of ``PUBLISH_BATCH_BYTES`` worth of messages, not awaiting confirms
  between batches; done when the broker confirmed every publishing id;
- drain: a consumer from offset FIRST with ``DRAIN_CREDIT`` chunks of credit;
- latency: the same consumer from FIRST, callback per message;
- restart: the Erlang VM boots, RabbitMQ starts, the stream's segments are recovered; the probe
  subscribes from FIRST and waits for the first message.

Variants (produce rows only): REPLICATED is three nodes, each its own Erlang VM with its own files and
ports, one ``epmd`` and one Erlang cookie: the first boots alone, the other two join it at boot
(classic-config peer discovery); the stream is declared with ``x-initial-cluster-size`` 3 (leader on
the first node) and a publish is confirmed once a majority of its replicas wrote it. AUTH is one node
whose only user is a dedicated one with a password (``default_user``/``default_pass``: no ``guest``);
RabbitMQ authenticates every connection either way, the plain rows as ``guest``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from peer_systems.base import (
    AUTH_PASSWORD,
    AUTH_USER,
    LOOPBACK,
    REPLICAS,
    Child,
    Client,
    Endpoint,
    OnBody,
    PeerError,
    Server,
    free_port,
    package_version,
    port_open,
    wait_for,
)

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # the foreground script, not the su wrapper
GUEST = "guest"  # user and password, allowed from loopback by default
COOKIE = "sparkmqbenchcookie"  # the nodes of one cluster share it; the file must be private to us
PUBLISH_BATCH_BYTES = 512 * 1024  # under rstream's 1 MiB frame_max
DRAIN_CREDIT = 64  # chunks the broker may send ahead
LATENCY_CREDIT = 10  # rstream's default
FIRST_WAIT_S = 1.0  # a probe's wait for the first delivery before it counts as not served yet
ENABLED_PLUGINS = "[rabbitmq_stream].\n"
CONFIG = """\
listeners.tcp.1 = {host}:{amqp}
stream.listeners.tcp.1 = {host}:{stream}
stream.advertised_host = {host}
stream.advertised_port = {stream}
"""
AUTH_CONFIG = f"default_user = {AUTH_USER}\ndefault_pass = {AUTH_PASSWORD}\n"
JOIN_CONFIG = """\
cluster_formation.peer_discovery_backend = classic_config
cluster_formation.classic_config.nodes.1 = {seed}
"""
REPLICA_WAIT_S = 30.0  # a new stream's replicas all running, as its metadata reports them


def _dpkg_version(package: str) -> str:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.stdout.strip() or "?"


class _Node:
    """One RabbitMQ node: its name, ports and files (config, plugins, env file) in ``home``, its
    Mnesia and stream data in ``mnesia``; ``config`` is appended to the listeners' config."""

    def __init__(self, home: Path, mnesia: Path, config: str) -> None:
        self.home, self.mnesia = home, mnesia
        self.amqp_port, self.stream_port, self.dist_port = (free_port() for _ in range(3))
        self.name = f"bench{self.amqp_port}@localhost"
        home.mkdir(parents=True, exist_ok=True)
        (home / "rabbitmq.conf").write_text(CONFIG.format(host=LOOPBACK, amqp=self.amqp_port,
                                                          stream=self.stream_port) + config)
        (home / "enabled_plugins").write_text(ENABLED_PLUGINS)
        (home / "rabbitmq-env.conf").write_text("")

    def spawn(self, cookie_home: Path, epmd_port: int) -> Child:
        h = self.home
        env = {
            **os.environ,
            "HOME": str(cookie_home),  # the Erlang cookie is read from here
            "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.mnesia),
            "RABBITMQ_LOG_BASE": str(h / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_CONFIG_FILE": str(h / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(h / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(h / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(h / "rabbitmq-env.conf"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(h / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(h / "rabbitmq.pid"),
        }
        return Child([str(SERVER_SCRIPT)], h / "rabbitmq.log", env=env, cwd=h)

    def wait_listening(self, child: Child) -> None:
        wait_for(lambda: port_open(self.stream_port), child, f"rabbitmq-server {self.name} (stream listener)")


class RabbitMQServer(Server):
    name = "rabbitmq"
    binary = "epmd"  # with SERVER_SCRIPT, checked in missing()
    durability = "stream queue (segments written, flushed by the OS)"
    config = ""  # a variant's further rabbitmq.conf lines

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.epmd_port = free_port()
        self.node = _Node(workdir, self.data_dir / "mnesia", self.config)
        cookie = workdir / ".erlang.cookie"
        cookie.write_text(COOKIE)
        cookie.chmod(0o400)

    @classmethod
    def missing(cls) -> str | None:
        if not SERVER_SCRIPT.exists() or shutil.which(cls.binary) is None:
            return "rabbitmq-server is not installed (scripts/install_peers.sh installs it)"
        return None

    @classmethod
    def versions(cls) -> str:
        return (f"RabbitMQ {_dpkg_version('rabbitmq-server')} (Erlang {_dpkg_version('erlang-base')}); "
                f"rstream {package_version('rstream')}")

    def start(self) -> None:
        if self.helper is None:
            self.helper = Child([shutil.which("epmd") or "epmd", "-port", str(self.epmd_port)],
                              self.workdir / "epmd.log")
            wait_for(lambda: port_open(self.epmd_port), self.helper, "epmd")
        self.child = self.node.spawn(self.workdir, self.epmd_port)

    def wait_ready(self) -> None:
        assert self.child is not None
        self.node.wait_listening(self.child)

    @property
    def endpoint(self) -> Endpoint:
        return {"host": LOOPBACK, "port": self.node.stream_port}


class RabbitMQAuthServer(RabbitMQServer):
    durability = f"{RabbitMQServer.durability}; a dedicated user with a password (no guest)"
    config = AUTH_CONFIG

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "user": AUTH_USER, "password": AUTH_PASSWORD}


class RabbitMQClusterServer(RabbitMQServer):
    durability = (f"{REPLICAS} nodes, a stream queue of {REPLICAS} replicas (x-initial-cluster-size): a publish "
                  "confirmed once a majority wrote it, segments flushed by the OS")

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.joiners = [_Node(workdir / f"n{i}", self.data_dir / f"n{i}", JOIN_CONFIG.format(seed=self.node.name))
                        for i in range(1, REPLICAS)]

    def wait_ready(self) -> None:
        """The first node up, then the others booted together (each joins the first at boot,
        before it opens its listeners)."""
        super().wait_ready()
        for node in self.joiners:
            self.nodes.append(node.spawn(self.workdir, self.epmd_port))
        for node, child in zip(self.joiners, self.nodes, strict=True):
            node.wait_listening(child)

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "replicas": REPLICAS}


class _Confirms:
    """Counts the broker's publish confirmations; ``done`` is set when ``expected`` arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.confirmed = 0
        self.failed = 0
        self.done = asyncio.Event()

    def __call__(self, status) -> None:
        if status.is_confirmed:
            self.confirmed += 1
        else:
            self.failed += 1
        if self.confirmed + self.failed >= self.expected:
            self.done.set()

    async def wait(self) -> None:
        await self.done.wait()
        if self.failed:
            raise PeerError(f"{self.failed} of {self.expected} stream publishes were refused")


class RabbitMQClient(Client):
    async def connect(self) -> None:
        from rstream import Producer

        self.user = self.endpoint.get("user", GUEST)
        self.password = self.endpoint.get("password", GUEST)
        self.producer = Producer(self.endpoint["host"], self.endpoint["port"], username=self.user,
                                 password=self.password)
        await self.producer.start()
        self.consumers: list = []

    async def close(self) -> None:
        for c in self.consumers:
            await c.close()
        await self.producer.close()

    async def _consumer(self):
        from rstream import Consumer

        c = Consumer(self.endpoint["host"], self.endpoint["port"], username=self.user, password=self.password)
        await c.start()
        self.consumers.append(c)
        return c

    async def create(self, stream: str) -> None:
        replicas = self.endpoint.get("replicas", 1)
        if replicas == 1:
            await self.producer.create_stream(stream, exists_ok=True)
            return
        from rstream.exceptions import LeaderNotAvailable

        await self.producer.create_stream(stream, {"x-initial-cluster-size": replicas}, exists_ok=True)
        locator = await self.producer.default_client
        deadline = asyncio.get_running_loop().time() + REPLICA_WAIT_S
        followers: list = []
        while len(followers) < replicas - 1:  # fewer members than asked: a node did not join the cluster
            if asyncio.get_running_loop().time() > deadline:
                raise PeerError(f"stream {stream} has {len(followers)} replicas besides its leader after "
                                f"{REPLICA_WAIT_S:g}s, not {replicas - 1}: a node is out of the cluster")
            await asyncio.sleep(0.1)
            try:
                _leader, followers = await locator.query_leader_and_replicas(stream)
            except LeaderNotAvailable:
                followers = []

    async def produce(self, stream: str, bodies: Sequence[bytes], count: int) -> None:
        confirms = _Confirms(count)
        per_batch = max(1, PUBLISH_BATCH_BYTES // max(len(bodies[0]), 1))
        n = len(bodies)
        for start in range(0, count, per_batch):
            chunk = [bodies[i % n] for i in range(start, min(start + per_batch, count))]
            await self.producer.send_batch(stream, chunk, on_publish_confirm=confirms)
        await confirms.wait()

    async def _read(self, stream: str, on_body: OnBody, credit: int) -> None:
        from rstream import ConsumerOffsetSpecification, OffsetType

        consumer = await self._consumer()

        def cb(body: bytes, _ctx) -> None:
            on_body(body)

        await consumer.subscribe(stream, cb, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                                 initial_credit=credit)

    async def drain(self, stream: str, count: int) -> int:
        got = [0, 0]
        done = asyncio.Event()

        def on_body(body: bytes) -> None:
            got[0] += 1
            got[1] += len(body)
            if got[0] >= count:
                done.set()

        await self._read(stream, on_body, DRAIN_CREDIT)
        await done.wait()
        return got[1]

    async def send(self, stream: str, bodies: list[bytes]) -> None:
        confirms = _Confirms(len(bodies))
        await self.producer.send_batch(stream, bodies, on_publish_confirm=confirms)
        await confirms.wait()

    async def subscribe(self, stream: str, on_body: OnBody, ready: asyncio.Event) -> None:
        await self._read(stream, on_body, LATENCY_CREDIT)
        ready.set()
        await asyncio.Event().wait()

    async def first(self, stream: str) -> bytes | None:
        got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def on_body(body: bytes) -> None:
            if not got.done():
                got.set_result(body)

        await self._read(stream, on_body, 1)
        try:
            return await asyncio.wait_for(got, FIRST_WAIT_S)
        except asyncio.TimeoutError:
            return None


RabbitMQServer.client_class = RabbitMQClient
