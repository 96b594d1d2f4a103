"""One remoting connection, the same on both ends: a reader task, requests in flight, handlers.

Either side may send requests (a broker sends NOTIFY_CONSUMER_IDS_CHANGED to a consumer), so
server and client share this class. The reader task decodes frames; a response completes the
future waiting under its opaque (responses may arrive in any order); a request runs its
handler in a task of its own, so a long-polling request never blocks the ones behind it.

All methods run on the connection's event loop; coroutines may interleave freely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from spark_mq.common.errors import FrameError, RemotingCommandError, RemotingConnectError, RemotingTimeoutError
from spark_mq.remoting.codec import DEFAULT_MAX_FRAME, FrameDecoder, encode
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, "Connection"], Awaitable["RemotingCommand | None"]]
CloseCallback = Callable[["Connection"], None]
READ_CHUNK = 256 * 1024


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """TCP_NODELAY on a TCP socket: every frame is one request or response that someone waits
    for, so Nagle's algorithm (holding a small write until the previous one is acknowledged)
    would only add a delayed-ACK wait to it. asyncio's own transports already set it; this
    makes it hold whatever event loop runs the connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


class Connection:
    """A socket speaking RocketMQ remoting; ``peer`` is the other end's ``host:port``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handlers: dict[int, Handler],
                 max_frame: int = DEFAULT_MAX_FRAME, role: str = "remoting") -> None:
        self._reader = reader
        self._writer = writer
        self._handlers = handlers  # shared with the owning server/client: registrations apply at once
        self._decoder = FrameDecoder(max_frame)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._close_callbacks: list[CloseCallback] = []
        self._role = role
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        _no_delay(writer)
        self.closed = False
        self.close_cause: BaseException | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"{role}-read-{self.peer}")

    def on_close(self, callback: CloseCallback) -> None:
        """Call ``callback(conn)`` once when the connection closes (at once if already closed)."""
        if self.closed:
            self._run_callback(callback)
        else:
            self._close_callbacks.append(callback)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for the response with the same opaque."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}") from self.close_cause
        cmd.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[cmd.opaque] = fut
        try:
            self._write(cmd)
            if self._writer.transport.get_write_buffer_size():  # the socket did not take it all: mind the buffer
                return await asyncio.wait_for(self._drain_then(fut), timeout)
            # the usual case: wait on the future itself with a timer, no task or wrapper in between
            timer = loop.call_later(timeout, _expire, fut)
            try:
                return await fut
            finally:
                timer.cancel()
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(
                f"no response from {self.peer} to request code {cmd.code} (opaque {cmd.opaque}) within {timeout:.3g}s"
            ) from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that gets no response."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}") from self.close_cause
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        self._write(cmd)

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark."""
        if not self.closed:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    async def _drain_then(self, fut: asyncio.Future[RemotingCommand]) -> RemotingCommand:
        await self.drain()
        return await fut

    def close(self, cause: BaseException | None = None) -> None:
        """Close now; every pending request fails with ``RemotingConnectError`` naming ``cause``."""
        if self.closed:
            return
        self.closed = True
        self.close_cause = cause or RemotingConnectError("closed locally")
        err = RemotingConnectError(f"connection to {self.peer} closed: {self.close_cause}")
        err.__cause__ = self.close_cause
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        for task in self._tasks:
            task.cancel()
        if asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()
        self._writer.close()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for cb in callbacks:
            self._run_callback(cb)

    async def wait_closed(self) -> None:
        """Close and wait for the reader, the handler tasks and the socket to finish."""
        self.close()
        await asyncio.gather(self._reader_task, *self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    def _run_callback(self, cb: CloseCallback) -> None:
        try:
            cb(self)
        except Exception:
            log.exception("close callback of %s connection %s failed", self._role, self.peer)

    def _write(self, cmd: RemotingCommand) -> None:
        if self._writer.is_closing():
            self.close(ConnectionResetError("socket is closing"))
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}")
        self._writer.write(encode(cmd))

    async def _read_loop(self) -> None:
        cause: BaseException
        try:
            while True:
                data = await self._reader.read(READ_CHUNK)
                if not data:
                    cause = ConnectionResetError(f"{self.peer} closed the connection")
                    break
                for cmd in self._decoder.feed(data):
                    self._dispatch(cmd)
        except FrameError as e:
            log.warning("closing %s connection from %s: bad frame: %s", self._role, self.peer, e)
            cause = e
        except (ConnectionError, OSError) as e:
            cause = e
        except asyncio.CancelledError:
            cause = RemotingConnectError("closed locally")
        self.close(cause)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is None or fut.done():
                log.debug("%s: response with no waiting request (late?): %s", self.peer, cmd.describe())
            else:
                fut.set_result(cmd)
            return
        log.debug("%s: %s extFields=%s body=%dB", self.peer, cmd.describe(), cmd.ext_fields, len(cmd.body))
        task = asyncio.get_running_loop().create_task(self._serve(cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            # RocketMQ's NettyRemotingAbstract remark, word for word
            response: RemotingCommand | None = cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
            log.debug("%s: %s not supported", self.peer, cmd.describe())
        else:
            try:
                response = await handler(cmd, self)
            except asyncio.CancelledError:
                raise
            except RemotingCommandError as e:  # the client's mistake: one line, no traceback
                log.warning("%s: bad %s: %s", self.peer, cmd.describe(), e)
                response = cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
            except Exception as e:
                log.exception("%s: handler for %s failed", self.peer, cmd.describe())
                response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if cmd.is_oneway or response is None or self.closed:
            return
        response.opaque = cmd.opaque
        response.flag = (response.flag | RESPONSE_FLAG) & ~ONEWAY_FLAG
        try:
            self._write(response)
            await self._writer.drain()
        except (RemotingConnectError, ConnectionError) as e:
            log.debug("%s: response to %s dropped: %s", self.peer, cmd.describe(), e)
