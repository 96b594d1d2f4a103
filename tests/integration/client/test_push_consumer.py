"""PushConsumer / SyncPushConsumer against real ``spark-mq namesrv`` and ``spark-mq broker`` processes.

(a) a clustering group whose members join and leave consumes every message exactly once (and, across a
member's SIGKILL, at least once); (b) orderly consumption keeps each queue's order across a rebalance;
(c) broadcasting gives every member every message; (d) a failing listener's messages come back through
``%RETRY%<group>`` and end in ``%DLQ%<group>`` after ``max_reconsume_times``; (e) the RocketMQ C++ client
and ours exchange messages intact; and the broker's send-back scheduler keeps a pending redelivery
across a restart.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers import Broker, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.consume_service import ConsumeStatus
from spark_mq.client.producer import SyncProducer
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader

from ._producer_support import create_topic, pull_all

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def api():
    with SyncMQClientAPI(timeout=5.0) as client:
        yield client


@dataclass(frozen=True)
class Got:
    consumer: str
    key: str
    topic: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    body: bytes
    props: dict


class Recorder:
    """Listeners of several consumers recording, in one global order, what they consumed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[Got] = []

    def listener(self, name: str, verdict=lambda m: True):
        def listen(messages) -> bool | ConsumeStatus:
            ok = all(verdict(m) for m in messages)
            with self.lock:
                for m in messages:
                    self.got.append(Got(name, m.keys[0] if m.keys else "", m.topic, m.queue_id, m.queue_offset,
                                        m.reconsume_times, m.body, dict(m.properties)))
            return ok if isinstance(ok, bool) else ConsumeStatus.CONSUME_SUCCESS
        return listen

    def keys(self, consumer: str | None = None) -> Counter:
        with self.lock:
            return Counter(g.key for g in self.got if consumer is None or g.consumer == consumer)

    def snapshot(self) -> list[Got]:
        with self.lock:
            return list(self.got)


def consumer(stack: ExitStack, namesrv: str, group: str, topic: str, name: str, listener, **options):
    c = SyncPushConsumer(group, ClientConfig(namesrv, instance_name=name), **options)
    stack.callback(c.shutdown)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    return c


def send(producer: SyncProducer, topic: str, keys: list[str]) -> None:
    for k in keys:
        producer.send(Message(topic, f"body of {k}".encode(), tags="T", keys=k))


def wait_consumed(rec: Recorder, keys: set[str], timeout: float = 20.0) -> None:
    wait_until(lambda: keys <= set(rec.keys()), timeout, f"{len(keys - set(rec.keys()))} of {len(keys)} messages")


def ready(c: SyncPushConsumer, topic: str) -> list:
    return [mq for mq in c.ready_queues() if mq.topic == topic]


def settled(consumers, queues: int, topic: str) -> bool:
    """The members own and pull ``queues`` queues of ``topic`` between them, each some, none twice."""
    assigned = [ready(c, topic) for c in consumers]
    return all(assigned) and sum(map(len, assigned)) == queues and len(set().union(*assigned)) == queues


# -- (a) clustering: exactly once while members join and leave ------------------------------------------------------
def test_group_members_joining_and_leaving_consume_every_message_once(namesrv, broker, api):
    topic, group = unique("PushTopic"), unique("PushGroup")
    create_topic(api, namesrv, [broker], topic, 8)
    rec = Recorder()
    with ExitStack() as stack, SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
        c1 = consumer(stack, namesrv, group, topic, "c1", rec.listener("c1"), consume_from="first")
        wait_until(lambda: settled([c1], 8, topic), 10, "c1 owning all queues")
        send(p, topic, [f"a{i}" for i in range(40)])
        wait_consumed(rec, {f"a{i}" for i in range(40)})
        c2 = consumer(stack, namesrv, group, topic, "c2", rec.listener("c2"), consume_from="first")
        c3 = consumer(stack, namesrv, group, topic, "c3", rec.listener("c3"), consume_from="first")
        send(p, topic, [f"b{i}" for i in range(40)])  # while the queues move
        wait_until(lambda: settled([c1, c2, c3], 8, topic), 15, "three members splitting the queues")
        send(p, topic, [f"c{i}" for i in range(40)])
        wait_consumed(rec, {f"{x}{i}" for x in "abc" for i in range(40)})
        assert rec.keys("c2") and rec.keys("c3"), "the new members never consumed"
        c2.shutdown()  # commits and hands its queues over before unregistering
        wait_until(lambda: settled([c1, c3], 8, topic), 15, "two members splitting the queues")
        send(p, topic, [f"d{i}" for i in range(40)])
        everything = {f"{x}{i}" for x in "abcd" for i in range(40)}
        wait_consumed(rec, everything)
        time.sleep(0.5)  # a duplicate would come right behind
    counts = rec.keys()
    assert set(counts) == everything
    assert [k for k, n in counts.items() if n > 1] == []


def test_a_crashed_member_loses_nothing(namesrv, broker, api, tmp_path):
    """A member in another process is SIGKILLed mid-stream: its queues go to the survivor after the handoff
    timeout and every message is consumed at least once (duplicates counted, not failed)."""
    topic, group = unique("CrashTopic"), unique("CrashGroup")
    create_topic(api, namesrv, [broker], topic, 8)
    rec = Recorder()
    script = Path(__file__).with_name("push_consumer_proc.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen([sys.executable, str(script), namesrv, topic, group, "crashy"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "crashy.log", "wb"), env=env)
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.decode().strip())

    try:
        assert select.select([proc.stdout], [], [], 30)[0], (tmp_path / "crashy.log").read_text()
        assert proc.stdout.readline().strip() == b"READY", (tmp_path / "crashy.log").read_text()
        threading.Thread(target=read, daemon=True).start()
        with ExitStack() as stack, SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
            c1 = consumer(stack, namesrv, group, topic, "survivor", rec.listener("survivor"), consume_from="first",
                          handoff_timeout_s=2.0)
            wait_until(lambda: len(ready(c1, topic)) == 4, 15, "the survivor owning half the queues")
            keys = [f"k{i}" for i in range(300)]
            send(p, topic, keys[:150])
            wait_until(lambda: sum(1 for ln in lines if ln.startswith("GOT")) >= 20, 15, "the other member consuming")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            send(p, topic, keys[150:])
            crashed = Counter(ln.split()[1] for ln in list(lines) if ln.startswith("GOT"))
            wait_until(lambda: set(keys) <= set(rec.keys()) | set(crashed), 30, "every message after the crash")
            wait_until(lambda: len(ready(c1, topic)) == 8, 10, "the survivor owning every queue")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    counts = rec.keys() + Counter(ln.split()[1] for ln in list(lines) if ln.startswith("GOT"))
    assert set(counts) == set(keys)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    print(f"crash test: {len(duplicates)} of {len(keys)} messages delivered twice (allowed across a crash)")


# -- (b) orderly ----------------------------------------------------------------------------------------------------
def test_orderly_consumption_keeps_queue_order_across_a_rebalance(namesrv, broker, api):
    topic, group = unique("OrderTopic"), unique("OrderGroup")
    create_topic(api, namesrv, [broker], topic, 4)
    rec = Recorder()

    def slow(m) -> bool:
        time.sleep(0.002)
        return True

    n = 400
    with ExitStack() as stack, SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
        consumer(stack, namesrv, group, topic, "o1", rec.listener("o1", slow), orderly=True, consume_from="first",
                 consume_batch_size=4)
        o2_owns_a_queue = threading.Event()

        def produce() -> None:
            for i in range(n):
                if i == n // 2:  # the second half comes once o2 took queues over: it has some to consume
                    o2_owns_a_queue.wait(30)
                p.send_orderly(Message(topic, f"{i % 4}:{i}".encode(), keys=f"m{i}"), i % 4)
                if i % 50 == 0:
                    time.sleep(0.05)

        t = threading.Thread(target=produce)
        t.start()
        wait_until(lambda: len(rec.keys()) >= 60, 15, "the first orderly consumer going")
        o2 = consumer(stack, namesrv, group, topic, "o2", rec.listener("o2", slow), orderly=True,
                      consume_from="first", consume_batch_size=4)
        wait_until(lambda: ready(o2, topic), 15, "the second orderly consumer owning a queue")
        o2_owns_a_queue.set()
        t.join(30)
        wait_consumed(rec, {f"m{i}" for i in range(n)}, 30)
        time.sleep(0.3)
    got = rec.snapshot()
    assert len(got) == n, Counter(g.key for g in got).most_common(3)
    by_queue: dict[int, list[Got]] = {}
    for g in got:
        by_queue.setdefault(g.queue_id, []).append(g)
    for q, items in by_queue.items():
        assert [g.queue_offset for g in items] == list(range(len(items))), f"queue {q} out of order"
        seqs = [int(g.body.split(b":")[1]) for g in items]
        assert seqs == sorted(seqs)
    assert {g.consumer for g in got} == {"o1", "o2"}, "the second orderly consumer never took a queue"


# -- (c) broadcasting -----------------------------------------------------------------------------------------------
def test_broadcasting_gives_every_member_every_message(namesrv, broker, api, tmp_path):
    topic, group = unique("BcTopic"), unique("BcGroup")
    create_topic(api, namesrv, [broker], topic, 4)
    rec = Recorder()
    keys = {f"b{i}" for i in range(30)}
    with ExitStack() as stack, SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
        for name in ("x", "y"):
            consumer(stack, namesrv, group, topic, name, rec.listener(name), message_model="BROADCASTING",
                     consume_from="first", offset_store_path=tmp_path / f"{name}.json")
        send(p, topic, sorted(keys))
        wait_until(lambda: set(rec.keys("x")) == keys and set(rec.keys("y")) == keys, 20, "both members")
        time.sleep(0.3)
    assert rec.keys("x") == Counter(keys) and rec.keys("y") == Counter(keys)
    assert (tmp_path / "x.json").exists()


# -- (d) retries and the DLQ ----------------------------------------------------------------------------------------
def test_failing_listener_redelivers_through_retry_topic_then_dlq(namesrv, broker, api):
    topic, group = unique("RetryTopic"), unique("RetryGroup")
    create_topic(api, namesrv, [broker], topic, 2)
    rec = Recorder()
    tries: Counter = Counter()

    def verdict(m) -> bool:
        key = m.keys[0]
        tries[key] += 1
        if key == "bad":
            return False
        return key != "flaky" or m.reconsume_times >= 2

    with ExitStack() as stack, SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
        consumer(stack, namesrv, group, topic, "r", rec.listener("r", verdict), consume_from="first",
                 max_reconsume_times=2, retry_delay_level=1)
        send(p, topic, ["good1", "flaky", "bad", "good2"])
        wait_until(lambda: tries["flaky"] >= 3 and tries["bad"] >= 3, 30, "the retries")
        dlq = "%DLQ%" + group
        dead = wait_until(lambda: pull_all(api, broker.addr, dlq, 0), 15, "the DLQ message")
        time.sleep(1.5)  # nothing more may come back
    assert [m.keys for m in dead] == [["bad"]]
    assert dead[0].reconsume_times == 3 and dead[0].properties["RETRY_TOPIC"] == topic
    assert tries == Counter(good1=1, good2=1, flaky=3, bad=3)
    retried = [g for g in rec.snapshot() if g.key in ("flaky", "bad")]
    assert {g.topic for g in retried} == {topic}, "retried messages must carry their original topic"
    assert sorted(g.reconsume_times for g in retried if g.key == "flaky") == [0, 1, 2]
    assert all(g.body == f"body of {g.key}".encode() for g in rec.snapshot())


# -- broker send-back across a restart ------------------------------------------------------------------------------
def test_pending_redelivery_survives_a_broker_restart(namesrv, api, tmp_path):
    b = Broker(namesrv, tmp_path / "broker-r", broker_name="broker-r")
    try:
        topic, group = unique("RestartTopic"), unique("RestartGroup")
        create_topic(api, namesrv, [b], topic, 1)
        result = api.send_message_v2(b.addr, _send_header(topic), b"survivor")
        offset = int(result.offset_msg_id[16:], 16)
        header = ConsumerSendMsgBackRequestHeader(offset=offset, group=group, delay_level=2, origin_topic=topic,
                                                  max_reconsume_times=16)  # level 2: 5 s
        response = _invoke(api, b.addr, header)
        assert response.code == ResponseCode.SUCCESS, response.remark
        # let the re-registration the new retry topic triggered finish: a SIGTERM landing on it can be swallowed
        # by asyncio.wait_for in the broker's register loop (Python < 3.12), which then never stops
        wait_until(lambda: api.get_route_info(namesrv, "%RETRY%" + group), 10, "the retry topic's route")
        b.stop_if_running()
        assert "pendingRetries" in (b.store / "config" / "delayOffset.json").read_text()
        b.start_again()
        retry = "%RETRY%" + group
        (copy,) = wait_until(lambda: pull_all(api, b.addr, retry, 0), 15, "the redelivered message")
        assert copy.body == b"survivor" and copy.reconsume_times == 1 and copy.properties["RETRY_TOPIC"] == topic
    finally:
        b.stop_if_running()


def _send_header(topic: str):
    from spark_mq.remoting.headers import SendMessageRequestHeader

    return SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102",
                                    default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                    born_timestamp=int(time.time() * 1000), flag=0, properties="KEYS\x01r\x02")


def _invoke(api, addr: str, header: ConsumerSendMsgBackRequestHeader) -> RemotingCommand:
    async def call() -> RemotingCommand:
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
        return await api.api.remoting.invoke(addr, cmd, 5.0)

    return api._thread.run(call())


# -- (e) the RocketMQ C++ client ------------------------------------------------------------------------------------
def test_messages_cross_between_our_client_and_the_cpp_client_intact(namesrv, broker, api):
    try:
        from rocketmq.client import Message as CppMessage
        from rocketmq.client import Producer as CppProducer
        from rocketmq.client import PushConsumer as CppPushConsumer
        from rocketmq.client import SendStatus as CppSendStatus
        from rocketmq.ffi import dll
    except Exception as e:  # ImportError, or OSError when librocketmq cannot load
        pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e})")
    to_cpp, to_ours = unique("ToCpp"), unique("ToOurs")
    for topic in (to_cpp, to_ours):
        create_topic(api, namesrv, [broker], topic, 4)
    props = {"color": "grün", "note": "東京 №1 ✓"}
    n = 12

    def expected(topic: str, i: int) -> tuple:
        return (topic, f"body {i} — ünïcödé", f"key{i}", ("TagA", "TagB")[i % 2], props["color"], props["note"])

    # ours -> C++
    cpp_got: list[tuple] = []
    cpp_lock = threading.Lock()

    def on_cpp_message(msg) -> None:
        got = (msg.topic, msg.body.decode(), msg.keys.decode(), msg.tags.decode(),
               (msg.get_property("color") or b"").decode(), (msg.get_property("note") or b"").decode())
        with cpp_lock:
            cpp_got.append(got)

    cpp_consumer = CppPushConsumer(unique("CppCG"))
    cpp_consumer.set_instance_name(unique("cpp-consumer"))
    cpp_consumer.set_namesrv_addr(namesrv)
    cpp_consumer.subscribe(to_cpp, on_cpp_message)
    cpp_consumer.start()
    try:
        with SyncProducer(unique("PG"), ClientConfig(namesrv)).start() as p:
            for i in range(n):
                _, body, keys, tags, *_ = expected(to_cpp, i)
                p.send(Message(to_cpp, body.encode(), tags=tags, keys=keys, properties=dict(props)))
        want = Counter(expected(to_cpp, i) for i in range(n))
        wait_until(lambda: len(cpp_got) >= n, 30, "the C++ consumer receiving our messages")
        time.sleep(0.3)
        with cpp_lock:
            assert Counter(cpp_got) == want
    finally:
        cpp_consumer.shutdown()

    # C++ -> ours
    rec = Recorder()
    with ExitStack() as stack:
        consumer(stack, namesrv, unique("OursCG"), to_ours, "ours", rec.listener("ours"), consume_from="first")
        cpp_producer = CppProducer(unique("CppPG"))
        dll.SetProducerInstanceName(cpp_producer._handle, unique("cpp-producer").encode())
        cpp_producer.set_namesrv_addr(namesrv)
        cpp_producer.start()
        try:
            for i in range(n):
                topic, body, keys, tags, *_ = expected(to_ours, i)
                m = CppMessage(topic)
                m.set_body(body)
                m.set_keys(keys)
                m.set_tags(tags)
                for name, value in props.items():
                    m.set_property(name, value)
                assert cpp_producer.send_sync(m).status == CppSendStatus.OK
        finally:
            cpp_producer.shutdown()
        wait_consumed(rec, {f"key{i}" for i in range(n)}, 30)
        time.sleep(0.3)
    got = Counter((g.topic, g.body.decode(), g.key, g.props.get("TAGS"), g.props.get("color"), g.props.get("note"))
                  for g in rec.snapshot())
    assert got == Counter(expected(to_ours, i) for i in range(n))
