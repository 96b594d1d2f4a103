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
from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullStatus
from spark_mq.common.config import BrokerConfig
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import pull_header, send_header


class _Conn:
    """What the handlers use of a connection (a client-side one: no in-flight bound)."""

    peer = "127.0.0.1:40000"

    def try_hold(self) -> bool:
        return True

    async def end_hold(self) -> None:
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


def test_a_send_answers_the_held_pulls_before_its_own_response(inprocess_broker):
    async def main():
        b = await inprocess_broker()
        try:
            send = b.server._handlers[RequestCode.SEND_MESSAGE]
            pull = b.server._handlers[RequestCode.PULL_MESSAGE]
            conn = _Conn()
            await send(_wire(RemotingCommand.request(RequestCode.SEND_MESSAGE, send_header("Order", 0).to_ext_fields(),
                                                     b"first")), conn)
            for offset in range(1, 6):
                held = asyncio.ensure_future(pull(_wire(RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, pull_header("g", "Order", 0, offset, suspend_ms=LONG_SUSPEND_MS)
                    .to_ext_fields())), conn))
                await asyncio.sleep(0.01)
                assert not held.done() and b.hold.has_waiters("Order", 0)
                response = await send(_wire(RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, send_header("Order", 0).to_ext_fields(), f"m{offset}".encode())), conn)
                assert response.code == ResponseCode.SUCCESS
                assert held.done(), "the held pull must be answered before the send's response"
                answer = held.result()
                assert answer.code == ResponseCode.SUCCESS and int(answer.ext_fields["nextBeginOffset"]) == offset + 1
            assert b.hold.waiting == 0
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
