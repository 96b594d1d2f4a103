"""A flood of bad input writes a bounded amount of log: a few lines per peer and reason, a summary
of the rest, one WARNING line per client mistake and never a traceback (issue 18, finding 7)."""

from __future__ import annotations

import json
import socket
import struct

import pytest
from servers import wait_until

from spark_mq.common.errors import MQClientError
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

FLOOD = 300  # of each kind of bad input
MAX_NEW_LINES = 40  # a few per reason, their summaries, and the broker's own lines meanwhile


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_flood_of_bad_input_is_logged_briefly(broker, api):
    host, _, port = broker.addr.rpartition(":")
    before = broker.server.log()
    for _ in range(FLOOD):
        with pytest.raises(MQClientError) as e:
            api.create_topic(broker.addr, "bad topic!", 1, 1)
        assert e.value.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in e.value.remark
    with SyncRemotingClient() as raw:
        for _ in range(FLOOD):
            resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in resp.remark
    for _ in range(FLOOD):
        with socket.create_connection((host, int(port)), timeout=5) as bad:
            bad.sendall(struct.pack(">ii", 4 + 9, 9) + b"not json!")
            assert bad.recv(16) == b""  # closed by the broker
    added = broker.server.log()[len(before):]
    assert "Traceback" not in added, added[-3000:]
    assert added.count("\n") <= MAX_NEW_LINES, added[-3000:]
    # what was held back is summed up once its window has passed
    wait_until(lambda: broker.server.log().count("suppressed") >= 3, timeout=30,
               what="summaries of the suppressed lines")
    added = broker.server.log()[len(before):]
    assert added.count("\n") <= MAX_NEW_LINES, added[-3000:]
    lines = records(added)
    topic_lines = [r for r in lines if "illegal characters" in r["msg"]]
    assert topic_lines and all(r["level"] == "WARNING" for r in topic_lines)
    assert any("not valid UTF-8 JSON" in r["msg"] for r in lines)
    summaries = [r["msg"] for r in lines if "suppressed" in r["msg"]]
    assert any(f"{FLOOD - 3} more 'bad frame'" in m for m in summaries), summaries
    assert broker.server.alive()
