"""asyncio RocketMQ remoting client: one lazily opened connection per ``host:port``.

A lost connection fails every request pending on it (``RemotingConnectError`` chained to the
cause) and is dropped; the next call to that address dials again. Given an account's
:class:`~spark_mq.remoting.signature.Credentials`, every request sent is signed with them
(RocketMQ's ``AclClientRPCHook``), just before it is encoded. Requests the server sends
us (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE...) go to handlers registered as on
the server.

With an ``ssl_context`` (``common.tls.client_context``) every connection is TLS, the server's
certificate checked against the host name dialled; a refused handshake is a ``RemotingConnectError``
saying why (``certificate has expired``, a host name mismatch, an unknown CA, a server without TLS).

``SyncRemotingClient`` runs the same client on a private event-loop thread (a
:class:`~spark_mq.remoting.blocking.BlockingFacade`), for code that is not async (CLI, tests, Spark drivers).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from typing import Any

from spark_mq.common.errors import RemotingConnectError, RemotingTimeoutError
from spark_mq.common.tls import CLIENT_CERT_REFUSED, handshake_failure
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.codec import DEFAULT_MAX_FRAME
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Answered, Connection, Handler
from spark_mq.remoting.signature import Credentials


def _abandon(connecting: asyncio.Future) -> None:
    """A connect no one waits for any more: cancelled, or its connection closed if it was made."""
    if not connecting.done():
        connecting.cancel()
    elif not connecting.cancelled() and connecting.exception() is None:
        connecting.result()[1].close()


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port), with a message that says what was expected."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r}: expected host:port")
    return host, int(port)


@dataclass
class _Dialing:
    """The lock serialising dials to one address, and how many callers hold or await it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class RemotingClient:
    """Connections keyed by address; all coroutines run on one event loop and may interleave."""

    def __init__(self, connect_timeout: float = 3.0, max_frame: int = DEFAULT_MAX_FRAME, *,
                 ssl_context: ssl.SSLContext | None = None, credentials: Credentials | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.ssl_context = ssl_context  # dial over TLS
        self.credentials = credentials  # signs every request of every connection (None: unsigned)
        self._handlers: dict[int, Handler] = {}
        self._conns: dict[str, Connection] = {}
        self._dialing: dict[str, _Dialing] = {}  # only while a dial to the address is under way or awaited
        self._closed = False

    def register(self, code: int, handler: Handler) -> None:
        """Serve server-initiated request ``code`` with ``async handler(cmd, conn)``."""
        self._handlers[int(code)] = handler

    async def connection(self, addr: str, timeout: float | None = None) -> Connection:
        """The live connection to ``addr``, dialled if there is none."""
        if self._closed:
            raise RemotingConnectError("client is closed")
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        dialing = self._dialing.get(addr)
        if dialing is None:
            dialing = self._dialing[addr] = _Dialing()
        dialing.users += 1
        try:
            async with dialing.lock:  # one dial per address at a time; the others wait and reuse it
                conn = self._conns.get(addr)
                if conn is not None and not conn.closed:
                    return conn
                return await self._dial(addr, timeout)
        finally:
            dialing.users -= 1
            if not dialing.users:  # connected or failed, and no one else waiting: forget the lock
                del self._dialing[addr]

    async def _dial(self, addr: str, timeout: float | None) -> Connection:
        host, port = split_addr(addr)
        limit = self.connect_timeout if timeout is None else min(timeout, self.connect_timeout)
        # not ``asyncio.wait_for``: before Python 3.12, a cancellation that races a refused connect is
        # swallowed (the refusal is raised instead), and a task stopped meanwhile (a broker's parts at a
        # role change) runs on
        tls = self.ssl_context
        connecting = asyncio.ensure_future(asyncio.open_connection(
            host, port, ssl=tls, server_hostname=host if tls is not None and tls.check_hostname else None,
            ssl_handshake_timeout=limit if tls is not None else None))
        try:
            done, _ = await asyncio.wait({connecting}, timeout=limit)
        except asyncio.CancelledError:
            _abandon(connecting)
            raise
        if not done:
            _abandon(connecting)
            raise RemotingConnectError(f"cannot connect to {addr}: no answer within {limit:g}s")
        try:
            reader, writer = connecting.result()
        except (ssl.SSLError, ConnectionError) as e:
            if tls is None or isinstance(e, ConnectionRefusedError):
                raise RemotingConnectError(f"cannot connect to {addr}: {e.strerror or e}") from e
            raise RemotingConnectError(f"cannot connect to {addr}: {handshake_failure(e)}") from e
        except OSError as e:
            raise RemotingConnectError(f"cannot connect to {addr}: {e.strerror or e}") from e
        if writer.is_closing():  # closed as soon as the handshake ended: see ``common.tls.CLIENT_CERT_REFUSED``
            raise RemotingConnectError(f"cannot connect to {addr}: closed at once: {CLIENT_CERT_REFUSED}")
        conn = Connection(reader, writer, self._handlers, self.max_frame, role="client", credentials=self.credentials)
        conn.on_close(lambda c, a=addr: self._conns.pop(a, None) if self._conns.get(a) is c else None)
        self._conns[addr] = conn
        return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0,
                     answered: Answered | None = None) -> Any:
        """Send ``cmd`` to ``addr`` and return its response (with ``answered``: what ``answered(response)``
        returns, run as the response is read, see ``Connection.request``); raises RemotingTimeoutError/ConnectError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        conn = await self.connection(addr, timeout)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RemotingTimeoutError(f"connecting to {addr} used up the {timeout:g}s timeout")
        return await conn.request(cmd, remaining, answered)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """Send ``cmd`` flagged oneway; returns once it is handed to the socket."""
        conn = await self.connection(addr, timeout)
        conn.send_oneway(cmd)
        await conn.drain()

    async def close(self) -> None:
        """Close every connection, failing what is pending on them."""
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)


class SyncRemotingClient(BlockingFacade[RemotingClient]):
    """A ``RemotingClient`` on its own event-loop thread; methods block the caller.

    Thread-safe: any thread may call ``invoke`` concurrently. Handlers registered here run on
    the private loop's thread and must not call back into this object (that raises).
    """

    _unwrapped = ("connection",)  # a Connection belongs to the private loop: of no use to a caller

    def __init__(self, connect_timeout: float = 3.0, max_frame: int = DEFAULT_MAX_FRAME, *,
                 ssl_context: ssl.SSLContext | None = None, credentials: Credentials | None = None) -> None:
        super().__init__(lambda: RemotingClient(connect_timeout, max_frame, ssl_context=ssl_context,
                                                credentials=credentials), "spark-mq-remoting")

    @property
    def client(self) -> RemotingClient:
        return self._target

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def register(self, code: int, handler: Handler) -> None:
        """Blocking :meth:`RemotingClient.register`."""
        return self._call(self._target.register, code=code, handler=handler)

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0, answered: Answered | None = None) -> Any:
        """Blocking :meth:`RemotingClient.invoke`."""
        return self._run(self._target.invoke(addr=addr, cmd=cmd, timeout=timeout, answered=answered))

    def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> None:
        """Blocking :meth:`RemotingClient.invoke_oneway`."""
        return self._run(self._target.invoke_oneway(addr=addr, cmd=cmd, timeout=timeout))

    def close(self) -> None:
        """Blocking :meth:`RemotingClient.close`."""
        self._close_with(self._target.close)
    # -- end of generated blocking twins --
