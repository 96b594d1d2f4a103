"""Our side: a ``spark-mq namesrv`` and a ``spark-mq broker`` process (conf/broker.conf as
shipped: ASYNC_FLUSH, 1 GiB commitlog files, index on), driven by our client library.

- produce: ``Producer.send(list)``, one SEND_BATCH_MESSAGE per ``PRODUCE_BATCH`` messages, with
  ``PRODUCE_WINDOW`` batches in flight, round robin over the topic's queues;
- drain: ``PullConsumer.pull_batch`` (columns), one pull of ``DRAIN_BATCH`` in flight per queue;
- latency: ``LitePullConsumer`` (long-polling pulls the broker holds until a message arrives);
- restart: only the broker restarts (the NameServer holds no data); the probe goes through the
  NameServer as an application would, so it also waits for the broker to register.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from peer_systems.base import (
    LOOPBACK,
    READY_TIMEOUT_S,
    Child,
    Client,
    Endpoint,
    OnBody,
    PeerError,
    Server,
    batches,
    free_port,
    package_version,
    windowed,
)

ROOT = Path(__file__).resolve().parents[2]
BROKER_CONF = ROOT / "conf" / "broker.conf"
NAMESRV_READY = "spark-mq namesrv listening on "
BROKER_READY = "spark-mq broker serving at "
QUEUES = 4  # conf/broker.conf defaultTopicQueueNums: what an auto-created topic gets
PRODUCE_BATCH = 2048  # messages per SEND_BATCH_MESSAGE (a 1 KiB batch is ~2.2 MB, under the 4 MiB cap)
PRODUCE_WINDOW = 4  # batch requests in flight
DRAIN_BATCH = 4096  # messages per pull (the broker also caps a pull at 4 MiB)
# a pull's response waits while the event loop decodes the other queues' responses: on a loaded
# machine that alone outlasted the client's 3 s default request timeout
DRAIN_PULL_TIMEOUT_S = 60.0
SUBSCRIBE_WAIT_S = 30.0  # the latency consumer owning every queue after its first rebalance
POLL_TIMEOUT_S = 1.0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "spark_mq.cli", *args]


def _read_ready(child: Child, prefix: str, what: str, timeout: float = READY_TIMEOUT_S) -> str:
    """The address from a server's ready line on stdout."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([child.proc.stdout], [], [], left)[0]:
            break
        chunk = os.read(child.proc.stdout.fileno(), 4096)
        if not chunk:
            break
        line += chunk
    text = line.decode(errors="replace")
    if not text.startswith(prefix):
        child.stop()
        raise PeerError(f"{what} did not get ready (printed {text!r}):\n{child.log_tail()}")
    return text.split()[-1]


class SparkMQServer(Server):
    name = "spark_mq"
    binary = sys.executable
    durability = "ASYNC_FLUSH (commitlog flushed every 500 ms)"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.namesrv_addr = ""
        self.broker_port = free_port()

    @classmethod
    def missing(cls) -> str | None:
        return None

    @classmethod
    def versions(cls) -> str:
        return f"spark-mq {package_version('spark-mq')} (Python {sys.version.split()[0]})"

    def start(self) -> None:
        if self.helper is None:
            self.helper = Child(_cli("namesrv", "--port", "0"), self.workdir / "namesrv.log", stdout_pipe=True)
            self.namesrv_addr = _read_ready(self.helper, NAMESRV_READY, "spark-mq namesrv")
        self.child = Child(_cli("broker", "-c", str(BROKER_CONF), "--namesrv", self.namesrv_addr,
                                 "--port", str(self.broker_port), "--store", str(self.data_dir),
                                 "--metrics-port", "0"),
                            self.workdir / "broker.log", stdout_pipe=True)

    def wait_ready(self) -> None:
        assert self.child is not None
        _read_ready(self.child, BROKER_READY, "spark-mq broker")

    @property
    def endpoint(self) -> Endpoint:
        return {"namesrv": self.namesrv_addr, "broker": f"{LOOPBACK}:{self.broker_port}"}


class SparkMQClient(Client):
    _groups = itertools.count()

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        from spark_mq.client.config import ClientConfig

        # one client id per client object: two of them in a process must not share a group member id
        self.config = ClientConfig(namesrv_addr=endpoint["namesrv"], instance_name=self._unique("bench"))
        self.producer = None
        self.puller = None

    def _unique(self, prefix: str) -> str:
        return f"{prefix}_{os.getpid()}_{next(self._groups)}"

    async def connect(self) -> None:
        from spark_mq.client.instance import ClientInstance
        from spark_mq.client.producer import Producer
        from spark_mq.client.pull_consumer import PullConsumer

        self.instance = ClientInstance(self.config)
        await self.instance.start()
        self.producer = await Producer(self._unique("bench_producer"), self.config, instance=self.instance).start()
        self.puller = PullConsumer(self._unique("bench_drain"), self.config, instance=self.instance)
        await self.puller.start()

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.shutdown()
        if self.puller is not None:
            await self.puller.shutdown()
        await self.instance.close()

    async def create(self, stream: str) -> None:
        from spark_mq.client.admin import Admin

        async with Admin(self.config) as admin:
            await admin.create_topic(stream, broker_addr=self.endpoint["broker"], read_queue_nums=QUEUES,
                                     write_queue_nums=QUEUES)

    async def produce(self, stream: str, bodies: Sequence[bytes], count: int) -> None:
        from spark_mq.common.message import Message

        pool = [Message(stream, b) for b in bodies]  # built once, as the peers' bodies are
        await windowed(self.producer.send, batches(pool, count, PRODUCE_BATCH), PRODUCE_WINDOW)

    async def drain(self, stream: str, count: int) -> int:
        queues = await self.puller.fetch_queues(stream)
        got = [0, 0]  # messages, body bytes

        async def one(mq) -> None:
            offset = 0
            while got[0] < count:
                # columns, not an object per message: every body still arrives as its own bytes
                r = await self.puller.pull_batch(mq, offset, DRAIN_BATCH, timeout=DRAIN_PULL_TIMEOUT_S)
                bodies = r.batch.bodies
                if not bodies and r.next_begin_offset >= r.max_offset:
                    return  # this queue is drained
                got[0] += len(bodies)
                got[1] += sum(map(len, bodies))
                offset = r.next_begin_offset

        await asyncio.gather(*(one(mq) for mq in queues))
        if got[0] < count:
            raise PeerError(f"drained {got[0]} of {count} messages from {stream}")
        return got[1]

    async def send(self, stream: str, bodies: list[bytes]) -> None:
        from spark_mq.common.message import Message

        if len(bodies) == 1:
            await self.producer.send(Message(stream, bodies[0]))
        else:
            await self.producer.send([Message(stream, b) for b in bodies])

    async def subscribe(self, stream: str, on_body: OnBody, ready: asyncio.Event) -> None:
        """``LitePullConsumer.poll``: long-polling pulls (the broker holds each until a message
        arrives) handed to the application on the event loop. It measured lower latency than
        ``PushConsumer``, whose listener runs on a thread pool (one thread hop per batch)."""
        from spark_mq.client.lite_pull_consumer import LitePullConsumer

        consumer = LitePullConsumer(self._unique("bench_latency"), self.config, consume_from="first")
        await consumer.subscribe(stream)
        await consumer.start()
        try:
            deadline = time.monotonic() + SUBSCRIBE_WAIT_S
            while len([mq for mq in consumer.assignment() if mq.topic == stream]) < QUEUES:
                if time.monotonic() > deadline:
                    raise PeerError(f"the consumer owns {sorted(consumer.assignment())} of {stream} after "
                                    f"{SUBSCRIBE_WAIT_S:g}s")
                await asyncio.sleep(0.01)
            ready.set()
            while True:
                for m in await consumer.poll(POLL_TIMEOUT_S):
                    on_body(m.body)
        finally:
            await consumer.shutdown()

    async def first(self, stream: str) -> bytes | None:
        """The first message of the first queue that has one (a small backlog need not reach
        every queue: one batch request goes to one queue)."""
        for mq in await self.puller.fetch_queues(stream):
            r = await self.puller.pull(mq, 0, 1)
            if r.messages:
                return r.messages[0].body
        return None


SparkMQServer.client_class = SparkMQClient
