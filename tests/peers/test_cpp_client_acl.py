"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, ``set_session_credentials``) against a broker with
aclEnable=true, its NameServer too (the broker registers signing with its admin account): the right accounts
produce and consume; a wrong secret, a denied topic or no credentials get nothing through (NO_PERMISSION in the
client's error, nothing stored, nothing delivered). Also the
signatures the library computes, captured off the wire, check against the secret (``signature_matches``).

The clients run in subprocesses with their own HOME (the library's logs land in tmp_path, and a crash of the C
library cannot take pytest down).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.acl._support import (
    ADMIN,
    GROUP,
    PUBLISHER,
    SUBSCRIBER,
    TOPIC,
    acl_conf,
    request,
    start_acl_namesrv,
    write_acl,
)
from peer_helpers import cpp_log, recording_broker, register_fake_broker
from servers import Broker, wait_until

from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.signature import ACCESS_KEY, signature_matches

try:
    import rocketmq.client  # noqa: F401
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

pytestmark = pytest.mark.timeout(120)

OTHER_TOPIC = "AclOtherTopic"  # exists, but the publisher account has no permission on it
CREDENTIALS = "import sys\nak, sk = sys.argv[1], sys.argv[2]\n"
PRODUCER = CREDENTIALS + """
from rocketmq.client import Producer, Message
p = Producer("AclCppProducer")
p.set_namesrv_addr(sys.argv[3])
if ak:
    p.set_session_credentials(ak, sk, "ALIYUN")
p.start()
for i in range(int(sys.argv[5])):
    m = Message(sys.argv[4]); m.set_keys(f"k{i}"); m.set_body(f"acl-{i}")
    try:
        r = p.send_sync(m)
        print("SENT", r.status.name, flush=True)
    except Exception as e:
        print("SENDFAIL", str(e).replace("\\n", " "), flush=True)
p.shutdown()
"""
CONSUMER = CREDENTIALS + """
import threading
from rocketmq.client import PushConsumer
c = PushConsumer(sys.argv[5])
c.set_namesrv_addr(sys.argv[3])
if ak:
    c.set_session_credentials(ak, sk, "ALIYUN")
out = threading.Lock()  # the library calls back on several threads at once: one whole line each
def on(msg):
    with out:
        sys.stdout.write(f"MSG {msg.body.decode()}\\n")
        sys.stdout.flush()
c.subscribe(sys.argv[4], on)
c.start()
print("READY", flush=True)
sys.stdin.read()  # until the test closes stdin
c.shutdown()
"""


def run_producer(home: Path, namesrv: str, topic: str, count: int, key: str = "", secret: str = "") -> list[str]:
    home.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", PRODUCER, key, secret, namesrv, topic, str(count)],
                         env=dict(os.environ, HOME=str(home)), capture_output=True, text=True, timeout=90)
    return [line for line in out.stdout.splitlines() if line.startswith(("SENT", "SENDFAIL"))] or [out.stderr]


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    """(NameServer address, broker), both with aclEnable=true, both topics created by the admin account and
    routed at the NameServer."""
    root = tmp_path_factory.mktemp("cpp-acl")
    acl_file = write_acl(root / "acl")
    namesrv = start_acl_namesrv(root / "namesrv", acl_file)
    broker = Broker(namesrv.addr, root / "broker", acl_conf(acl_file) + f"accessKey={ADMIN.access_key}\n"
                    f"secretKey={ADMIN.secret_key}\n", verbose=False)
    try:
        with SyncRemotingClient() as client:
            for topic in (TOPIC, OTHER_TOPIC):
                created = client.invoke(broker.addr, request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": 2,
                                                          "writeQueueNums": 2, "perm": 6}, credentials=ADMIN))
                assert created.code == ResponseCode.SUCCESS, created
            wait_until(lambda: all(client.invoke(namesrv.addr, request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t}, credentials=ADMIN)).code == ResponseCode.SUCCESS
                for t in (TOPIC, OTHER_TOPIC)), 15, "both routes at the NameServer")
        yield namesrv.addr, broker
    finally:
        broker.stop()
        namesrv.stop_cleanly()


def stored(broker: Broker, topic: str) -> int:
    with SyncRemotingClient() as client:
        return sum(int(client.invoke(broker.addr, request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q},
                                                          credentials=ADMIN)).ext_fields["offset"]) for q in (0, 1))


def test_the_right_accounts_produce_and_consume(tmp_path, acl_cluster):
    namesrv, broker = acl_cluster
    before = stored(broker, TOPIC)
    assert run_producer(tmp_path / "p", namesrv, TOPIC, 4, PUBLISHER.access_key, PUBLISHER.secret_key) == [
        "SENT OK"] * 4
    assert stored(broker, TOPIC) == before + 4
    with consuming(tmp_path / "c", namesrv, SUBSCRIBER.access_key, SUBSCRIBER.secret_key) as got:
        wait_until(lambda: {f"MSG acl-{i}" for i in range(4)} <= set(got), 60, "the four messages consumed")
    assert PUBLISHER.secret_key not in broker.log() and SUBSCRIBER.secret_key not in broker.log()


@pytest.mark.parametrize(("case", "key", "secret", "remark"), [
    ("wrong secret", SUBSCRIBER.access_key, "not-the-subscriber-secret",
     f"accessKey={SUBSCRIBER.access_key}: the signature does not match"),
    ("a publisher's account", PUBLISHER.access_key, PUBLISHER.secret_key,
     f"accessKey={PUBLISHER.access_key} needs SUB on"),
])
def test_refused_consumers_get_nothing(tmp_path, acl_cluster, case, key, secret, remark):
    namesrv, _ = acl_cluster
    run_producer(tmp_path / "p", namesrv, TOPIC, 1, PUBLISHER.access_key, PUBLISHER.secret_key)
    home = tmp_path / "c"
    with consuming(home, namesrv, key, secret) as got:
        wait_until(lambda: remark in cpp_log(home), 60, "the client told NO_PERMISSION")
    assert got == [], case


@contextlib.contextmanager
def consuming(home: Path, namesrv: str, key: str, secret: str) -> Iterator[list[str]]:
    """A C++ push consumer of TOPIC in GROUP with these credentials; yields the ``MSG <body>`` lines it prints, as
    they arrive; shut down on leaving. Its output is read as bytes and searched (the library may write there too),
    and kept in ``home/consumer.out`` for a failure's diagnosis."""
    home.mkdir(parents=True)
    with open(home / "consumer.err", "wb") as err:
        consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, key, secret, namesrv, TOPIC, GROUP],
                                    env=dict(os.environ, HOME=str(home)), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err)
    got: list[str] = []

    def read() -> None:
        with open(home / "consumer.out", "wb") as out:
            for line in consumer.stdout:
                out.write(line)
                out.flush()
                got.extend(f"MSG {body}" for body in re.findall(r"MSG (acl-\d+)", line.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield got
    finally:
        consumer.stdin.close()
        consumer.wait(30)
        reader.join(5)


@pytest.mark.parametrize(("case", "topic", "key", "secret", "remark"), [
    ("wrong secret", TOPIC, PUBLISHER.access_key, "not-the-publisher-secret",
     f"accessKey={PUBLISHER.access_key}: the signature does not match"),
    ("denied topic", OTHER_TOPIC, PUBLISHER.access_key, PUBLISHER.secret_key,
     f"accessKey={PUBLISHER.access_key} needs PUB on topic {OTHER_TOPIC} (request 10 SEND_MESSAGE)"),
    ("no credentials", TOPIC, "", "", "no AccessKey: this server checks ACL"),
])
def test_refused_sends_store_nothing(tmp_path, acl_cluster, case, topic, key, secret, remark):
    namesrv, broker = acl_cluster
    before = stored(broker, topic)
    outcome = run_producer(tmp_path, namesrv, topic, 1, key, secret)
    assert len(outcome) == 1 and outcome[0].startswith("SENDFAIL"), (case, outcome)
    # the binding's exception text is the library's last words ("No route info"); its log has the answer: from the
    # NameServer ("<remark>,16") when the route lookup is refused, else from the broker ("error code:16")
    log = cpp_log(tmp_path)
    assert remark in log and ("error code:16" in log or ",16[" in log), log
    assert stored(broker, topic) == before


def test_the_librarys_signature_checks_against_the_secret(tmp_path, acl_cluster):
    """What the library sends (a SEND_MESSAGE with a body, recorded by a fake broker the NameServer routes to)
    carries the AccessKey and a Signature that ``signature_matches`` accepts with the secret, and with no other."""
    namesrv, _ = acl_cluster
    # the registering connection stays open while the producer runs: closing it evicts the broker
    with recording_broker() as (fake, got), SyncRemotingClient(credentials=ADMIN) as client:
        register_fake_broker(client, namesrv, fake, "AclCppRecorded")
        run_producer(tmp_path, namesrv, "AclCppRecorded", 1, PUBLISHER.access_key, PUBLISHER.secret_key)
    send = next(cmd for cmd in got if cmd.code == RequestCode.SEND_MESSAGE)
    assert send.language == "CPP" and send.body == b"acl-0"
    assert send.ext_fields[ACCESS_KEY] == PUBLISHER.access_key and "OnsChannel" in send.ext_fields
    assert signature_matches(PUBLISHER.secret_key, send.ext_fields, send.body)
    assert not signature_matches(SUBSCRIBER.secret_key, send.ext_fields, send.body)
