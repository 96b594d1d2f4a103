"""ReceiveBuffer: a slave's HA connection read straight into one buffer, over a real loopback socket:
the bytes come out whole and in order whatever the reads cut them into, a request larger than the
buffer grows it, a full buffer stops reading until bytes are consumed, and a closed connection
ends a wait with what was left."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import cast

import pytest

from spark_mq.store.ha.receive_buffer import MIN_READ, ReceiveBuffer


@contextlib.asynccontextmanager
async def connected(size: int) -> AsyncIterator[tuple[ReceiveBuffer, asyncio.StreamWriter]]:
    """A ReceiveBuffer of ``size`` bytes on the client end of a loopback connection, and the server's writer."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def accept(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await accepted.put(w)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    received = ReceiveBuffer(cast(asyncio.Transport, writer.transport), size)
    sender = await accepted.get()
    try:
        yield received, sender
    finally:
        writer.close()
        sender.close()
        server.close()


async def take(received: ReceiveBuffer, count: int) -> bytes:
    data = bytes((await received.wait(count))[:count])
    received.consume(count)
    return data


def test_bytes_come_out_whole_and_in_order_across_reads():
    async def run():
        async with connected(MIN_READ * 2) as (received, sender):
            payload = bytes(range(256)) * 1000  # 256,000 bytes: several reads, the buffer's front reused
            sender.write(payload)
            got = b"".join([await take(received, 1000) for _ in range(256)])
            assert got == payload

    asyncio.run(run())


def test_a_wait_for_more_than_the_buffer_holds_grows_it():
    async def run():
        async with connected(MIN_READ) as (received, sender):
            payload = b"x" * (MIN_READ * 5)
            sender.write(payload)
            assert await take(received, len(payload)) == payload

    asyncio.run(run())


def test_a_full_buffer_stops_reading_until_bytes_are_consumed():
    async def run():
        async with connected(MIN_READ) as (received, sender):
            sender.write(b"a" * MIN_READ + b"b" * MIN_READ)
            assert await take(received, 10) == b"a" * 10
            await asyncio.sleep(0.05)  # every byte on its way: the buffer stays at its size
            assert len(await received.wait(1)) <= MIN_READ
            rest = await take(received, MIN_READ * 2 - 10)
            assert rest == b"a" * (MIN_READ - 10) + b"b" * MIN_READ

    asyncio.run(run())


def test_a_closed_connection_ends_the_wait_with_what_was_left():
    async def run():
        async with connected(MIN_READ) as (received, sender):
            sender.write(b"partial")
            await sender.drain()
            sender.close()
            with pytest.raises(asyncio.IncompleteReadError) as e:
                await received.wait(100)
            assert e.value.partial == b"partial"

    asyncio.run(run())
