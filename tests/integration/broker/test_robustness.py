"""A broker under misuse and failure: bad frames, bad headers, oversized messages, SIGTERM with
held pulls, SIGKILL and recovery, and a second broker on a locked store."""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import subprocess
import sys

import pytest
from servers import LONG_SUSPEND_MS, WOKEN_WITHIN_S, unique, until_held

from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import closed_by_peer, host_port, pull_header, send_header

MAX_MESSAGE_SIZE = 4096


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return f"maxMessageSize={MAX_MESSAGE_SIZE}\n"


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 20 << 20),  # a frame length of 20 MiB: over the 16 MiB maximum
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # not remoting at all
    struct.pack(">ii", 4 + 9, 9) + b"not json!",  # a JSON header that is not JSON
    struct.pack(">ii", 4 + 2, (7 << 24) | 2) + b"{}",  # an unknown serialize type
], ids=["oversized-frame", "http", "bad-json", "bad-serialize-type"])
def test_bad_frames_close_only_their_connection(broker, api, garbage):
    topic = unique("Frames")
    api.send_message(broker.addr, send_header(topic, 0), b"before")  # this client's connection stays open
    with socket.create_connection(host_port(broker.addr), timeout=3) as bad:
        bad.sendall(garbage)
        assert closed_by_peer(bad), "the broker kept a connection that sent garbage"
    r = api.send_message(broker.addr, send_header(topic, 0), b"after")
    assert r.queue_offset == 1
    got = api.pull_message(broker.addr, pull_header("g", topic, 0, 0)).messages()
    assert [m.body for m in got] == [b"before", b"after"]
    assert broker.server.alive()


def test_missing_required_header_field_is_a_system_error_naming_it(broker, api):
    topic = unique("Headers")
    api.create_topic(broker.addr, topic, 1, 1)
    fields = {"consumerGroup": "g", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 0,
              "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}
    with SyncRemotingClient() as raw:
        for missing in ("topic", "queueOffset"):
            partial = {k: v for k, v in fields.items() if k != missing}
            resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, partial))
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert missing in resp.remark, resp.remark
        resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                               {**fields, "queueId": "zero"}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId" in resp.remark
        send = send_header(topic, 0).to_ext_fields()
        del send["producerGroup"]
        resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, send, b"x"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in resp.remark
        # the same connection keeps working
        ok = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, fields))
        assert ok.code == ResponseCode.PULL_NOT_FOUND
    assert api.get_max_offset(broker.addr, topic, 0) == 0


def test_oversized_message_is_illegal_and_not_stored(broker, api):
    topic = unique("Big")
    api.send_message(broker.addr, send_header(topic, 0), b"x" * MAX_MESSAGE_SIZE)  # exactly the limit: fine
    assert api.get_max_offset(broker.addr, topic, 0) == 1
    commitlog_end = int(api.get_broker_runtime_info(broker.addr)["commitLogMaxOffset"])
    for send in (api.send_message, api.send_message_v2):
        with pytest.raises(MQClientError) as e:
            send(broker.addr, send_header(topic, 0), b"x" * (MAX_MESSAGE_SIZE + 1))
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert "maxMessageSize" in e.value.remark
    batch = MessageBatch.from_messages([Message(topic, b"small"), Message(topic, b"y" * (MAX_MESSAGE_SIZE + 1))], 0)
    with pytest.raises(MQClientError) as e:
        api.send_batch(broker.addr, batch, "itest_producer")
    assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert api.get_max_offset(broker.addr, topic, 0) == 1  # nothing of the batch either
    assert int(api.get_broker_runtime_info(broker.addr)["commitLogMaxOffset"]) == commitlog_end


@pytest.mark.parametrize("topic", ["bad topic!", "T" * 200], ids=["illegal-chars", "too-long"])
def test_send_to_an_illegal_topic_name_creates_nothing(broker, api, topic):
    for send in (api.send_message, api.send_message_v2):
        with pytest.raises(MQClientError) as e:
            send(broker.addr, send_header(topic, -1), b"x")
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert topic not in api.get_all_topic_config(broker.addr).topic_config_table
    with pytest.raises(MQClientError) as e:
        api.create_topic(broker.addr, topic, 1, 1)
    assert e.value.code == ResponseCode.SYSTEM_ERROR
    assert topic not in api.get_all_topic_config(broker.addr).topic_config_table


def test_sigterm_with_held_pulls_exits_promptly_and_unregisters(own_broker, namesrv):
    b = own_broker("term")
    topic = unique("Term")

    async def main():
        async with MQClientAPI(timeout=5.0) as api:
            await api.create_topic(b.addr, topic, 3, 3)
            for _ in range(60):  # the broker re-registers at once on a topic change
                if await api.get_route_info(namesrv, topic) is not None:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the created topic never reached the NameServer")
            held = [asyncio.ensure_future(api.pull_message(b.addr, pull_header("g", topic, q, 0,
                                                                           suspend_ms=LONG_SUSPEND_MS)))
                    for q in range(3)]
            await until_held(api, b.addr, 3)
            b.server.signal(signal.SIGTERM)
            # exited by itself well before the held pulls' suspend timeout could have released them
            # (``wait`` SIGKILLs after its timeout: the exit code would not be 0)
            code = await asyncio.to_thread(b.server.wait, WOKEN_WITHIN_S)
            outcomes = await asyncio.wait_for(asyncio.gather(*held, return_exceptions=True), 5)
            for o in outcomes:  # answered empty at shutdown, or the connection closed under it
                assert isinstance(o, RemotingError) or o.status == PullStatus.NO_NEW_MSG, o
            assert code == 0, b.log()[-3000:]
            assert not (b.store / "abort").exists()
            # UNREGISTER_BROKER: the NameServer routes nothing to it any more
            assert await api.get_route_info(namesrv, topic) is None
            cluster = await api.get_cluster_info(namesrv)
            assert b.name not in cluster.broker_addr_table

    asyncio.run(main())


def test_sigkill_then_restart_recovers_every_acknowledged_message(own_broker, make_api):
    b = own_broker("crash")
    topic = unique("Crash")
    api = make_api()
    api.create_topic(b.addr, topic, 4, 4)
    acked: dict[int, list[tuple[int, bytes, str]]] = {q: [] for q in range(4)}
    for i in range(120):
        q = i % 4
        body = f"crash-{i}".encode() * (1 + i % 7)
        r = api.send_message(b.addr, send_header(topic, q, keys=f"ck{i}"), body)
        assert r.status == SendStatus.SEND_OK
        acked[q].append((r.queue_offset, body, r.offset_msg_id))
    for j in range(5):
        batch = MessageBatch.from_messages([Message(topic, f"batch-{j}-{k}".encode()) for k in range(10)], j % 4)
        r = api.send_batch(b.addr, batch, "itest_producer")
        for k, oid in enumerate(r.offset_msg_ids):
            acked[j % 4].append((r.queue_offset + k, f"batch-{j}-{k}".encode(), oid))
    api.close()

    b.server.kill()
    assert (b.store / "abort").exists(), "a killed broker leaves its abort file"
    b.start_again()
    assert "recovery" in b.log()
    api = make_api()
    for q in range(4):
        assert api.get_max_offset(b.addr, topic, q) == len(acked[q])
        got, offset = [], 0
        while True:
            r = api.pull_message(b.addr, pull_header("g", topic, q, offset, max_nums=32))
            if r.status != PullStatus.FOUND:
                break
            got += r.messages(check_crc=True)
            offset = r.next_begin_offset
        assert [(m.queue_offset, m.body) for m in got] == [(o, body) for o, body, _ in acked[q]]
        for _, body, oid in acked[q][::9]:  # and by id, the ids handed out before the crash
            assert api.view_message_by_id(b.addr, oid).body == body
    assert [m.body for m in api.query_message(b.addr, topic, "ck5", 4, 0, 2**62)] == [b"crash-5" * 6]
    # sending still works after recovery, at the next offsets
    r = api.send_message(b.addr, send_header(topic, 0), b"after crash")
    assert r.queue_offset == len(acked[0])


def test_second_broker_on_the_same_store_fails_naming_the_lock(broker):
    args = [sys.executable, "-m", "spark_mq.cli", *broker.args(0, 0)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    err = done.stderr
    assert "lock" in err.lower(), err[-2000:]
    assert str(broker.store) in err and str(broker.server.pid) in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert not done.stdout.strip()  # never printed its ready line
    assert broker.server.alive()
    # the running broker is unharmed
    with SyncRemotingClient() as raw:
        resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    assert resp.code == ResponseCode.SUCCESS
