"""Redis Streams (Debian's ``redis-server``) through ``redis.asyncio`` with the hiredis parser.

Durability: ``appendonly yes`` + ``appendfsync everysec`` (the AOF is written before a command
is answered and fsynced once a second), RDB snapshots off (``save ""``), AOF rewrites at their
defaults. One stream key per stream, one field ``d`` per entry holding the body.

- produce: pipelines (no MULTI) of ``PIPELINE`` XADDs, ``PIPELINE_WINDOW`` pipelines in flight
  on pooled connections;
- drain: XRANGE with COUNT ``DRAIN_BATCH`` from the last id read;
- latency: XREAD BLOCK 0 on a dedicated connection;
- restart: Redis loads the whole AOF (RDB preamble + increments) into memory before it answers
  anything but LOADING; the probe's XRANGE COUNT 1 succeeds once that is done.

Variant AUTH (the produce row only): the ``default`` user off and an ACL user allowed every key and
command (``~* &* +@all``) with a password; every connection authenticates as it (AUTH user pass).
Redis has no REPLICATED variant: its replication acknowledges before any replica has the write.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence

from peer_systems.base import (
    AUTH_PASSWORD,
    AUTH_USER,
    LOOPBACK,
    Child,
    Client,
    Endpoint,
    OnBody,
    PeerError,
    PortServer,
    batches,
    command_output,
    package_version,
    windowed,
)

FIELD = b"d"
PIPELINE = 1000  # XADDs per pipeline
PIPELINE_WINDOW = 4  # pipelines in flight (one connection each)
DRAIN_BATCH = 10_000  # entries per XRANGE
READ_BATCH = 1000  # entries per blocking XREAD
FIRST_ID = "0-0"


class RedisServer(PortServer):
    name = "redis"
    binary = "redis-server"
    durability = "AOF, appendfsync everysec"  # SIGTERM fsyncs the AOF before exiting

    @classmethod
    def versions(cls) -> str:
        server = command_output([cls.binary, "--version"]).split(" sha=")[0]
        return f"{server}; redis-py {package_version('redis')}, hiredis {package_version('hiredis')}"

    def argv(self) -> list[str]:
        return [shutil.which(self.binary) or self.binary, "--bind", LOOPBACK, "--port", str(self.port),
                "--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--daemonize", "no", "--protected-mode", "no", "--logfile", ""]

    def start(self) -> None:
        self.child = Child(self.argv(), self.workdir / "redis.log")

    def after_listening(self) -> None:
        asyncio.run(_wait_loaded(self.endpoint))

    @property
    def endpoint(self) -> Endpoint:
        return {"host": LOOPBACK, "port": self.port}


class RedisAuthServer(RedisServer):
    durability = f"{RedisServer.durability}; an ACL user (default user off) on every connection"

    def argv(self) -> list[str]:
        # one token per argument: redis-server quotes each, so "a b" would be one ACL rule
        return [*super().argv(), "--user", "default", "off", "--user", AUTH_USER, "on", f">{AUTH_PASSWORD}",
                "~*", "&*", "+@all"]

    @property
    def endpoint(self) -> Endpoint:
        return {**super().endpoint, "user": AUTH_USER, "password": AUTH_PASSWORD}


def _redis(endpoint: Endpoint, **options):
    from redis.asyncio import Redis

    return Redis(host=endpoint["host"], port=endpoint["port"], username=endpoint.get("user"),
                 password=endpoint.get("password"), **options)


async def _wait_loaded(endpoint: Endpoint) -> None:
    from redis.exceptions import BusyLoadingError

    r = _redis(endpoint)
    try:
        while True:
            try:
                await r.ping()
                return
            except BusyLoadingError:
                await asyncio.sleep(0.05)
    finally:
        await r.aclose()


class RedisClient(Client):
    async def connect(self) -> None:
        self.r = _redis(self.endpoint, max_connections=PIPELINE_WINDOW + 2)

    async def close(self) -> None:
        await self.r.aclose()

    async def create(self, stream: str) -> None:
        """Nothing to do: XADD creates the stream; start from an empty key."""
        await self.r.delete(stream)

    async def _pipeline(self, stream: str, bodies: Sequence[bytes]) -> None:
        async with self.r.pipeline(transaction=False) as pipe:
            for b in bodies:
                pipe.xadd(stream, {FIELD: b})
            await pipe.execute()

    async def produce(self, stream: str, bodies: Sequence[bytes], count: int) -> None:
        await windowed(lambda chunk: self._pipeline(stream, chunk), batches(bodies, count, PIPELINE),
                       PIPELINE_WINDOW)

    async def drain(self, stream: str, count: int) -> int:
        got = size = 0
        start = "-"
        while got < count:
            entries = await self.r.xrange(stream, min=start, count=DRAIN_BATCH)
            if not entries:
                raise PeerError(f"drained {got} of {count} entries from {stream}")
            got += len(entries)
            size += sum(len(fields[FIELD]) for _id, fields in entries)
            start = b"(" + entries[-1][0]
        return size

    async def send(self, stream: str, bodies: list[bytes]) -> None:
        if len(bodies) == 1:
            await self.r.xadd(stream, {FIELD: bodies[0]})
        else:
            await self._pipeline(stream, bodies)

    async def subscribe(self, stream: str, on_body: OnBody, ready: asyncio.Event) -> None:
        last: bytes | str = FIRST_ID
        ready.set()
        while True:
            reply = await self.r.xread({stream: last}, count=READ_BATCH, block=0)
            for _key, entries in reply:
                for _id, fields in entries:
                    on_body(fields[FIELD])
                last = entries[-1][0]

    async def first(self, stream: str) -> bytes | None:
        entries = await self.r.xrange(stream, count=1)
        return entries[0][1][FIELD] if entries else None


RedisServer.client_class = RedisClient
