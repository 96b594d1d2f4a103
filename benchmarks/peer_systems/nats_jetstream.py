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
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence

from peer_systems.base import (
    LOOPBACK,
    POLL_INTERVAL_S,
    Child,
    Client,
    Endpoint,
    OnBody,
    PeerError,
    PortServer,
    command_output,
    package_version,
)

PUBLISH_PENDING = 4000  # nats-py's default publish_async_max_pending
DRAIN_BATCH = 10_000  # messages per fetch
FETCH_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0


class NatsServer(PortServer):
    name = "nats"
    binary = "nats-server"
    durability = "JetStream file storage"
    clean_exit_codes = (0, 1)  # SIGTERM: lame-duck-free clean shutdown, stores flushed; nats-server 2.9 then exits 1

    @classmethod
    def versions(cls) -> str:
        return f"{command_output([cls.binary, '--version'])}; nats-py {package_version('nats-py')}"

    def start(self) -> None:
        argv = [shutil.which(self.binary) or self.binary, "-a", LOOPBACK, "-p", str(self.port), "-js",
                "-sd", str(self.data_dir), "-l", str(self.workdir / "nats.log")]
        self.child = Child(argv, self.workdir / "nats.out")

    def after_listening(self) -> None:
        asyncio.run(_wait_jetstream(self.endpoint))

    @property
    def endpoint(self) -> Endpoint:
        return {"url": f"nats://{LOOPBACK}:{self.port}"}


async def _wait_jetstream(endpoint: Endpoint) -> None:
    import nats

    nc = await nats.connect(endpoint["url"], connect_timeout=CONNECT_TIMEOUT_S, error_cb=_quiet)
    try:
        while True:
            try:
                await nc.jetstream().account_info()
                return
            except Exception:  # JetStream not enabled yet
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def _quiet(_error: Exception) -> None:
    """nats-py prints every connection error with its traceback unless given a callback."""


class NatsClient(Client):
    async def connect(self) -> None:
        import nats

        # nats-py retries a refused first connection itself, every reconnect_time_wait (2 s by
        # default): poll as often as the restart probe does; errors are the probe's to report
        self.nc = await nats.connect(self.endpoint["url"], connect_timeout=CONNECT_TIMEOUT_S,
                                     reconnect_time_wait=POLL_INTERVAL_S, error_cb=_quiet)
        self.js = self.nc.jetstream(publish_async_max_pending=PUBLISH_PENDING)

    async def close(self) -> None:
        await self.nc.close()

    async def create(self, stream: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        await self.js.add_stream(StreamConfig(name=stream, subjects=[stream], storage=StorageType.FILE,
                                              num_replicas=1))

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
