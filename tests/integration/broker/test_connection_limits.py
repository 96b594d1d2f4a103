"""What one connection may cost a broker or NameServer: a client that never reads its answers, one
that says nothing, one that trickles bytes, one parked inside a huge frame (issue 18, findings 4
and 5). Real server processes; the misbehaving clients are raw sockets."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
import time
from pathlib import Path

import pytest
from servers import NAMESRV_READY, ServerProcess, unique, until_held, wait_until

from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message, MessageBatch
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand

from ._support import closed_by_peer, host_port, pull_header, send_header

MiB = 1024 * 1024
BODY = 32 * 1024  # 32 messages of 32 KiB: every pull answer is 1 MiB
PIPELINED_PULLS = 300  # 300 MiB of answers (and their copies) if the broker computed them all
GROWTH_BOUND = 200 * MiB  # what the broker may grow by while a client ignores its answers
RETURNED_BOUND = 32 * MiB  # what it may keep of that once the client has gone
IDLE_CONF = "serverChannelMaxIdleTimeSeconds=2\nserverPartialFrameTimeoutSeconds=2\n"


def rss_anon(pid: int) -> int:
    """The process's anonymous resident memory in bytes (the store's mapped files left out)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon in /proc/{pid}/status")


def fill_queue(api: SyncMQClientAPI, addr: str, prefix: str) -> str:
    """A new topic of one queue holding 32 messages of ``BODY`` bytes: a pull from 0 answers 1 MiB."""
    topic = unique(prefix)
    api.create_topic(addr, topic, 1, 1)
    api.send_batch(addr, MessageBatch.from_messages([Message(topic, bytes([i]) * BODY) for i in range(32)], 0),
                   "itest_producer")
    return topic


def greedy_connection(addr: str, topic: str, pulls: int) -> socket.socket:
    """A connection with a tiny receive buffer that sends ``pulls`` pulls of 1 MiB and reads nothing."""
    sock = socket.create_connection(host_port(addr))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    frames = b"".join(encode(RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                     pull_header("g", topic, 0, 0).to_ext_fields()))
                      for _ in range(pulls))
    pipeline(sock, frames, limit_s=5.0)
    return sock


def pipeline(sock: socket.socket, frames: bytes, limit_s: float) -> None:
    """Send as much of ``frames`` as the server takes within ``limit_s`` (a server that stops
    reading fills the socket buffers, and then sends block)."""
    sock.setblocking(False)
    sent, deadline = 0, time.monotonic() + limit_s
    while sent < len(frames) and time.monotonic() < deadline:
        try:
            sent += sock.send(frames[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)


def test_a_client_that_never_reads_costs_bounded_memory(own_broker):
    broker = own_broker("unread")
    with SyncMQClientAPI(timeout=10) as api:
        topic = fill_queue(api, broker.addr, "Unread")
        assert api.pull_message(broker.addr, pull_header("g", topic, 0, 0)).status == PullStatus.FOUND
        baseline = peak = rss_anon(broker.server.pid)
        with greedy_connection(broker.addr, topic, PIPELINED_PULLS):
            # meanwhile a client on another connection is answered, again and again
            for _ in range(20):
                peak = max(peak, rss_anon(broker.server.pid))
                r = api.pull_message(broker.addr, pull_header("g", topic, 0, 31, max_nums=1))
                assert r.status == PullStatus.FOUND and r.messages()[0].body == bytes([31]) * BODY
                time.sleep(0.1)
            peak = max(peak, rss_anon(broker.server.pid))
            assert peak - baseline < GROWTH_BOUND, (
                f"the broker grew by {(peak - baseline) / MiB:.0f} MiB for one connection that does not read")
        # once it is gone its memory is given back
        wait_until(lambda: rss_anon(broker.server.pid) - baseline < RETURNED_BOUND, timeout=15,
                   what="the broker's memory to come back after the greedy client left")
        assert api.pull_message(broker.addr, pull_header("g", topic, 0, 0)).status == PullStatus.FOUND


class Answered:
    """A raw connection that sends a request every so often and reads its answer: the well-behaved peer."""

    def __init__(self, addr: str, code: int, fields: dict[str, object]) -> None:
        self.sock = socket.create_connection(host_port(addr), timeout=5)
        self.request = (code, fields)
        self._decoder = FrameDecoder()

    def ask(self) -> None:
        self.sock.sendall(encode(RemotingCommand.request(*self.request)))
        while True:
            data = self.sock.recv(65536)
            assert data, "the server closed a connection that sends requests"
            if any(cmd.is_response for cmd in self._decoder.feed(data)):
                return


@pytest.fixture(params=["broker", "namesrv"])
def idle_server(request, tmp_path, own_broker) -> tuple[str, int, dict[str, object]]:
    """A server closing idle connections and stalled frames after 2 s: its address and a request it answers."""
    if request.param == "broker":
        yield own_broker("idle", IDLE_CONF).addr, RequestCode.GET_BROKER_RUNTIME_INFO, {}
    else:
        conf = tmp_path / "namesrv.conf"
        conf.write_text(IDLE_CONF)
        ns = ServerProcess(["namesrv", "-c", str(conf), "--port", "0"], tmp_path / "namesrv.log", NAMESRV_READY,
                           verbose=False)
        yield ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AnyTopic"}
        ns.stop_cleanly()


def test_idle_and_stalled_connections_are_closed(idle_server):
    addr, code, fields = idle_server
    alive = Answered(addr, code, fields)
    trickled = encode(RemotingCommand.request(code, fields))  # one byte at a time: never idle, never a whole frame
    silent = socket.create_connection(host_port(addr))
    trickle = socket.create_connection(host_port(addr))
    parked = socket.create_connection(host_port(addr))
    parked.sendall(struct.pack(">i", 15 * MiB) + bytes(64 * 1024))  # 15 MiB announced, 64 KiB sent, then nothing
    bad = {"silent": silent, "trickle": trickle, "parked": parked}
    closed: set[str] = set()
    sent = 0

    def all_closed() -> bool:
        nonlocal sent
        alive.ask()
        if "trickle" not in closed:
            with contextlib.suppress(OSError):
                trickle.send(trickled[sent:sent + 1])
                sent += 1
        closed.update(name for name, sock in bad.items() if name not in closed and closed_by_peer(sock, timeout=0.05))
        return len(closed) == len(bad)

    try:
        wait_until(all_closed, timeout=20, interval=0.5, what="the server to close the idle and stalled connections")
        assert sent < len(trickled)  # the trickle never completed its frame
        alive.ask()  # opened before the silent one, which was closed as idle: asking kept it open
    finally:
        for sock in (alive.sock, *bad.values()):
            sock.close()


def test_held_pulls_never_block_their_connection(own_broker):
    """Two requests in flight at most, yet a consumer holds a pull on each of 8 queues and its sends
    on the same connection get through and wake them; past 8 held pulls, a pull is answered at once."""
    broker = own_broker("held", "serverChannelMaxInFlightRequests=2\nserverChannelMaxHeldRequests=8\n")
    topic = unique("Held")

    async def main():
        async with MQClientAPI(timeout=20.0) as api:
            await api.create_topic(broker.addr, topic, 8, 8)
            held = [asyncio.ensure_future(api.pull_message(broker.addr, pull_header("g", topic, q, 0,
                                                                                       suspend_ms=15_000)))
                    for q in range(8)]
            await until_held(api, broker.addr, 8)  # asked on the same connection too
            # a ninth is over the limit of held pulls: answered now, with nothing
            over = await api.pull_message(broker.addr, pull_header("g", topic, 0, 0, suspend_ms=15_000))
            assert over.status == PullStatus.NO_NEW_MSG
            assert not any(h.done() for h in held)  # so it was never held: they were first, with the same timeout
            for q in range(8):  # the same connection as the held pulls
                await api.send_message(broker.addr, send_header(topic, q), f"m{q}".encode())
            answers = await asyncio.wait_for(asyncio.gather(*held), 10)
            assert [[m.body for m in a.messages()] for a in answers] == [[f"m{q}".encode()] for q in range(8)]

    asyncio.run(main())


def test_a_broker_stops_cleanly_while_a_client_ignores_its_answers(own_broker):
    broker = own_broker("stop")
    with SyncMQClientAPI(timeout=10) as api:
        topic = fill_queue(api, broker.addr, "Ignored")
    # its answers fill the socket buffers on both sides and wait: stuck, but connected
    with greedy_connection(broker.addr, topic, 100) as greedy:
        wait_until(lambda: select.select([greedy], [], [], 0)[0], what="the first answers")  # more wait behind
        broker.stop()  # SIGTERM: exit 0 within the stop timeout, no abort file


@pytest.fixture(params=["broker", "namesrv"])
def capped_server(request, tmp_path, own_broker) -> tuple[ServerProcess, str, int, dict[str, object]]:
    """A server accepting at most 3 connections: its process, address and a request it answers."""
    conf = "serverMaxConnections=3\n"
    if request.param == "broker":
        broker = own_broker("capped", conf)
        yield broker.server, broker.addr, RequestCode.GET_BROKER_RUNTIME_INFO, {}
    else:
        path = tmp_path / "namesrv.conf"
        path.write_text(conf)
        ns = ServerProcess(["namesrv", "-c", str(path), "--port", "0"], tmp_path / "namesrv.log", NAMESRV_READY,
                           verbose=False)
        yield ns, ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AnyTopic"}
        ns.stop_cleanly()


def test_connections_past_server_max_connections_are_refused(capped_server):
    server, addr, code, fields = capped_server
    open_ones = [Answered(addr, code, fields) for _ in range(3)]
    try:
        for conn in open_ones:
            conn.ask()
        extra = socket.create_connection(host_port(addr))
        assert closed_by_peer(extra), "a connection past serverMaxConnections=3 is closed at once"
        wait_until(lambda: "serverMaxConnections=3" in server.log(), 10, "the refusal's log line")
        for conn in open_ones:
            conn.ask()  # the open ones are served on
        open_ones.pop().sock.close()
        # once one has gone, a new connection is served again
        wait_until(lambda: _served(addr, code, fields), 10, "a new connection served after one closed")
    finally:
        for conn in open_ones:
            conn.sock.close()


def _served(addr: str, code: int, fields: dict[str, object]) -> bool:
    conn = Answered(addr, code, fields)
    try:
        conn.ask()
        return True
    except (AssertionError, OSError):
        return False
    finally:
        conn.sock.close()
