"""The official RocketMQ C++ client (PyPI ``rocketmq``, bundling librocketmq) against our NameServer.

The producer runs in a subprocess (its own HOME, so its ~/logs/rocketmq-cpp lands in tmp_path,
and a crash of the C library cannot take pytest down). A fake broker is registered through our
own client; the producer must fetch the route from us, parse it and dial that broker address.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from peer_helpers import cpp_log, recording_broker, register_fake_broker
from servers import free_addr

from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode

try:
    import rocketmq.client  # noqa: F401
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

PRODUCER = """
import sys
from rocketmq.client import Producer, Message
p = Producer("PG")
p.set_namesrv_addr(sys.argv[1])
p.start()
m = Message(sys.argv[2]); m.set_keys("k1"); m.set_tags("tagA"); m.set_body("hello")
try:
    print("SENT", p.send_sync(m))
except Exception as e:
    print("SENDFAIL", e)
p.shutdown()
"""


def run_producer(tmp: Path, namesrv: str, topic: str) -> str:
    env = dict(os.environ, HOME=str(tmp))
    out = subprocess.run([sys.executable, "-c", PRODUCER, namesrv, topic], env=env, capture_output=True, text=True,
                         timeout=60)
    return out.stdout + out.stderr


def test_cpp_producer_fetches_and_parses_our_route(tmp_path, namesrv):
    fake = free_addr()  # nothing listens here
    with SyncRemotingClient() as client:  # keep the registering connection open: closing it evicts the broker
        register_fake_broker(client, namesrv, fake, "CppTopic")
        out = run_producer(tmp_path, namesrv, "CppTopic")
    assert "SENDFAIL" in out, out
    server_log = (tmp_path / "namesrv.log").read_text()
    asked = [line for line in server_log.splitlines() if "code=105" in line and "lang=CPP" in line]
    assert asked and "'topic': 'CppTopic'" in asked[0], server_log
    log = cpp_log(tmp_path)
    assert "changed with broker name:broker-cpp" in log, log  # our route was parsed
    assert f"can not connect to server:{fake}" in log, log  # and the broker address from it dialled


def test_cpp_producer_sends_to_the_broker_in_our_route(tmp_path, namesrv):
    with recording_broker() as (broker, got), SyncRemotingClient() as client:
        register_fake_broker(client, namesrv, broker, "CppTopic2")
        run_producer(tmp_path, namesrv, "CppTopic2")
    # the client's heartbeat to the broker may come first (its timer runs while the send waits for the route)
    sends = [c for c in got if c.code == RequestCode.SEND_MESSAGE]
    assert sends, (got, cpp_log(tmp_path))
    send = sends[0]
    assert send.language == "CPP"
    assert send.ext_fields["topic"] == "CppTopic2" and send.ext_fields["producerGroup"] == "PG"
    assert send.body == b"hello"
    assert "TAGS\x01tagA\x02" in send.ext_fields["properties"]


def test_cpp_producer_unknown_topic_falls_back_to_default_topic(tmp_path, namesrv):
    out = run_producer(tmp_path, namesrv, "NoSuchTopicCpp")
    assert "No route info of this topic: NoSuchTopicCpp" in out, out
    server_log = (tmp_path / "namesrv.log").read_text()
    assert "'topic': 'TBW102'" in server_log  # the C++ client asks for the auto-create topic next
