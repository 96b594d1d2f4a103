"""One remoting connection, the same on both ends: a reader task, requests in flight, handlers.

Either side may send requests (a broker sends NOTIFY_CONSUMER_IDS_CHANGED to a consumer), so
server and client share this class. The reader task decodes frames; a response completes the
future waiting under its opaque (responses may arrive in any order); a request runs its
handler in a task of its own, so a long-polling request never blocks the ones behind it.

On the server side (a ``ServerChannelConfig`` given) one connection costs a bounded amount of
memory, whatever its client does:

* the reader reads nothing more while the answers not yet sent exceed the write buffer's
  high-water mark (a client that does not read its answers is served no more requests until it
  has read them down to the low-water mark);
* at most ``serverChannelMaxInFlightRequests`` requests are served at once: a request takes a
  slot when it is dispatched and gives it back once its answer is written and the buffer is
  back under the mark, so each slot adds at most one answer beyond it. A handler that
  waits on an outside event (a long-polling pull waiting for messages) gives its slot back for
  the wait (``try_hold``/``end_hold``): a consumer holding a pull per queue never stops its
  connection from being read. A handler may also return None at once and answer later (``detach``: a held
  pull waiting on a callback, not a coroutine); ``end_detached`` then serves the rest as a request, or gives
  back the slot of an answer written meanwhile. A handler awaiting a request it sent back on its own connection
  keeps its slot: with every slot so taken the answers wait behind the bound until they time out;
* ``expire`` (the server calls it every second) closes a connection idle for
  ``serverChannelMaxIdleTimeSeconds`` (nothing received; clients heartbeat every 30 s) or holding
  part of a frame for ``serverPartialFrameTimeoutSeconds``. The decoder holds only the bytes that
  arrived, never the length a frame declares.

A client connection given an account's ``Credentials`` signs every request it sends with them
(RocketMQ's ``AclClientRPCHook``), whoever builds the request: the remoting client's calls, and a
producer's END_TRANSACTION answering a broker's check on the broker's own connection.

A client connection never stops reading (both ends waiting for the other to read would be a
deadlock) and is never closed for idleness or a slow frame. It decodes a chunk in the transport's
``data_received`` itself while its reader task waits for one (nothing queued): a response completes
its request's future there, one loop turn sooner than through the task (a long-polling consumer's
answer reaches ``poll`` that much earlier). A request may name an ``answered`` function: it runs on the
response right there (before any task resumes), and what it returns, or raises, is what ``request`` gives
its caller: a long-polling consumer hands a pull's messages to a waiting ``poll`` in it, so ``poll`` resumes
in the next loop turn, ahead of the pull's own coroutine chain.

A server may give its connections a ``gate`` (the ACL, ``spark_mq/acl/gate.py``): every request is
checked by it before its handler is looked up, so an unknown code is refused too; without one a
request pays a single ``None`` test.

Log lines a peer's bad input causes go through ``client_faults``, rate-limited per peer host and
reason: a flood of bad frames or requests writes a bounded amount of log.

Bytes arrive through ``_Intake``, the transport's protocol once a connection owns it: each chunk the
socket gives goes to the frame decoder as it is. A ``StreamReader`` copied every chunk twice more (into
its buffer, then out of it): 2.2 MB each for a 2,048-message batch of 1 KiB bodies.

All methods run on the connection's event loop; coroutines may interleave freely.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from spark_mq.common.config import ServerChannelConfig
from spark_mq.common.deadlines import Deadlines
from spark_mq.common.errors import (
    FrameError,
    MessageValidationError,
    RemotingCommandError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from spark_mq.common.log_limit import LogLimiter
from spark_mq.common.tls import CLIENT_CERT_REFUSED
from spark_mq.remoting import eager
from spark_mq.remoting.codec import DEFAULT_MAX_FRAME, FrameDecoder, frame_pieces
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from spark_mq.remoting.signature import Credentials

log = logging.getLogger(__name__)
client_faults = LogLimiter(log)  # the lines a peer's bad input causes, rate-limited per peer host and reason

# a handler raising one of these met the client's mistake, not ours: one WARNING line, no traceback
CLIENT_ERRORS = (RemotingCommandError, MessageValidationError)

Handler = Callable[[RemotingCommand, "Connection"], Awaitable["RemotingCommand | None"]]
# a server's check of every request before its handler is looked up: None lets it through, else the answer
# (the ACL's; see spark_mq/acl/gate.py). Synchronous, so a server without one pays a None test per request.
Gate = Callable[[RemotingCommand, "Connection"], "RemotingCommand | None"]
CloseCallback = Callable[["Connection"], None]
# run on a response as the reader decodes it (``Connection.request``'s ``answered``): its value is the request's result
Answered = Callable[[RemotingCommand], object]
READ_CHUNK = 256 * 1024
# bytes received and not yet decoded past which the socket is no longer read: a few of the
# transport's chunks (256 KiB each), so that a reader task keeping up never pauses it
INTAKE_LIMIT = 4 * READ_CHUNK
CLOSE_FLUSH_TIMEOUT_S = 2.0  # how long a closing socket may take to send what is left before it is aborted


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """TCP_NODELAY on a TCP socket: every frame is one request or response that someone waits
    for, so Nagle's algorithm (holding a small write until the previous one is acknowledged)
    would only add a delayed-ACK wait to it. asyncio's own transports already set it; this
    makes it hold whatever event loop runs the connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Intake(asyncio.Protocol):
    """The chunks a transport receives, handed to the connection's reader task uncopied (``read``).

    It replaces the ``StreamReaderProtocol`` the connection was opened with as the transport's protocol
    and passes on to it what the ``StreamWriter`` relies on (write flow control for ``drain``, the close for
    ``wait_closed``). Like a ``StreamReader`` it stops reading the socket while more than ``INTAKE_LIMIT``
    bytes wait for the reader task. What the ``StreamReader`` received before the swap is read first."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.Transport) -> None:
        self._stream = transport.get_protocol()
        self._transport = transport
        self._leftover: asyncio.StreamReader | None = reader  # until what it holds is read
        self._chunks: deque[bytes] = deque()
        self._held = 0  # bytes in _chunks
        self._paused = False
        self._eof = reader.at_eof()
        self._error: BaseException | None = reader.exception()
        self._waiter: asyncio.Future[None] | None = None
        self._interrupted = False
        # takes a chunk at once, in ``data_received``, while the reader task waits
        self.take: Callable[[bytes], None] | None = None
        reader.feed_eof()  # it receives nothing more: its ``read`` returns what it holds, then b""
        transport.set_protocol(self)

    async def read(self) -> bytes | None:
        """The next chunk received; b"" once the peer has closed its side; None once after ``interrupt``;
        raises the transport's error."""
        if self._leftover is not None:
            data = await self._leftover.read(READ_CHUNK)
            if data:
                return data
            self._leftover = None
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
            if self._interrupted:
                self._interrupted = False
                return None
        data = self._chunks.popleft()
        self._held -= len(data)
        if self._paused and self._held <= INTAKE_LIMIT:
            self._paused = False
            self._transport.resume_reading()
        return data

    def interrupt(self) -> None:
        """Make a waiting ``read`` return None: ``take`` left the reader task something to do first."""
        self._interrupted = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if self.take is not None and waiter is not None and not waiter.done():  # nothing queued: no task turn
            self.take(data)
            return
        self._chunks.append(data)
        self._held += len(data)
        if self._held > INTAKE_LIMIT and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return self._stream.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        self._stream.connection_lost(exc)

    def pause_writing(self) -> None:
        self._stream.pause_writing()

    def resume_writing(self) -> None:
        self._stream.resume_writing()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


class Connection:
    """A socket speaking RocketMQ remoting; ``peer`` is the other end's ``host:port``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handlers: dict[int, Handler],
                 max_frame: int = DEFAULT_MAX_FRAME, role: str = "remoting",
                 channel: ServerChannelConfig | None = None, gate: Gate | None = None,
                 credentials: Credentials | None = None) -> None:
        self._writer = writer
        self._handlers = handlers  # shared with the owning server/client: registrations apply at once
        self._gate = gate
        self._decoder = FrameDecoder(max_frame)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._answered_by: dict[int, Answered] = {}  # the pending requests that gave ``answered``, by opaque
        self._tasks: set[asyncio.Task] = set()
        self._close_callbacks: list[CloseCallback] = []
        self._role = role
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)  # what log limits are keyed by
        _no_delay(writer)
        self._last_read = time.monotonic()  # when a chunk was last read
        self._frame_since: float | None = None  # since when a partial frame sits in the decoder (server side)
        self._channel = channel
        self._credentials = credentials  # a client's account: signs every request sent here (never a response)
        self._max_in_flight = channel.server_channel_max_in_flight_requests if channel else 0  # 0: unbounded
        self._max_held = channel.server_channel_max_held_requests if channel else 0
        self._in_flight = 0  # requests holding a slot: served, or answered but above the high-water mark
        self._held = 0  # requests waiting on an outside event with their slot given back
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._detached: dict[int, Callable[[], None]] = {}  # requests answered later (``detach``): their cancels
        if channel is not None:
            writer.transport.set_write_buffer_limits(channel.write_buffer_high_water_mark,
                                                     channel.write_buffer_low_water_mark)
        self.closed = False
        self.close_cause: BaseException | None = None
        self._answered = False  # the peer sent something (a TLS server refusing our certificate never does)
        self._intake = _Intake(reader, writer.transport)
        self._intake.take = self._take if channel is None else self._take_requests
        # a server's frames decoded in ``data_received`` that must wait (for a slot, or the peer to read its
        # answers): the reader task serves them before it reads on
        self._backlog: Iterator[RemotingCommand] | None = None
        loop = asyncio.get_running_loop()
        self._deadlines = Deadlines(loop)  # the requests' timeouts, behind one loop timer
        self._reader_task = loop.create_task(self._read_loop(), name=f"{role}-read-{self.peer}")

    def _tls_hint(self) -> str:
        """Why a TLS server may close a client's connection before any answer: TLS 1.3 checks the client's
        certificate after the client's side of the handshake is done, and the refusal arrives as a close."""
        if self._channel is not None or self._answered or self._writer.get_extra_info("sslcontext") is None:
            return ""
        return f" before answering anything over TLS: {CLIENT_CERT_REFUSED}"

    def on_close(self, callback: CloseCallback) -> None:
        """Call ``callback(conn)`` once when the connection closes (at once if already closed)."""
        if self.closed:
            self._run_callback(callback)
        else:
            self._close_callbacks.append(callback)

    async def request(self, cmd: RemotingCommand, timeout: float, answered: Answered | None = None) -> Any:
        """Send a request and wait for the response with the same opaque; with ``answered``, what
        ``answered(response)`` returns (or raises), called as the response is decoded."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}") from self.close_cause
        cmd.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        self._sign(cmd)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[cmd.opaque] = fut
        if answered is not None:
            self._answered_by[cmd.opaque] = answered
        try:
            self._write(cmd)
            if self._writer.transport.get_write_buffer_size():  # the socket did not take it all: mind the buffer
                return await asyncio.wait_for(self._drain_then(fut), timeout)
            # the usual case: wait on the future itself with a timeout, no task or wrapper in between
            deadline = self._deadlines.add(timeout, _expire, fut)
            try:
                return await fut
            finally:
                self._deadlines.remove(deadline)
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(
                f"no response from {self.peer} to request code {cmd.code} (opaque {cmd.opaque}) within {timeout:.3g}s"
            ) from None
        finally:
            self._pending.pop(cmd.opaque, None)
            if answered is not None:
                self._answered_by.pop(cmd.opaque, None)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that gets no response."""
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}") from self.close_cause
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        self._sign(cmd)
        self._write(cmd)

    async def drain(self) -> None:
        """Wait until the socket's write buffer is below its high-water mark (at once when the socket took
        everything written: the usual case, without the stream's drain and its checks)."""
        if not self.closed and self._writer.transport.get_write_buffer_size():
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    async def _drain_then(self, fut: asyncio.Future[RemotingCommand]) -> RemotingCommand:
        await self.drain()
        return await fut

    def try_hold(self) -> bool:
        """Called by a handler about to wait on an outside event (a long-polling pull waiting for
        messages): gives the request's in-flight slot back for the wait, so held requests never
        stop the connection from being read. False when the connection holds its
        ``serverChannelMaxHeldRequests`` already: answer now instead of waiting."""
        if not self._max_in_flight:
            return True
        if self._held >= self._max_held:
            return False
        self._held += 1
        self._release_slot()
        return True

    async def end_hold(self) -> None:
        """After ``try_hold``'s wait: take a slot again before answering (waits while all are taken)."""
        if not self._max_in_flight:
            return
        self._held -= 1
        if not self._take_slot_now() and not self.closed:
            await self._wait_for_slot()

    def end_hold_now(self) -> bool:
        """``end_hold`` when a slot is free now (True); False, holding nothing, when it would have to wait."""
        if not self._max_in_flight:
            return True
        if not self._take_slot_now():
            return False
        self._held -= 1
        return True

    def detach(self, cmd: RemotingCommand, cancel: Callable[[], None]) -> bool:
        """``try_hold`` for a handler that returns None at once (its slot goes back as it returns: ``_serve``) and
        answers ``cmd`` later, from a callback: ``end_detached`` ends it, ``cancel()`` runs instead should the
        connection close first. False when the connection holds its ``serverChannelMaxHeldRequests``
        already: answer now instead."""
        if self._max_in_flight:
            if self._held >= self._max_held:
                return False
            self._held += 1
        self._detached[id(cmd)] = cancel
        return True

    def end_detached(self, cmd: RemotingCommand, handler: Handler | None) -> None:
        """A detached ``cmd``'s wait is over. With ``handler``: serve it so (a task; a slot taken back first,
        as ``end_hold``); without: its answer was written after ``end_hold_now``, whose slot goes back once
        the socket has taken the answer (as a handler's once its answer is drained)."""
        if self._detached.pop(id(cmd), None) is None or self.closed:
            return
        if handler is not None:
            self._start(self._serve(cmd, handler))
        elif self._max_in_flight:
            if self._writer.transport.get_write_buffer_size():
                self._start(self._release_slot_drained())
            else:
                self._release_slot()

    async def _release_slot_drained(self) -> None:
        try:
            await self.drain()
        finally:
            self._release_slot()

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as one of the connection's tasks (cancelled when it closes)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def respond(self, cmd: RemotingCommand, response: RemotingCommand) -> None:
        """Write ``response`` to request ``cmd`` (a dropped connection drops it). A handler answering its
        request outside its own coroutine (a held pull answered by the send that woke it) then returns None."""
        if self.closed:
            return
        response.opaque = cmd.opaque
        response.flag = (response.flag | RESPONSE_FLAG) & ~ONEWAY_FLAG
        try:
            self._write(response)
        except (RemotingConnectError, ConnectionError) as e:
            log.debug("%s: response to %s dropped: %s", self.peer, cmd.describe(), e)

    def expire(self, now: float) -> None:
        """Close the connection if it has been idle past ``serverChannelMaxIdleTimeSeconds`` or held a
        partial frame past ``serverPartialFrameTimeoutSeconds`` (server side; the server calls this
        every second). Unsent answers are dropped: a client that stopped reading never takes them."""
        channel = self._channel
        if channel is None or self.closed:
            return
        idle = now - self._last_read
        max_idle = channel.server_channel_max_idle_time_seconds
        max_partial = channel.server_partial_frame_timeout_seconds
        if max_idle and idle > max_idle:
            client_faults.log(logging.INFO, self.peer_host, "idle", "closing %s connection from %s: idle for %.0f s "
                              "(serverChannelMaxIdleTimeSeconds=%d)", self._role, self.peer, idle, max_idle)
            self.close(RemotingConnectError(f"idle for {idle:.0f} s"), abort=True)
        elif max_partial and self._frame_since is not None and now - self._frame_since > max_partial:
            client_faults.warning(self.peer_host, "partial frame", "closing %s connection from %s: a frame still "
                                  "incomplete after %.0f s, %d bytes of it in (serverPartialFrameTimeoutSeconds=%d)",
                                  self._role, self.peer, now - self._frame_since, self._decoder.buffered, max_partial)
            self.close(FrameError(f"frame incomplete after {max_partial} s"), abort=True)

    def close(self, cause: BaseException | None = None, abort: bool = False) -> None:
        """Close now; every pending request fails with ``RemotingConnectError`` naming ``cause``.
        ``abort`` drops what is not sent yet instead of flushing it first."""
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
        self._answered_by.clear()
        self._deadlines.close()
        for task in self._tasks:
            task.cancel()
        detached, self._detached = self._detached, {}
        for cancel in detached.values():
            cancel()
        if asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()
        if abort:
            self._writer.transport.abort()
        else:
            self._writer.close()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for cb in callbacks:
            self._run_callback(cb)

    async def wait_closed(self) -> None:
        """Close and wait for the reader, the handler tasks and the socket to finish. The socket
        sends what is left first, for ``CLOSE_FLUSH_TIMEOUT_S`` at most: a peer that does not read
        must not hold up a shutdown, so it is then aborted."""
        self.close()
        await asyncio.gather(self._reader_task, *self._tasks, return_exceptions=True)
        closing = asyncio.ensure_future(self._writer.wait_closed())
        if not (await asyncio.wait({closing}, timeout=CLOSE_FLUSH_TIMEOUT_S))[0]:
            self._writer.transport.abort()
        with contextlib.suppress(Exception):
            await closing

    def _run_callback(self, cb: CloseCallback) -> None:
        try:
            cb(self)
        except Exception:
            log.exception("close callback of %s connection %s failed", self._role, self.peer)

    def _sign(self, cmd: RemotingCommand) -> None:
        """Add the account's ``AccessKey`` and ``Signature`` as RocketMQ's AclClientRPCHook does, last of all (what
        is signed is what is sent; signing again, as a retry does, gives the same fields)."""
        if self._credentials is not None:
            self._credentials.sign(cmd.ext_fields, cmd.body)

    def _write(self, cmd: RemotingCommand) -> None:
        transport = self._writer.transport  # the stream writer's own write and is_closing only pass these on
        if transport.is_closing():
            self.close(ConnectionResetError("socket is closing" + self._tls_hint()))
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self.close_cause}")
        for piece in frame_pieces(cmd):
            transport.write(piece)

    def _take_slot_now(self) -> bool:
        """Take an in-flight slot if one is free and nobody waits for one."""
        if self._in_flight < self._max_in_flight and not self._slot_waiters:
            self._in_flight += 1
            return True
        return False

    async def _wait_for_slot(self) -> None:
        """Wait in line for a slot; ``_release_slot`` hands it over (``_in_flight`` unchanged)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot just as we were cancelled: pass it on
                self._release_slot()
            raise

    def _release_slot(self) -> None:
        """Give a slot back: to the first in line (the reader, or a request back from its hold), else free it."""
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._in_flight -= 1

    async def _read_loop(self) -> None:
        cause: BaseException
        abort = False
        server_side = self._channel is not None
        high_water = self._channel.write_buffer_high_water_mark if self._channel else 0
        transport = self._writer.transport
        try:
            while True:
                if server_side and transport.get_write_buffer_size() > high_water:
                    self._frame_since = None  # waiting for the peer to read is not the frame's time
                    await self._writer.drain()
                if self._backlog is not None:
                    frames, self._backlog = self._backlog, None
                    await self._serve_frames(frames)
                    continue
                data = await self._intake.read()
                if data is None:  # ``_take_requests`` left a backlog
                    continue
                if not data:
                    cause = ConnectionResetError(f"{self.peer} closed the connection" + self._tls_hint())
                    break
                if not server_side:
                    self._feed(data)
                    continue
                self._mark_read()
                await self._serve_frames(self._decoder.feed(data))
        except FrameError as e:
            self._bad_frame(e)
            cause, abort = e, server_side
        except (ConnectionError, OSError) as e:  # a TLS server refusing our certificate may say so with an alert
            hint = self._tls_hint()
            cause = ConnectionResetError(f"{self.peer} closed the connection ({e}){hint}") if hint else e
        except asyncio.CancelledError:
            cause = RemotingConnectError("closed locally")
        self.close(cause, abort)

    def _mark_read(self) -> None:
        self._answered = True
        self._last_read = time.monotonic()

    async def _serve_frames(self, frames: Iterator[RemotingCommand]) -> None:
        """A server's frames dispatched in order, each request once it has a slot."""
        for cmd in frames:
            if self._no_slot_for(cmd):
                self._frame_since = None
                await self._wait_for_slot()
            self._dispatch(cmd)
        self._time_partial_frame()

    def _no_slot_for(self, cmd: RemotingCommand) -> bool:
        """True when ``cmd`` is a request and no in-flight slot is free for it now (else it holds one)."""
        return bool(self._max_in_flight) and not cmd.flag & RESPONSE_FLAG and not self._take_slot_now()

    def _time_partial_frame(self) -> None:
        """Start the slow-frame clock when a chunk left part of a frame (keep it if it runs), stop it otherwise."""
        self._frame_since = (self._frame_since or self._last_read) if self._decoder.buffered else None

    def _take_requests(self, data: bytes) -> None:
        """A server connection's chunk, straight from the transport while the reader task waits for one: its
        requests are served at once, each handler run up to its first wait (``eager.start``), two loop turns
        sooner than through the reader task and a task per request. What must wait (no slot free, or the peer's
        answers over the write buffer's mark) is left to the reader task, in order."""
        self._mark_read()
        frames = self._decoder.feed(data)
        try:
            if self._writer.transport.get_write_buffer_size() > self._channel.write_buffer_high_water_mark:
                self._backlog = frames
            else:
                for cmd in frames:
                    if self._no_slot_for(cmd):
                        self._backlog = itertools.chain((cmd,), frames)
                        break
                    self._dispatch(cmd)
        except FrameError as e:
            self._bad_frame(e)
            self.close(e, abort=True)
            return
        if self._backlog is not None:
            self._intake.interrupt()
        else:
            self._time_partial_frame()

    def _feed(self, data: bytes) -> None:
        """A client connection's chunk decoded and its frames dispatched (no slots, no write-buffer bound)."""
        self._mark_read()
        for cmd in self._decoder.feed(data):
            self._dispatch(cmd)

    def _take(self, data: bytes) -> None:
        """A client connection's chunk, straight from the transport while the reader task waits for one:
        a response completes its request's future one loop turn sooner than through the task."""
        try:
            self._feed(data)
        except FrameError as e:
            self._bad_frame(e)
            self.close(e)

    def _bad_frame(self, e: FrameError) -> None:
        client_faults.warning(self.peer_host, "bad frame", "closing %s connection from %s: bad frame: %s",
                              self._role, self.peer, e)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self._pending.pop(cmd.opaque, None)
            answered = self._answered_by.pop(cmd.opaque, None) if self._answered_by else None
            if fut is None or fut.done():
                log.debug("%s: response with no waiting request (late?): %s", self.peer, cmd.describe())
            elif answered is None:
                fut.set_result(cmd)
            else:
                try:
                    fut.set_result(answered(cmd))
                except Exception as e:  # the caller's to handle, as a response it had judged itself
                    fut.set_exception(e)
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %s extFields=%s body=%dB", self.peer, cmd.describe(), cmd.ext_fields, len(cmd.body))
        if self._channel is None:  # a client's: handlers of the server's requests run as tasks
            task: asyncio.Task | None = asyncio.get_running_loop().create_task(self._serve(cmd))
        else:
            try:
                task = eager.start(self._serve(cmd))
            except Exception:  # ``_serve`` answers a handler's failure: this is a bug of ours, not the peer's
                log.exception("%s: serving %s failed", self.peer, cmd.describe())
                return
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, cmd: RemotingCommand, resumed: Handler | None = None) -> None:
        """Answer ``cmd`` with its handler's response; ``resumed``: the handler of a detached request's rest
        (``end_detached``), run once a slot is taken back."""
        try:
            if resumed is None:
                refusal = None if self._gate is None else self._gate(cmd, self)
                handler = self._handlers.get(cmd.code)
            else:
                await self.end_hold()
                refusal, handler = None, resumed
            if refusal is not None:
                response: RemotingCommand | None = refusal
            elif handler is None:
                # RocketMQ's NettyRemotingAbstract remark, word for word
                response = cmd.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
                log.debug("%s: %s not supported", self.peer, cmd.describe())
            else:
                try:
                    response = await handler(cmd, self)
                except asyncio.CancelledError:
                    raise
                except CLIENT_ERRORS as e:
                    client_faults.warning(self.peer_host, f"bad request {cmd.code}", "%s: bad %s: %s", self.peer,
                                          cmd.describe(), e)
                    response = cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
                except Exception as e:
                    client_faults.log(logging.ERROR, self.peer_host, f"request {cmd.code} failed",
                                      "%s: handler for %s failed", self.peer, cmd.describe(), exc_info=True)
                    response = cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
            if cmd.is_oneway or response is None or self.closed:
                return
            self.respond(cmd, response)
            response = None  # while the slot waits for the drain, only the encoded frame is held
            if self._writer.transport.get_write_buffer_size():  # the socket took it all: nothing to wait for
                await self.drain()
        finally:
            if self._max_in_flight:
                if self._slot_waiters:
                    self._release_slot()
                else:
                    self._in_flight -= 1
