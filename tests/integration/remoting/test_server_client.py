"""RemotingServer and RemotingClient over real loopback sockets."""

from __future__ import annotations

import asyncio
import time

import pytest

from spark_mq.common.config import ServerChannelConfig
from spark_mq.common.errors import RemotingConnectError, RemotingTimeoutError
from spark_mq.remoting.client import RemotingClient, SyncRemotingClient
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand, SerializeType
from spark_mq.remoting.server import RemotingServer

ECHO, SLOW, BOOM, ASK_BACK, NOTE, BUSY, GATE = 9001, 9002, 9003, 9004, 9005, 9006, 9007


class Gate:
    """A handler that holds each request until one with ``open`` comes in: a held request is answered
    only if the server serves requests side by side. ``held`` counts the requests that got to wait."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.held = 0

    async def __call__(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        if cmd.ext_fields.get("open"):
            self.opened.set()
        else:
            self.held += 1
            await self.opened.wait()
        return cmd.make_response(ResponseCode.SUCCESS, cmd.ext_fields["say"])

    async def until_held(self, count: int) -> None:
        while self.held < count:  # bounded by run()'s timeout
            await asyncio.sleep(0.01)


def run(coro, timeout: float = 20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def start_server(max_frame: int = 1 << 20, port: int = 0,
                       in_flight: int = 64) -> tuple[RemotingServer, str, list]:
    server = RemotingServer("127.0.0.1", port, ServerChannelConfig(max_frame_size=max_frame,
                                                                   server_channel_max_in_flight_requests=in_flight),
                            name="test")
    notes: list[RemotingCommand] = []

    async def echo(cmd, conn):
        return cmd.make_response(ResponseCode.SUCCESS, cmd.ext_fields.get("say"), cmd.ext_fields, cmd.body)

    async def slow(cmd, conn):
        await asyncio.sleep(float(cmd.ext_fields["delay"]))
        return cmd.make_response(ResponseCode.SUCCESS, cmd.ext_fields["delay"])

    async def boom(cmd, conn):
        raise ValueError("handler blew up on purpose")

    async def ask_back(cmd, conn):
        answer = await conn.request(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                            {"consumerGroup": "g"}), timeout=2)
        return cmd.make_response(ResponseCode.SUCCESS, f"client said {answer.remark}")

    async def note(cmd, conn):
        notes.append(cmd)
        return None

    for code, handler in [(ECHO, echo), (SLOW, slow), (BOOM, boom), (ASK_BACK, ask_back), (NOTE, note)]:
        server.register(code, handler)
    port = await server.start()
    return server, f"127.0.0.1:{port}", notes


def test_concurrent_requests_complete_out_of_order():
    async def main():
        server, addr, _ = await start_server()
        gate = Gate()
        server.register(GATE, gate)
        client = RemotingClient()
        try:
            done: list[str] = []

            async def call(fields: dict[str, str]):
                resp = await client.invoke(addr, RemotingCommand.request(GATE, fields), timeout=5)
                done.append(resp.remark)
                return resp.remark

            # the first request waits for the last: answered only if the others are served meanwhile
            results = await asyncio.gather(call({"say": "held"}), call({"say": "opener", "open": "1"}))
            assert results == ["held", "opener"]
            assert done == ["opener", "held"] and gate.held == 1  # the held request did not hold the other back
            assert len(server.connections) == 1  # all on one connection
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_requests_in_flight_on_a_connection_are_bounded():
    async def main():
        server, addr, _ = await start_server(in_flight=2)
        running = peak = 0

        async def busy(cmd, conn):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.05)
            running -= 1
            return cmd.make_response(ResponseCode.SUCCESS, cmd.ext_fields["i"])

        server.register(BUSY, busy)
        client = RemotingClient()
        try:
            answers = await asyncio.gather(*(client.invoke(addr, RemotingCommand.request(BUSY, {"i": i}), timeout=5)
                                             for i in range(6)))
            assert [a.remark for a in answers] == [str(i) for i in range(6)]
            assert peak <= 2  # the others waited, unread, until one finished
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_echo_body_and_rocketmq_serialize_type():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        try:
            req = RemotingCommand.request(ECHO, {"say": "héllo", "n": 1}, body=b"\x00\x01body")
            req.serialize_type = SerializeType.ROCKETMQ
            resp = await client.invoke(addr, req)
            assert (resp.code, resp.remark, resp.body, resp.opaque) == (0, "héllo", b"\x00\x01body", req.opaque)
            assert resp.serialize_type == SerializeType.ROCKETMQ and resp.ext_fields == {"say": "héllo", "n": "1"}
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_oneway_gets_no_response():
    async def main():
        server, addr, notes = await start_server()
        client = RemotingClient()
        try:
            await client.invoke_oneway(addr, RemotingCommand.request(NOTE, {"k": "v"}))
            await client.invoke_oneway(addr, RemotingCommand.request(ECHO, {"say": "x"}))  # answered by no one
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "after"}))
            assert resp.remark == "after"
            assert [n.ext_fields for n in notes] == [{"k": "v"}] and notes[0].is_oneway
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_server_initiated_request_reaches_client_handler():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()

        async def on_notify(cmd, conn):
            return cmd.make_response(ResponseCode.SUCCESS, f"ok {cmd.ext_fields['consumerGroup']}")

        client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
        try:
            resp = await client.invoke(addr, RemotingCommand.request(ASK_BACK))
            assert resp.remark == "client said ok g"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_timeout_then_connection_still_usable():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        try:
            with pytest.raises(RemotingTimeoutError, match=r"within 0\.[12]\d*s"):
                await client.invoke(addr, RemotingCommand.request(SLOW, {"delay": "1"}), timeout=0.2)
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "still here"}))
            assert resp.remark == "still here"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_handler_exception_answers_system_error():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        try:
            resp = await client.invoke(addr, RemotingCommand.request(BOOM))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "handler blew up on purpose" in resp.remark
            assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "alive"}))).remark == "alive"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_unknown_code_answers_not_supported():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        try:
            resp = await client.invoke(addr, RemotingCommand.request(4242))
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "4242" in resp.remark
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_pending_requests_fail_when_server_goes_and_client_reconnects_after_restart():
    async def main():
        server, addr, _ = await start_server()
        port = int(addr.rsplit(":", 1)[1])
        client = RemotingClient(connect_timeout=1)
        try:
            assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "1"}))).remark == "1"
            gate = Gate()  # never opened: the request is pending at the server until it goes
            server.register(GATE, gate)
            pending = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(GATE, {"say": "never"}),
                                                          timeout=30))
            await gate.until_held(1)
            await server.stop()
            with pytest.raises(RemotingConnectError) as err:  # the connection's loss, not the 30 s timeout
                await asyncio.wait_for(pending, 10)
            assert err.value.__cause__ is not None
            with pytest.raises(RemotingConnectError, match="cannot connect"):
                await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "2"}))
            server, _, _ = await start_server(port=port)
            assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "3"}))).remark == "3"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_oversized_frame_closes_only_that_connection():
    async def main():
        server, addr, _ = await start_server(max_frame=1024)
        big, other = RemotingClient(), RemotingClient()
        try:
            await other.invoke(addr, RemotingCommand.request(ECHO, {"say": "before"}))
            with pytest.raises(RemotingConnectError):
                await big.invoke(addr, RemotingCommand.request(ECHO, body=b"x" * 4096), timeout=5)
            assert (await other.invoke(addr, RemotingCommand.request(ECHO, {"say": "fine"}))).remark == "fine"
            # the offender's next call dials again and works
            assert (await big.invoke(addr, RemotingCommand.request(ECHO, {"say": "again"}))).remark == "again"
        finally:
            await big.close()
            await other.close()
            await server.stop()

    run(main())


@pytest.mark.parametrize("garbage", [b"\x00\x00\x00\x08garbage!", b"GET / HTTP/1.1\r\n\r\n", b"\xff" * 64])
def test_garbage_bytes_close_only_that_connection(garbage):
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        host, port = addr.rsplit(":", 1)
        try:
            await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "x"}))
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(garbage)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(100), 5) == b""  # the server hung up on us
            writer.close()
            assert (await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "ok"}))).remark == "ok"
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_close_callback_runs_when_client_leaves():
    async def main():
        server, addr, _ = await start_server()
        closed = asyncio.Event()
        server.on_connect(lambda conn: conn.on_close(lambda c: closed.set()))
        client = RemotingClient()
        try:
            await client.invoke(addr, RemotingCommand.request(ECHO))
            await client.close()
            await asyncio.wait_for(closed.wait(), 5)
            assert not server.connections
        finally:
            await server.stop()

    run(main())


def test_sync_client_from_plain_threads():
    async def serve(ready, stop):
        server, addr, _ = await start_server()
        ready.append(addr)
        await stop.wait()
        await server.stop()

    import threading

    ready: list[str] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    t = threading.Thread(target=lambda: loop.run_until_complete(serve(ready, stop)))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while not ready and time.monotonic() < deadline:
            time.sleep(0.01)
        with SyncRemotingClient() as client:
            assert client.invoke(ready[0], RemotingCommand.request(ECHO, {"say": "sync"})).remark == "sync"
            with pytest.raises(RemotingTimeoutError):
                client.invoke(ready[0], RemotingCommand.request(SLOW, {"delay": "1"}), timeout=0.1)
            with pytest.raises(RemotingConnectError):
                client.invoke("127.0.0.1:1", RemotingCommand.request(ECHO))
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(5)
        loop.close()


def test_dial_locks_are_dropped_after_connecting_or_failing():
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient(connect_timeout=1)
        try:
            conns = await asyncio.gather(*(client.connection(addr) for _ in range(5)))
            assert all(c is conns[0] for c in conns) and len(server.connections) == 1  # one dial, shared
            assert client._dialing == {}
            results = await asyncio.gather(*(client.connection("127.0.0.1:1") for _ in range(3)),
                                           return_exceptions=True)
            assert all(isinstance(r, RemotingConnectError) for r in results)
            assert client._dialing == {}
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_a_bound_server_refuses_connections_until_it_serves():
    """``start(serve=False)`` reserves the port (the broker learns it before its store opens)
    but a client is refused, never answered REQUEST_CODE_NOT_SUPPORTED, until the handlers are
    in and ``start_serving`` ran."""
    async def main():
        server = RemotingServer("127.0.0.1", 0, name="test")
        port = await server.start(serve=False)
        addr = f"127.0.0.1:{port}"
        client = RemotingClient()
        try:
            with pytest.raises(RemotingConnectError):
                await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "early"}), timeout=2)

            async def echo(cmd, conn):
                return cmd.make_response(ResponseCode.SUCCESS, cmd.ext_fields.get("say"))

            server.register(ECHO, echo)
            await server.start_serving()
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "now"}), timeout=5)
            assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "now")
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_a_client_takes_answers_however_they_are_chunked_and_drops_the_connection_on_a_bad_frame():
    """A client connection decodes chunks as they arrive (in ``data_received`` while its reader task waits):
    an answer split into small chunks and one sharing its chunk with garbage both reach their requests; the
    garbage then fails the request still pending, and the next call dials again."""
    async def main():
        requests: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        writers: list[asyncio.StreamWriter] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            decoder = FrameDecoder()
            while data := await reader.read(65536):
                for cmd in decoder.feed(data):
                    requests.put_nowait(cmd)

        raw = await asyncio.start_server(serve, "127.0.0.1", 0)
        addr = f"127.0.0.1:{raw.sockets[0].getsockname()[1]}"
        client = RemotingClient()
        try:
            calls = [asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO, {"say": s}), timeout=10))
                     for s in "abc"]
            a, b, _c = [await requests.get() for _ in range(3)]
            split = encode(b.make_response(ResponseCode.SUCCESS, "B", body=b"y" * 500))
            for at in range(0, len(split), 7):  # chunks of 7 bytes, each its own segment
                writers[0].write(split[at:at + 7])
                await writers[0].drain()
                await asyncio.sleep(0.001)
            writers[0].write(encode(a.make_response(ResponseCode.SUCCESS, "A")) + b"\x00\x00\x00\x08garbage!")
            second, first = await calls[1], await calls[0]
            assert (first.remark, second.remark, second.body) == ("A", "B", b"y" * 500)
            with pytest.raises(RemotingConnectError, match="header length"):
                await calls[2]
            again = asyncio.ensure_future(client.invoke(addr, RemotingCommand.request(ECHO, {"say": "d"})))
            d = await requests.get()
            writers[1].write(encode(d.make_response(ResponseCode.SUCCESS, "D")))
            assert (await again).remark == "D"
        finally:
            await client.close()
            raw.close()

    run(main())


def test_an_answered_function_hands_the_response_over_before_the_caller_resumes():
    """``answered`` runs on the response as the client reads it: what it wakes resumes before the request's
    caller, its value is the result, its error the request's error; a request that timed out never calls it."""
    async def main():
        server, addr, _ = await start_server()
        client = RemotingClient()
        order: list[str] = []
        handed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def waiter() -> None:
            order.append(f"waiter got {await handed}")

        def answered(response: RemotingCommand) -> str:
            handed.set_result(response.remark)
            return f"answered {response.remark}"

        try:
            task = asyncio.create_task(waiter())
            await asyncio.sleep(0)
            order.append(await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "hi"}), answered=answered))
            await task
            assert order == ["waiter got hi", "answered hi"]

            def refuse(response: RemotingCommand) -> str:
                raise ValueError(f"refused {response.remark}")

            with pytest.raises(ValueError, match="refused no"):
                await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "no"}), answered=refuse)
            late: list[RemotingCommand] = []
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(addr, RemotingCommand.request(SLOW, {"delay": "0.3"}), timeout=0.1,
                                    answered=late.append)
            await asyncio.sleep(0.4)  # the slow answer has arrived meanwhile
            assert late == []
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, {"say": "still here"}))
            assert resp.remark == "still here"
        finally:
            await client.close()
            await server.stop()

    run(main())
