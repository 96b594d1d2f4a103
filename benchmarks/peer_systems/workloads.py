"""The measured workloads, written once against :class:`~peer_systems.base.Client`, so every
system runs exactly the same steps and only its adapter differs.

- :func:`timed_produce` / :func:`timed_drain`: wall time of one adapter call.
- :func:`measure_latency`: a consumer in its own process (as a real pipeline's consumer is),
  subscribed before the first send; this process sends at a fixed rate, each body stamped with
  ``time.monotonic_ns()`` (one clock for every process of the machine) just before its send; the
  consumer records its own clock when the application sees the message.
- :func:`measure_restart`: from spawning the server process to the first message of the backlog
  in the client's hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import struct
import time
import traceback
from collections.abc import Awaitable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from peer_systems.base import POLL_INTERVAL_S, READY_TIMEOUT_S, Client, Endpoint, PeerError, Server

STAMP = struct.Struct(">qq")  # send time (monotonic ns), sequence number: the head of every body
POOL_SIZE = 1024  # distinct bodies cycled through by a produce run
LATENCY_GRACE_S = 15.0  # after the last send, how long the consumer may still take
MIN_BODY = STAMP.size


def body_pool(size: int, n: int = POOL_SIZE) -> list[bytes]:
    """``n`` different bodies of ``size`` bytes (sequence number first, then filler)."""
    if size < MIN_BODY:
        raise ValueError(f"bodies need at least {MIN_BODY} bytes, got {size}")
    filler = b"x" * (size - MIN_BODY)
    return [STAMP.pack(0, i) + filler for i in range(n)]


async def _timed(work: Awaitable[Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = await work
    return time.perf_counter() - t0, result


async def timed_produce(client: Client, stream: str, body_size: int, count: int) -> float:
    """Seconds to send ``count`` messages of ``body_size`` bytes, all acknowledged."""
    pool = body_pool(body_size)
    seconds, _ = await _timed(client.produce(stream, pool, count))
    return seconds


async def timed_drain(client: Client, stream: str, count: int) -> tuple[float, int]:
    """Seconds to receive ``count`` messages from the stream's start, and their body bytes."""
    return await _timed(client.drain(stream, count))


# -- latency ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyResult:
    p50_ms: float
    p99_ms: float
    max_ms: float
    counted: int  # messages after the warm-up
    sent: int
    received: int
    send_rate: float  # achieved msg/s


def measure_latency(server: Server, stream: str, rate: float, seconds: float, warmup_s: float,
                    body_size: int) -> LatencyResult:
    """Send ``rate`` msg/s for ``seconds`` to a consumer in another process; latencies of the
    messages sent after ``warmup_s``."""
    count = max(1, int(rate * seconds))
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=latency_consumer, args=(server.name, server.endpoint, stream, count,
                                                      seconds + LATENCY_GRACE_S, child), daemon=True)
    proc.start()
    try:
        kind, payload = _receive(parent, READY_TIMEOUT_S, "the latency consumer to subscribe")
        if kind != "ready":
            raise PeerError(f"{server.name} latency consumer failed:\n{payload}")
        t0, send_s = asyncio.run(_paced_send(server.client_class, server.endpoint, stream, rate, count, body_size))
        kind, payload = _receive(parent, seconds + 2 * LATENCY_GRACE_S, "the latency consumer's results")
        if kind != "done":
            raise PeerError(f"{server.name} latency consumer failed:\n{payload}")
    finally:
        proc.join(LATENCY_GRACE_S)
        if proc.is_alive():
            proc.kill()  # our own child, by its handle
            proc.join()
    rows = np.frombuffer(payload, dtype=np.int64).reshape(-1, 3)  # receive ns, send ns, seq
    counted = rows[rows[:, 1] >= t0 + int(warmup_s * 1e9)]
    if not counted.size:
        raise PeerError(f"{server.name}: no message after the warm-up arrived ({len(rows)} of {count} in all)")
    lat_ms = (counted[:, 0] - counted[:, 1]) / 1e6
    return LatencyResult(float(np.percentile(lat_ms, 50)), float(np.percentile(lat_ms, 99)), float(lat_ms.max()),
                         int(counted.shape[0]), count, int(np.unique(rows[:, 2]).size), count / send_s)


def _receive(conn, timeout: float, what: str) -> tuple[str, Any]:
    if not conn.poll(timeout):
        raise PeerError(f"timed out after {timeout:g}s waiting for {what}")
    return conn.recv()


async def _paced_send(client_class: type[Client], endpoint: Endpoint, stream: str, rate: float, count: int,
                      body_size: int) -> tuple[int, float]:
    """Send ``count`` stamped bodies at ``rate``: whatever is due is sent at once (one message,
    or the few that fell due while the previous send was in flight). Returns the start time (ns)
    and the seconds taken."""
    filler = b"x" * (body_size - MIN_BODY)
    interval_ns = 1e9 / rate
    async with client_class(endpoint) as client:
        t0 = time.monotonic_ns()
        sent = 0
        while sent < count:
            now = time.monotonic_ns()
            due = min(count, int((now - t0) / interval_ns) + 1)
            if due <= sent:
                await asyncio.sleep((t0 + sent * interval_ns - now) / 1e9)
                continue
            bodies = [STAMP.pack(time.monotonic_ns(), seq) + filler for seq in range(sent, due)]
            await client.send(stream, bodies)
            sent = due
        return t0, (time.monotonic_ns() - t0) / 1e9


def latency_consumer(system: str, endpoint: Endpoint, stream: str, expected: int, timeout: float, conn) -> None:
    """Child process: subscribe, say "ready", collect until ``expected`` arrived or ``timeout``,
    send back (receive ns, send ns, seq) rows."""
    from peer_systems import SYSTEMS

    try:
        rows = asyncio.run(_consume(SYSTEMS[system].client_class, endpoint, stream, expected, timeout, conn))
        conn.send(("done", rows))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


async def _consume(client_class: type[Client], endpoint: Endpoint, stream: str, expected: int, timeout: float,
                   conn) -> bytes:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    seen: list[tuple[int, bytes]] = []  # list.append is atomic: listeners may run on pool threads

    def on_body(body: bytes) -> None:
        seen.append((time.monotonic_ns(), body[:MIN_BODY]))
        if len(seen) == expected:
            loop.call_soon_threadsafe(done.set)

    async with client_class(endpoint) as client:
        ready = asyncio.Event()
        task = loop.create_task(client.subscribe(stream, on_body, ready))
        waiter = loop.create_task(ready.wait())
        await asyncio.wait([task, waiter], timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiter.cancel()
            if task.done():
                task.result()  # raises the subscribe failure
            raise PeerError(f"not subscribed after {READY_TIMEOUT_S:g}s")
        conn.send(("ready", None))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    rows = np.empty((len(seen), 3), dtype=np.int64)
    for i, (received, head) in enumerate(seen):
        sent, seq = STAMP.unpack(head)
        rows[i] = (received, sent, seq)
    return rows.tobytes()


# -- restart ------------------------------------------------------------------------------


def measure_restart(server: Server, stream: str, backlog: Collection[bytes]) -> float:
    """Seconds from spawning the stopped server to the first message of ``stream`` read back
    (it must be one of the ``backlog`` bodies: a topic's first queue need not start with the
    very first message sent)."""
    t0 = time.perf_counter()
    server.start()
    asyncio.run(_probe_first(server.client_class, server.endpoint, stream, backlog))
    return time.perf_counter() - t0


async def _probe_first(client_class: type[Client], endpoint: Endpoint, stream: str,
                       expected: Collection[bytes]) -> None:
    """Ask for the first message every ``POLL_INTERVAL_S`` (a new client after any failure)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    client: Client | None = None
    last: BaseException | None = None
    try:
        while True:
            try:
                if client is None:
                    client = client_class(endpoint)
                    await client.connect()
                body = await client.first(stream)
                if body is not None:
                    if body not in expected:
                        raise PeerError(f"the first message read back, {body[:32]!r}..., is not a backlog body")
                    return
            except PeerError:
                raise
            except Exception as e:  # not serving yet: connection refused, loading, unknown stream...
                last = e
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.close()
                client = None
            if time.monotonic() > deadline:
                raise PeerError(f"first message not served after {READY_TIMEOUT_S:g}s; last error: {last!r}")
            await asyncio.sleep(POLL_INTERVAL_S)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
