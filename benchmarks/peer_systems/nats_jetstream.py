"""NATS JetStream (Debian's ``nats-server``) through ``nats-py``.

Durability: a stream with file storage (``-js -sd <dir>``, one replica); the file store writes
every message to its block file as it stores it and fsyncs on its own interval (2 min in 2.9),
like our ASYNC_FLUSH. One stream per stream name, subject = the stream name.

- produce: ``publish_async`` (each message acknowledged by a PubAck), up to ``PUBLISH_PENDING``
  unacknowledged, then ``publish_async_completed``;
- drain: an ephemeral pull consumer (AckPolicy none, DeliverPolicy all), ``fetch`` of
  ``DRAIN_BATCH``;
- latency: an ordered push consumer (ack none, flow control) with a callback;
- restart: the server recovers its streams from the block files; the probe's direct get of
  sequence 1 succeeds once the stream is back.

Variants (produce rows only): REPLICATED is three ``nats-server`` processes clustered over loopback
routes, each with its own JetStream store, and the stream made with ``num_replicas=3``: a PubAck
comes once the stream's RAFT group (leader + one follower of three) stored the message. AUTH is
one server with ``--user``/``--pass``: every connection authenticates.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from pathlib import Path

from peer_systems.base import (
    AUTH_PASSWORD,
    AUTH_USER,
    LOOPBACK,
    POLL_INTERVAL_S,
    READY_TIMEOUT_S,
    REPLICAS,
    Child,
    Client,
    Endpoint,
    OnBody,
    PeerError,
    PortServer,
    command_output,
    free_port,
    package_version,
    port_open,
    wait_for,
)

PUBLISH_PENDING = 4000  # nats-py's default publish_async_max_pending
DRAIN_BATCH = 10_000  # messages per fetch
FETCH_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
CLUSTER_NAME = "bench"
PROBE_STREAM = "bench_cluster_probe"  # made and deleted once the cluster can place three replicas


class NatsServer(PortServer):
    name = "nats"
    binary = "nats-server"
    durability = "JetStream file storage"
    clean_exit_codes = (0, 1)  # SIGTERM: lame-duck-free clean shutdown, stores flushed; nats-server 2.9 then exits 1

    @classmethod
    def versions(cls) -> str:
        return f"{command_output([cls.binary, '--version'])}; nats-py {package_version('nats-py')}"

    def argv(self) -> list[str]:
        return [shutil.which(self.binary) or self.binary, "-a", LOOPBACK, "-p", str(self.port), "-js",
                "-sd", str(self.data_dir), "-l", str(self.workdir / "nats.log")]

    def start(self) -> None:
        self.child = Child(self.argv(), self.workdir / "nats.out")

    def after_listening(self) -> None:
        asyncio.run(_wait_jetstream(self.endpoint))

    @property
    def endpoint(self) -> Endpoint:
        return {"url": f"nats://{LOOPBACK}:{self.port}"}


class NatsAuthServer(NatsServer):
    durability = f"{NatsServer.durability}; user/password (--user/--pass) on every connection"

    def argv(self) -> list[str]:
        return [*super().argv(), "--user", AUTH_USER, "--pass", AUTH_PASSWORD]

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "user": AUTH_USER, "password": AUTH_PASSWORD}


class NatsClusterServer(NatsServer):
    durability = (f"{REPLICAS} nodes (routes on loopback), JetStream file storage, stream num_replicas="
                  f"{REPLICAS}: PubAck once its RAFT quorum stored the message")

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.ports = [self.port] + [free_port() for _ in range(REPLICAS - 1)]
        self.route_ports = [free_port() for _ in range(REPLICAS)]

    def start(self) -> None:
        binary = shutil.which(self.binary) or self.binary
        for i, (port, route_port) in enumerate(zip(self.ports, self.route_ports, strict=True)):
            routes = ",".join(f"nats://{LOOPBACK}:{p}" for p in self.route_ports if p != route_port)
            node = Child([binary, "-a", LOOPBACK, "-p", str(port), "-js", "-sd", str(self.data_dir / f"n{i}"),
                          "--server_name", f"n{i}", "--cluster_name", CLUSTER_NAME, "--cluster",
                          f"nats://{LOOPBACK}:{route_port}", "--routes", routes,
                          "-l", str(self.workdir / f"nats{i}.log")], self.workdir / f"nats{i}.out")
            if self.child is None:
                self.child = node
            else:
                self.nodes.append(node)

    def wait_ready(self) -> None:
        for port, node in zip(self.ports, [self.child, *self.nodes], strict=True):
            assert node is not None
            wait_for(lambda p=port: port_open(p), node, f"{self.binary} on port {port}")
        asyncio.run(_wait_jetstream(self.endpoint))

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "replicas": REPLICAS}


async def _connect(endpoint: Endpoint, **options):
    import nats

    return await nats.connect(endpoint["url"], connect_timeout=CONNECT_TIMEOUT_S, error_cb=_quiet,
                              user=endpoint.get("user"), password=endpoint.get("password"), **options)


async def _wait_jetstream(endpoint: Endpoint) -> None:
    """Until JetStream answers (a clustered one: until it can place a stream's replicas, which
    takes a meta leader and every node known to it)."""
    from nats.js.api import StorageType, StreamConfig

    nc = await _connect(endpoint)
    js = nc.jetstream()
    replicas = endpoint.get("replicas", 1)
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
    try:
        while True:
            try:
                if replicas == 1:
                    await js.account_info()
                else:
                    await js.add_stream(StreamConfig(name=PROBE_STREAM, subjects=[PROBE_STREAM],
                                                     storage=StorageType.FILE, num_replicas=replicas))
                    await js.delete_stream(PROBE_STREAM)
                return
            except Exception as e:  # JetStream not enabled yet, no meta leader, too few peers
                if asyncio.get_running_loop().time() > deadline:
                    raise PeerError(f"JetStream not ready after {READY_TIMEOUT_S:g}s: {e!r}") from e
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def _quiet(_error: Exception) -> None:
    """nats-py prints every connection error with its traceback unless given a callback."""


class NatsClient(Client):
    async def connect(self) -> None:
        # nats-py retries a refused first connection itself, every reconnect_time_wait (2 s by
        # default): poll as often as the restart probe does; errors are the probe's to report
        self.nc = await _connect(self.endpoint, reconnect_time_wait=POLL_INTERVAL_S)
        self.js = self.nc.jetstream(publish_async_max_pending=PUBLISH_PENDING)

    async def close(self) -> None:
        await self.nc.close()

    async def create(self, stream: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        await self.js.add_stream(StreamConfig(name=stream, subjects=[stream], storage=StorageType.FILE,
                                              num_replicas=self.endpoint.get("replicas", 1)))

    async def produce(self, stream: str, bodies: Sequence[bytes], count: int) -> None:
        failed: list[BaseException] = []

        def check(fut: asyncio.Future) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                failed.append(fut.exception())

        n = len(bodies)
        for i in range(count):
            fut = await self.js.publish_async(stream, bodies[i % n])
            fut.add_done_callback(check)
        await self.js.publish_async_completed()
        if failed:
            raise PeerError(f"{len(failed)} JetStream publishes failed, first: {failed[0]!r}")

    async def drain(self, stream: str, count: int) -> int:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        sub = await self.js.pull_subscribe(stream, stream=stream, config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
        got = size = 0
        try:
            while got < count:
                msgs = await sub.fetch(min(DRAIN_BATCH, count - got), timeout=FETCH_TIMEOUT_S)
                got += len(msgs)
                size += sum(len(m.data) for m in msgs)
        finally:
            await sub.unsubscribe()
        return size

    async def send(self, stream: str, bodies: list[bytes]) -> None:
        if len(bodies) == 1:
            await self.js.publish(stream, bodies[0])
        else:
            futures = [await self.js.publish_async(stream, b) for b in bodies]
            await asyncio.gather(*futures)

    async def subscribe(self, stream: str, on_body: OnBody, ready: asyncio.Event) -> None:
        from nats.js.api import DeliverPolicy

        async def cb(msg) -> None:
            on_body(msg.data)

        sub = await self.js.subscribe(stream, stream=stream, cb=cb, ordered_consumer=True,
                                      deliver_policy=DeliverPolicy.ALL)
        try:
            ready.set()
            await asyncio.Event().wait()
        finally:
            await sub.unsubscribe()

    async def first(self, stream: str) -> bytes | None:
        msg = await self.js.get_msg(stream, seq=1)
        return msg.data


NatsServer.client_class = NatsClient
