"""PULL_MESSAGE over blocking sockets, for :func:`~spark_mq.arrow.range_reader.read_range`: each answer read
with ``recv_into`` straight into one buffer, its body handed to the decoder as a view of that buffer.

Why not ``SyncMQClientAPI``: it runs the async client on a loop thread of its own, started per read; each
multi-MB answer arrived there in 256 KiB chunks, was joined into one body (a second copy of every byte) and
handed to the reading thread through a future (a wake-up of each thread per pull). A range read asks one
broker at a time and waits for every answer: a blocking socket does the same with no thread, no hand-over
and one copy out of the kernel.

Not thread-safe: one channel per read. A result's body is a view of the channel's buffer, valid until the
channel's next pull (the decoder copies what it keeps: no column of its batches refers to the body).
"""

from __future__ import annotations

import socket
import ssl

from spark_mq.client.config import ClientConfig
from spark_mq.client.requester import Requester
from spark_mq.client.results import PULL_STATUS_BY_CODE, PullResult, pull_result_of
from spark_mq.common.errors import FrameError, RemotingConnectError, RemotingTimeoutError
from spark_mq.common.tls import CLIENT_CERT_REFUSED, handshake_failure
from spark_mq.remoting.client import split_addr
from spark_mq.remoting.codec import DEFAULT_MAX_FRAME, decode_frame_view, encode
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import PullMessageRequestHeader

CONNECT_TIMEOUT_S = 3.0  # as SyncMQClientAPI's default
_FIRST_BUFFER = 4 * 1024 * 1024  # one default pull (8,192 x 100 B units: 2.25 MB) fits without growing


class PullChannel:
    """Blocking PULL_MESSAGEs, one socket per broker address, dialled and signed as ``config`` says (its TLS
    files, its account; plaintext and unsigned for None). ``with PullChannel(config, timeout) as channel:``."""

    def __init__(self, config: ClientConfig | None, timeout: float, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.timeout = timeout
        self.max_frame = max_frame
        self._tls = config.ssl_context() if config is not None else None
        self._credentials = config.credentials if config is not None else None
        self._socks: dict[str, socket.socket] = {}
        self._answered: set[str] = set()  # addresses whose broker answered over TLS: a close is no refusal
        self._buf = bytearray(_FIRST_BUFFER)

    def __enter__(self) -> PullChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for addr in list(self._socks):
            self._drop(addr)

    def pull_message(self, addr: str, header: PullMessageRequestHeader) -> PullResult:
        """PULL_MESSAGE at ``addr``, as ``MQClientAPI.pull_message`` (the same errors: ``RemotingConnectError``,
        ``RemotingTimeoutError``, ``MQClientError`` for a refusal); a FOUND body is a view valid until the next
        pull."""
        cmd = RemotingCommand(code=int(RequestCode.PULL_MESSAGE), ext_fields=header.to_ext_fields())
        if self._credentials is not None:
            self._credentials.sign(cmd.ext_fields, cmd.body)
        timeout = self.timeout + (header.suspend_timeout_millis / 1000 if header.has_suspend else 0)
        sock = self._socket(addr)
        try:
            sock.settimeout(timeout)
            sock.sendall(encode(cmd))
            response, body = self._response(sock, cmd.opaque)
        except TimeoutError:
            self._drop(addr)
            raise RemotingTimeoutError(f"no answer from {addr} to PULL_MESSAGE within {timeout:g}s") from None
        except OSError as e:
            self._drop(addr)
            raise RemotingConnectError(f"connection to {addr} lost: {self._why(e, addr)}") from e
        except FrameError:
            self._drop(addr)
            raise
        if response.code not in PULL_STATUS_BY_CODE:
            raise Requester.error(response, addr, RequestCode.PULL_MESSAGE, signed=self._credentials is not None)
        self._answered.add(addr)
        return pull_result_of(response, body)

    def _response(self, sock: socket.socket, opaque: int) -> tuple[RemotingCommand, memoryview]:
        """The response to request ``opaque`` (anything else the broker sends first is skipped): its header
        decoded, its body a view of the buffer."""
        while True:
            length = int.from_bytes(self._read(sock, 4), "big", signed=True)
            if length < 4 or length > self.max_frame:
                raise FrameError(f"frame length {length} outside [4, {self.max_frame}]: the stream is out of sync")
            if length > len(self._buf):  # a new buffer, not a resize: a view of the old one may still be held
                self._buf = bytearray(length)
            response, body = decode_frame_view(self._read(sock, length))  # a bad header length: FrameError
            if response.is_response and response.opaque == opaque:
                return response, body

    def _read(self, sock: socket.socket, n: int) -> memoryview:
        """The next ``n`` bytes of ``sock``, in the buffer."""
        view = memoryview(self._buf)[:n]
        got = 0
        while got < n:
            chunk = sock.recv_into(view[got:], n - got)
            if not chunk:
                raise ConnectionResetError("closed by the broker")
            got += chunk
        return view

    def _socket(self, addr: str) -> socket.socket:
        sock = self._socks.get(addr)
        if sock is None:
            sock = self._socks[addr] = self._dial(addr)
        return sock

    def _dial(self, addr: str) -> socket.socket:
        host, port = split_addr(addr)
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise RemotingConnectError(f"cannot connect to {addr}: no answer within {CONNECT_TIMEOUT_S:g}s") from None
        except OSError as e:
            raise RemotingConnectError(f"cannot connect to {addr}: {e.strerror or e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is None:
            return sock
        try:
            return self._tls.wrap_socket(sock, server_hostname=host if self._tls.check_hostname else None)
        except OSError as e:
            sock.close()
            why = handshake_failure(e) if isinstance(e, ssl.SSLError) else e.strerror or e
            raise RemotingConnectError(f"cannot connect to {addr}: {why}") from e

    def _why(self, e: OSError, addr: str) -> str:
        """``e`` in words; over TLS, before the broker answered anything, with why a TLS server closes at once
        (TLS 1.3 checks the client's certificate after the client's side of the handshake is done)."""
        if self._tls is None:
            return str(e.strerror or e)
        why = handshake_failure(e) if isinstance(e, ssl.SSLError) else str(e.strerror or e)
        return why if addr in self._answered else f"{why}: {CLIENT_CERT_REFUSED}"

    def _drop(self, addr: str) -> None:
        sock = self._socks.pop(addr, None)
        if sock is not None:
            sock.close()
