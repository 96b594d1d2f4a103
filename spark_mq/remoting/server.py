"""An asyncio RocketMQ remoting server: accepts connections and serves registered request codes.

A client's mistake never takes the server down: an unknown code is answered
REQUEST_CODE_NOT_SUPPORTED, a failing handler SYSTEM_ERROR with the exception text, and a
malformed or oversized frame closes only the connection it came on (one log line names the
peer and the reason, rate-limited per peer).

What one connection may cost is bounded by the ``ServerChannelConfig`` its connections get
(see ``connection.py``), and so is their number (``serverMaxConnections``: one more is closed at
once, with a rate-limited log line); a watch task closes idle connections and partial frames past their
deadline every second, and reports the log lines the rate limit held back.

TLS (``ssl_context`` and ``tls_mode``, RocketMQ's ``tls.server.mode``): ``enforcing`` serves TLS clients
only: a plaintext client's first request is answered SYSTEM_ERROR saying so, then its connection is
closed (one rate-limited log line); ``permissive`` serves both on the port (``common/tls.py`` tells them
apart by their first byte). A connection counts against ``serverMaxConnections`` from its accept, its
handshake included; a failed handshake closes it with a rate-limited log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable

from spark_mq.common.config import ServerChannelConfig
from spark_mq.common.errors import FrameError
from spark_mq.common.port_in_use import naming_the_port
from spark_mq.common.tls import HANDSHAKE_TIMEOUT_S, accept_tls
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.connection import READ_CHUNK, Connection, Gate, Handler, client_faults
from spark_mq.remoting.loop import stop_tasks

log = logging.getLogger(__name__)

ConnectCallback = Callable[[Connection], None]
DEFAULT_CHANNEL = ServerChannelConfig()
WATCH_INTERVAL_S = 1.0  # how often idle connections and stalled frames are looked for
TLS_ONLY = ("this server accepts TLS connections only (tls.server.mode=enforcing): connect over TLS (spark-mq "
            "--tls --tls-ca CA.pem, ClientConfig(tls_enable=True, ...), option tls=true of the Spark source and sink, "
            "tls.enable=true for a server process)")


class RemotingServer:
    """Listens on ``host:port`` (port 0 picks a free one); all methods run on one event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, channel: ServerChannelConfig = DEFAULT_CHANNEL,
                 name: str = "remoting", port_key: str = "listenPort", gate: Gate | None = None,
                 ssl_context: ssl.SSLContext | None = None, tls_mode: str = "disabled") -> None:
        """``port_key``: the config key that set ``port``, named when the port is already in use. ``gate``
        checks every request before its handler is looked up (the ACL): None serves it, else its answer.
        ``ssl_context`` (``common.tls.server_context``) with ``tls_mode`` permissive or enforcing: TLS."""
        self.host = host
        self.ssl_context = ssl_context if tls_mode != "disabled" else None
        self.tls_only = tls_mode == "enforcing"
        self._negotiating = 0  # accepted connections still in their TLS negotiation
        self.port = port
        self.port_key = port_key
        self.channel = channel
        self.name = name
        self.gate = gate
        self._handlers: dict[int, Handler] = {}
        self._connections: set[Connection] = set()
        self._connect_callbacks: list[ConnectCallback] = []
        self._server: asyncio.Server | None = None
        self._watch_task: asyncio.Task | None = None

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
        with naming_the_port(self.port_key, self.host, self.port):
            self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True,
                                                      start_serving=serve)
        self.port = self._server.sockets[0].getsockname()[1]
        self._watch_task = asyncio.get_running_loop().create_task(self._watch(), name=f"{self.name}-watch")
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
        if self._watch_task is not None:
            await stop_tasks([self._watch_task])
            self._watch_task = None
        conns = list(self._connections)
        await asyncio.gather(*(c.wait_closed() for c in conns), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("%s server on %s:%d stopped", self.name, self.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limit = self.channel.server_max_connections
        peer = writer.get_extra_info("peername") or ("?", 0)
        if len(self._connections) + self._negotiating >= limit:
            client_faults.log(logging.WARNING, str(peer[0]), "connections", "%s: refusing a connection from %s:%s: "
                              "%d connections open (serverMaxConnections=%d)", self.name, peer[0], peer[1],
                              len(self._connections) + self._negotiating, limit)
            writer.close()
            return
        if self.ssl_context is not None:
            self._negotiating += 1
            try:
                is_tls = await accept_tls(writer, self.ssl_context)
                if self.tls_only and not is_tls:
                    await self._refuse_plaintext(reader, writer, peer)
                    return
            except (OSError, asyncio.TimeoutError) as e:  # ssl.SSLError is an OSError
                client_faults.log(logging.WARNING, str(peer[0]), "tls", "%s: TLS handshake with %s:%s failed: %s",
                                  self.name, peer[0], peer[1], getattr(e, "reason", None) or str(e) or type(e).__name__)
                writer.close()
                return
            finally:
                self._negotiating -= 1
        conn = Connection(reader, writer, self._handlers, self.channel.max_frame_size, role=self.name,
                          channel=self.channel, gate=self.gate)
        self._connections.add(conn)
        conn.on_close(self._connections.discard)
        log.debug("%s: connection from %s", self.name, conn.peer)
        for cb in self._connect_callbacks:
            try:
                cb(conn)
            except Exception:
                log.exception("%s: connect callback failed for %s", self.name, conn.peer)

    async def _refuse_plaintext(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                peer: tuple) -> None:
        """Enforcing mode, a plaintext client: answer its first request with why, then close."""
        client_faults.log(logging.WARNING, str(peer[0]), "plaintext", "%s: refusing a plaintext connection from "
                          "%s:%s: tls.server.mode=enforcing accepts TLS only", self.name, peer[0], peer[1])
        decoder = FrameDecoder(self.channel.max_frame_size)

        async def first_request() -> None:
            while chunk := await reader.read(READ_CHUNK):
                for cmd in decoder.feed(chunk):
                    if not cmd.is_response and not cmd.is_oneway:
                        writer.write(encode(cmd.make_response(ResponseCode.SYSTEM_ERROR, TLS_ONLY)))
                        await writer.drain()
                    return

        with contextlib.suppress(OSError, FrameError, asyncio.TimeoutError):
            await asyncio.wait_for(first_request(), HANDSHAKE_TIMEOUT_S)
        writer.close()

    async def _watch(self) -> None:
        """Every second: close the connections idle or stuck in a frame past their limits, and report
        the client-caused log lines held back in windows that ended."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                now = time.monotonic()
                for conn in list(self._connections):
                    conn.expire(now)
                client_faults.flush()
            except Exception:  # a bug in one round must not stop the next
                log.exception("%s: connection watch failed", self.name)
