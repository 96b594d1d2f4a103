"""Shared pieces of the broker integration tests: builders for the request headers the tests send, topics created
as a user creates them (the ``spark-mq namesrv`` / ``spark-mq broker`` subprocesses come from ``tests/servers.py``)."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from servers import Broker

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.common.properties import encode_properties
from spark_mq.remoting.codec import decode_frame, encode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader, build_pull_sys_flag


def create_routed_topic(broker: Broker, topic: str, queues: int) -> None:
    """Create ``topic`` on ``broker`` as ``spark-mq admin topic create`` does: waiting until the NameServer routes
    it. The broker registers it in the background, and a client asking sooner finds no route: a producer borrows
    TBW102's 4-queue route (an ordered send to queue 2 of a 2-queue topic is refused: "request queueId[2] is
    illegal"), a consumer's SQL92 subscribe is checked by no broker."""
    with SyncAdmin(ClientConfig(broker.namesrv)) as admin:
        admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=queues, write_queue_nums=queues)


def mapped(pid: int) -> str:
    """The files a process has mapped (its loaded shared libraries among them)."""
    return Path(f"/proc/{pid}/maps").read_text()


# --- request builders -----------------------------------------------------------------------


def send_header(topic: str, queue_id: int = -1, *, tags: str | None = None, keys: str | None = None,
                uniq_key: str | None = None, props: dict[str, str] | None = None,
                group: str = "itest_producer") -> SendMessageRequestHeader:
    """A SEND_MESSAGE header as a RocketMQ producer builds it (default topic TBW102, 4 queues)."""
    p = dict(props or {})
    if tags is not None:
        p["TAGS"] = tags
    if keys is not None:
        p["KEYS"] = keys
    if uniq_key is not None:
        p["UNIQ_KEY"] = uniq_key
    p.setdefault("WAIT", "true")
    return SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0, properties=encode_properties(p).decode())


def pull_header(group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
                suspend_ms: int = 0, subscription: str | None = None,
                commit_offset: int | None = None) -> PullMessageRequestHeader:
    """A PULL_MESSAGE header; ``suspend_ms`` > 0 sets the suspend flag (long polling)."""
    return PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=build_pull_sys_flag(commit_offset=commit_offset is not None, suspend=suspend_ms > 0,
                                     subscription=subscription is not None),
        commit_offset=commit_offset if commit_offset is not None else 0, suspend_timeout_millis=suspend_ms,
        sub_version=0, subscription=subscription)


# --- raw sockets ----------------------------------------------------------------------------


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    """True once the server closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class RawConnection:
    """One plain socket speaking remoting frames, as a foreign client would: ``request`` waits for
    its response and keeps every request the broker sends meanwhile (``received``)."""

    def __init__(self, addr: str) -> None:
        self.sock = socket.create_connection(host_port(addr), timeout=5)
        self.received: list[RemotingCommand] = []

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _read_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def _read(self, timeout: float) -> RemotingCommand:
        self.sock.settimeout(timeout)
        length = struct.unpack(">i", self._read_exactly(4))[0]
        return decode_frame(self._read_exactly(length))

    def request(self, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        self.sock.sendall(encode(cmd))
        deadline = time.monotonic() + timeout
        while True:
            got = self._read(max(0.01, deadline - time.monotonic()))
            if got.is_response and got.opaque == cmd.opaque:
                return got
            if not got.is_response:
                self.received.append(got)

    def wait_request(self, code: int, timeout: float) -> RemotingCommand | None:
        """The first request with ``code`` the broker sent (already or within ``timeout``), else None."""
        deadline = time.monotonic() + timeout
        while not any(c.code == code for c in self.received):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                got = self._read(left)
            except TimeoutError:
                return None
            if not got.is_response:
                self.received.append(got)
        return next(c for c in self.received if c.code == code)
