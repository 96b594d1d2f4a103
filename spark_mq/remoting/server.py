"""An asyncio RocketMQ remoting server: accepts connections and serves registered request codes.

A client's mistake never takes the server down: an unknown code is answered
REQUEST_CODE_NOT_SUPPORTED, a failing handler SYSTEM_ERROR with the exception text, and a
malformed or oversized frame closes only the connection it came on (one log line names the
peer and the reason).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from spark_mq.remoting.codec import DEFAULT_MAX_FRAME
from spark_mq.remoting.connection import Connection, Handler

log = logging.getLogger(__name__)

ConnectCallback = Callable[[Connection], None]


class RemotingServer:
    """Listens on ``host:port`` (port 0 picks a free one); all methods run on one event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, max_frame: int = DEFAULT_MAX_FRAME,
                 name: str = "remoting") -> None:
        self.host = host
        self.port = port
        self.max_frame = max_frame
        self.name = name
        self._handlers: dict[int, Handler] = {}
        self._connections: set[Connection] = set()
        self._connect_callbacks: list[ConnectCallback] = []
        self._server: asyncio.Server | None = None

    def register(self, code: int, handler: Handler) -> None:
        """Serve request ``code`` with ``async handler(cmd, conn) -> response | None``."""
        self._handlers[int(code)] = handler

    def on_connect(self, callback: ConnectCallback) -> None:
        """Call ``callback(conn)`` for every accepted connection (e.g. to hook ``conn.on_close``)."""
        self._connect_callbacks.append(callback)

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    async def start(self, serve: bool = True) -> int:
        """Bind and (with ``serve``) listen; returns the bound port.

        ``serve=False`` only reserves the port: connection attempts are refused (clients retry)
        until ``start_serving``, so that a process whose handlers are not registered yet never
        answers a request REQUEST_CODE_NOT_SUPPORTED.
        """
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True,
                                                  start_serving=serve)
        self.port = self._server.sockets[0].getsockname()[1]
        if serve:
            log.info("%s server listening on %s:%d", self.name, self.host, self.port)
        return self.port

    async def start_serving(self) -> None:
        """Start accepting connections on the port ``start(serve=False)`` bound."""
        if self._server is None:
            raise RuntimeError(f"{self.name} server is not started: await start() first")
        await self._server.start_serving()
        log.info("%s server listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        """Stop listening, close every connection (failing their pending requests), wait for them."""
        if self._server is not None:
            self._server.close()
        conns = list(self._connections)
        await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("%s server on %s:%d stopped", self.name, self.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer, self._handlers, self.max_frame, role=self.name)
        self._connections.add(conn)
        conn.on_close(self._connections.discard)
        log.debug("%s: connection from %s", self.name, conn.peer)
        for cb in self._connect_callbacks:
            try:
                cb(conn)
            except Exception:
                log.exception("%s: connect callback failed for %s", self.name, conn.peer)
