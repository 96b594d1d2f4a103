"""A held pull is answered the moment a message arrives for its queue, ahead of the send's own
response, and answered again and again as a long-polling consumer re-pulls. An in-process broker
(its handlers called directly) makes the order deterministic; against a real broker, each pull is
seen held there before the send, and answered within half its suspend timeout: woken, not timed
out (no latency figure, which a loaded machine would break)."""

from __future__ import annotations

import asyncio

import pytest
from servers import LONG_SUSPEND_MS, WOKEN_WITHIN_S, unique, until_held

from spark_mq.broker.controller import BrokerController
from spark_mq.broker.processors.send import IDLE_DISPATCH_BACKLOG
from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullStatus
from spark_mq.common.config import BrokerConfig
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import pull_header, send_header


class _Conn:
    """What the handlers use of a connection (a client-side one: no in-flight bound). ``responded``: the answers
    written outside their handlers (a held pull answered inside the put that woke it, or after its wait), by
    request opaque; ``answered(opaque)``: a future of such an answer."""

    peer = "127.0.0.1:40000"

    def __init__(self) -> None:
        self.responded: dict[int, RemotingCommand] = {}
        self._answers: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task] = set()

    def try_hold(self) -> bool:
        return True

    async def end_hold(self) -> None:
        pass

    def end_hold_now(self) -> bool:
        return True

    def detach(self, cmd: RemotingCommand, cancel) -> bool:
        return True

    def end_detached(self, cmd: RemotingCommand, handler) -> None:
        if handler is not None:  # the rest of the request, served as the connection serves it: in a task
            task = asyncio.ensure_future(handler(cmd, self))
            self._tasks.add(task)
            task.add_done_callback(lambda t: t.cancelled() or t.exception() or self.respond(cmd, t.result()))

    def respond(self, cmd: RemotingCommand, response: RemotingCommand) -> None:
        self.responded[cmd.opaque] = response
        self.answered(cmd.opaque).set_result(response)

    def answered(self, opaque: int) -> asyncio.Future[RemotingCommand]:
        return self._answers.setdefault(opaque, asyncio.get_running_loop().create_future())

    async def drain(self) -> None:
        pass


def _wire(cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` as the broker receives it (header fields as strings)."""
    return next(iter(FrameDecoder(1 << 24).feed(encode(cmd))))


@pytest.fixture
def inprocess_broker(tmp_path):
    async def start() -> BrokerController:
        b = BrokerController(BrokerConfig(store_path_root_dir=str(tmp_path / "store"), namesrv_addr="127.0.0.1:1",
                                          listen_port=0, metrics_port=0))
        await b.start()
        return b

    return start


def _held(pull, conn: _Conn, topic: str, offset: int, subscription: str | None = None) -> asyncio.Future:
    """The pull's answer: what its handler returns, or what was written for it while it was held."""
    cmd = _wire(RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_header(
        "g", topic, 0, offset, suspend_ms=LONG_SUSPEND_MS, subscription=subscription).to_ext_fields()))

    async def answer() -> RemotingCommand:
        response = await pull(cmd, conn)
        if response is None:  # held: answered when woken
            response = await conn.answered(cmd.opaque)
            conn.responded.pop(cmd.opaque)
        return response

    return asyncio.ensure_future(answer())


def _sent(send, conn, topic: str, body: bytes, tags: str | None = None):
    """The send handler's answer to a SEND_MESSAGE of ``body`` to queue 0 of ``topic``."""
    header = send_header(topic, 0, tags=tags).to_ext_fields()
    return send(_wire(RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body)), conn)


def _handlers(b: BrokerController):
    """The send and pull handlers of ``b``, and a connection to call them with."""
    return b.server._handlers[RequestCode.SEND_MESSAGE], b.server._handlers[RequestCode.PULL_MESSAGE], _Conn()


def test_a_send_answers_the_held_pulls_before_its_own_response(inprocess_broker):
    async def main():
        b = await inprocess_broker()
        try:
            send, pull, conn = _handlers(b)
            await _sent(send, conn, "Order", b"first")
            for offset in range(1, 6):
                held = _held(pull, conn, "Order", offset)
                await asyncio.sleep(0.01)
                assert not held.done() and b.hold.has_waiters("Order", 0)
                response = await _sent(send, conn, "Order", f"m{offset}".encode())
                assert response.code == ResponseCode.SUCCESS
                # answered inside the send's put (written, its coroutine ends at the next turn), or before its ack
                assert conn.responded or held.done(), "the held pull must be answered before the send's response"
                answer = await held
                assert answer.code == ResponseCode.SUCCESS and int(answer.ext_fields["nextBeginOffset"]) == offset + 1
            assert b.hold.waiting == 0
        finally:
            await b.stop()

    asyncio.run(main())


def test_a_pull_woken_by_a_send_answers_what_a_read_of_the_store_answers(inprocess_broker):
    """A held pull answers from the put that woke it (no read of the store): the same units, byte for byte,
    and the same offsets as a pull that reads them; a pull filtering by tag is not handed another tag."""
    async def main():
        b = await inprocess_broker()
        try:
            send, pull, conn = _handlers(b)

            async def stored(tags: str, body: bytes) -> None:
                response = await _sent(send, conn, "Direct", body, tags=tags)
                assert response.code == ResponseCode.SUCCESS

            await stored("A", b"first")
            held, tagged = _held(pull, conn, "Direct", 1), _held(pull, conn, "Direct", 1, subscription="A")
            await asyncio.sleep(0.01)
            await stored("B", b"second")
            woken = held.result()
            read = await pull(_wire(RemotingCommand.request(
                RequestCode.PULL_MESSAGE, pull_header("g", "Direct", 0, 1).to_ext_fields())), conn)
            assert woken.code == read.code == ResponseCode.SUCCESS
            assert woken.body == read.body and b"second" in woken.body
            for name in ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId"):
                assert woken.ext_fields[name] == read.ext_fields[name], name
            answer = await asyncio.wait_for(tagged, WOKEN_WITHIN_S)  # woken too, and reads with its filter
            assert b"second" not in answer.body and answer.code != ResponseCode.SUCCESS
        finally:
            await b.stop()

    asyncio.run(main())


def test_the_appends_a_long_polling_consumer_was_handed_are_dispatched_once_sends_pause(inprocess_broker):
    """Sends answered by the held pulls they woke leave their appends undispatched (the next pull at the queue's
    end is held without a read); once the sends pause for a loop turn with ``IDLE_DISPATCH_BACKLOG``
    messages waiting, the broker dispatches them itself (the consumer's read past ``AT_END_MAX_BACKLOG`` messages
    would otherwise do it between a send and its answer), well before the store's own background pass (10 ms
    without appends) would."""
    async def main():
        b = await inprocess_broker()
        try:
            send, pull, conn = _handlers(b)
            await _sent(send, conn, "Idle", b"m0")
            b.store.dispatch_queues()
            for offset in range(1, IDLE_DISPATCH_BACKLOG + 2):
                held = _held(pull, conn, "Idle", offset)
                await asyncio.sleep(0)
                await _sent(send, conn, "Idle", f"m{offset}".encode())
                assert (await held).code == ResponseCode.SUCCESS
            await asyncio.sleep(0.01)  # no pull read: left alone, the 25 would wait for the store's pass
            # dispatched in the pause (or in an earlier one, when the machine paused the loop mid-way: then what
            # came after it, fewer than the threshold, may wait)
            assert b.store.dispatch_backlog() < IDLE_DISPATCH_BACKLOG
        finally:
            await b.stop()

    asyncio.run(main())


def test_a_long_polling_chain_is_woken_by_each_send(broker):
    """Pull, get woken by a send, pull again at the next offset: each pull is held at the broker
    when the send comes, and answered by it rather than by its suspend timeout."""

    async def main():
        async with MQClientAPI(timeout=5.0) as api:
            topic = unique("LongPollChain")
            await api.create_topic(broker.addr, topic, 1, 1)
            for offset in range(20):
                held = asyncio.ensure_future(api.pull_message(
                    broker.addr, pull_header("chain", topic, 0, offset, suspend_ms=LONG_SUSPEND_MS)))
                await until_held(api, broker.addr, 1)
                await api.send_message(broker.addr, send_header(topic, 0), f"m{offset}".encode())
                r = await asyncio.wait_for(held, WOKEN_WITHIN_S)
                assert r.status == PullStatus.FOUND
                assert [(m.queue_offset, m.body) for m in r.messages()] == [(offset, f"m{offset}".encode())]

    asyncio.run(main())
