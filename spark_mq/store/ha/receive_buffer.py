"""A slave's receiving end of its HA connection: the socket reads straight into one buffer
(``asyncio.BufferedProtocol``), and the HA client parses its master's transfers and appends them
from there.

Why: a ``StreamReader`` copies every byte twice on its way (into its own buffer as it arrives,
out again per read) and wakes its reader for every piece; a slave receives every commitlog byte
of its master, so those copies and wake-ups were about a quarter of its Python time in the
replicated benchmark. Here the kernel's copy into this buffer is the only one before the
commitlog's write, and the reader is woken only once the bytes it asked for are all there.

The buffer keeps the bytes received and not yet consumed in ``[start, end)``; what a reader asks
for that does not fit makes it grow (a transfer larger than it), and the unconsumed bytes move
to its front when the free tail gets short. Reading from the socket pauses while the buffer is
full and resumes once bytes are consumed. As with a ``StreamReader``, bytes still unread when the connection
fails (a reset: the master was killed, say) are dropped; after a clean end they are read first.

``last_read`` says when bytes last arrived: the HA client drops a connection silent for too long.

Thread-safety: none; the event loop calls the protocol methods, the HA client's coroutine the rest.
"""

from __future__ import annotations

import asyncio
import time

BUFFER_SIZE = 1 << 20  # bytes one socket read may bring: several transfers at RocketMQ's 32 KiB
MIN_READ = 64 << 10  # the free tail below which the unconsumed bytes move to the front first


class ReceiveBuffer(asyncio.BufferedProtocol):
    def __init__(self, transport: asyncio.Transport, size: int = BUFFER_SIZE) -> None:
        """Takes over ``transport``'s incoming bytes (``set_protocol``) from now on: nothing may have
        arrived on it unread (a master sends no byte before the slave's first report)."""
        self._transport = transport
        self._buf = bytearray(size)
        self._start = 0  # the first byte not consumed
        self._end = 0  # the end of the bytes received
        self._need = 0  # unconsumed bytes the waiter waits for
        self._waiter: asyncio.Future[None] | None = None
        self._lost: BaseException | None = None  # why no more bytes come (the connection ended)
        self._failed: BaseException | None = None  # the connection's error (a reset, say): nothing more is read
        self._paused = False
        self.last_read = time.monotonic()  # when bytes last arrived (or the connection started)
        transport.set_protocol(self)

    async def wait(self, count: int) -> memoryview:
        """The bytes received and not consumed, once there are at least ``count`` (valid until the next
        ``wait``); raises ``asyncio.IncompleteReadError`` if the connection ends first, its error at once
        if it failed."""
        if self._failed is not None:
            raise self._failed
        if len(self._buf) - self._start < count:
            self._resize(count)
        while self._end - self._start < count:
            if self._lost is not None:
                raise self._lost
            self._resume()  # the buffer has room for the bytes awaited
            self._need = count
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return memoryview(self._buf)[self._start:self._end]

    def consume(self, count: int) -> None:
        """The first ``count`` bytes of the last ``wait`` are used: their room is free again."""
        self._start += count
        if self._start == self._end:
            self._start = self._end = 0
        if count > 0:  # room again (get_buffer moves the bytes left to the front)
            self._resume()

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            self._transport.resume_reading()

    def _resize(self, count: int) -> None:
        """Room for ``count`` bytes from the first unconsumed one: the unconsumed bytes move to the
        front, into a larger buffer if this one is too small."""
        kept = self._end - self._start
        if count > len(self._buf):
            grown = bytearray(count)
            grown[:kept] = self._buf[self._start:self._end]
            self._buf = grown
        else:
            self._buf[:kept] = self._buf[self._start:self._end]
        self._start, self._end = 0, kept

    # -- asyncio.BufferedProtocol ------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self._buf) - self._end < MIN_READ and self._start > 0:
            self._resize(0)
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self.last_read = time.monotonic()
        if self._end == len(self._buf):  # full: nothing more until the reader consumes
            self._paused = True
            self._transport.pause_reading()
        if self._waiter is not None and self._end - self._start >= self._need:
            self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or asyncio.IncompleteReadError(bytes(self._buf[self._start:self._end]), None)
        self._failed = exc  # as a StreamReader: a failed connection's unread bytes are dropped, an ended one's read
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
