"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, librocketmq 1.0.1) against our NameServer and broker.

Real ``spark-mq namesrv`` and ``spark-mq broker`` processes (fixtures in conftest.py); the C++ producers and push
consumers run in this process (callbacks arrive on the library's threads) and every one is shut down in ``finally``.
Each client gets its own instance name: the library shares one client factory (connections, namesrv address,
registered groups) between all clients of a process with the same ``<pid>-<ip>@<instanceName>`` id, and two
consumers of one group need two ids.

What this old client does that shapes the tests:
- a new clustering group starts at the broker's answer to QUERY_CONSUMER_OFFSET, which is 0 for a queue that still
  starts at 0, so messages sent before the consumer starts are delivered;
- it commits offsets (oneway UPDATE_CONSUMER_OFFSET) from a 5 s timer and once more on shutdown;
- a broadcasting consumer keeps offsets in ``$HOME/.rocketmq_offsets/<ip>@<instance>/<group>/offsets.Json`` and,
  with no such file, starts at the queue's max offset: it only sees messages sent after its first pull is placed,
  so the broadcasting test sends probe messages to every queue until both consumers are seen receiving them (the
  shared-group test does the same until the queues are seen split between its two consumers: a message sent while
  a rebalance is under way may be delivered twice), then sends the messages under test;
- ``send_oneway`` and the offset commits set the oneway flag after encoding the frame, so on the wire they are
  ordinary requests: the broker answers them and the client drops the answers;
- a callback that raises makes the binding answer RECONSUME_LATER (a send-back to the broker), so callbacks here
  never raise: they record what arrived and the tests assert on it.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.remoting.bodies import GetConsumerListByGroupResponseBody, TopicRouteData
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import TRANSACTION_COMMIT_TYPE, EndTransactionRequestHeader, PullMessageRequestHeader

try:
    from rocketmq.client import Message, Producer, PushConsumer, SendStatus, hashing_queue_selector
    from rocketmq.ffi import MessageModel, dll
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

pytestmark = pytest.mark.timeout(90)

CPP_LOG_DIR = Path.home() / "logs" / "rocketmq-cpp"  # where the library logs (HOME when it first logs)
SETTLE_S = 0.5  # after everything expected arrived, how long to keep listening for duplicates
USER_PROPS = ("seq", "color", "note", "emoji", "città")  # every user property name the tests send
_instances = itertools.count()


# -- what was sent and what arrived ----------------------------------------------------------------------------------
@dataclass
class Sent:
    topic: str
    seq: str
    body: str
    keys: str
    tags: str
    props: dict[str, str]
    msg_id: str | None = None  # from the sync send result (the client-made UNIQ_KEY)


@dataclass
class Got:
    topic: str
    seq: str
    body: str
    keys: str
    tags: str
    props: dict[str, str]
    queue_id: int
    queue_offset: int
    msg_id: str


def make_message(topic: str, seq: str, i: int, tags: str = "", keys: str = "") -> tuple[Message, Sent]:
    """A message with several user properties (non-ASCII values and one non-ASCII name) and what was sent."""
    props = {"seq": seq, "color": ("red", "green", "blue")[i % 3], "note": f"grüße aus Zürich, 東京 №{i} ✓",
             "emoji": "🚀" * (1 + i % 3), "città": "Torino"}
    sent = Sent(topic, seq, f"body {seq} — ünïcödé 日本語 {i}", keys or f"key-{seq} order-{i}",
                tags or ("TagA", "TagB")[i % 2], props)
    m = Message(topic)
    m.set_keys(sent.keys)
    m.set_tags(sent.tags)
    m.set_body(sent.body)
    for name, value in props.items():
        m.set_property(name, value)
    return m, sent


class Inbox:
    """A push consumer's callback: records every message (never raises, see the module docstring)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.got: list[Got] = []
        self.errors: list[str] = []

    def __call__(self, msg) -> None:
        try:
            props = {}
            for name in USER_PROPS:
                value = msg.get_property(name)
                if value:
                    props[name] = value.decode()
            got = Got(msg.topic, props.get("seq", ""), msg.body.decode(), msg.keys.decode(), msg.tags.decode(),
                      props, msg.queue_id, msg.queue_offset, msg.id)
        except BaseException as e:
            with self.cond:
                self.errors.append(repr(e))
            return
        with self.cond:
            self.got.append(got)
            self.cond.notify_all()

    def snapshot(self, prefix: str = "") -> list[Got]:
        with self.cond:
            return [g for g in self.got if g.seq.startswith(prefix)]

    def seqs(self, prefix: str = "") -> list[str]:
        return [g.seq for g in self.snapshot(prefix)]

    def wait_for(self, predicate: Callable[[list[Got]], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.got), timeout)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def wait_all(inboxes: list[Inbox], seqs: set[str], timeout: float, each: bool = False) -> bool:
    """Until every seq arrived at some inbox (``each``: at every inbox)."""
    if each:
        return wait_until(lambda: all(seqs <= set(i.seqs()) for i in inboxes), timeout)
    return wait_until(lambda: seqs <= set().union(*(i.seqs() for i in inboxes)), timeout)


def assert_intact(got: Got, sent: Sent) -> None:
    assert (got.topic, got.body, got.keys, got.tags, got.props) == (sent.topic, sent.body, sent.keys, sent.tags,
                                                                    sent.props), got
    if sent.msg_id is not None:
        assert got.msg_id == sent.msg_id, got


def cpp_log_tail(chars: int = 3000) -> str:
    logs = sorted(CPP_LOG_DIR.glob(f"{os.getpid()}_rocketmq-cpp.log*"))
    return "".join(p.read_text(errors="replace") for p in logs)[-chars:]


def assert_broker_log_clean(broker) -> None:
    bad = [line for line in broker.log().splitlines() if '"level":"ERROR"' in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:20])


# -- C++ clients -----------------------------------------------------------------------------------------------------
def instance(name: str) -> str:
    return f"{name}-{next(_instances)}"


@contextmanager
def cpp_producer(namesrv: str, group: str) -> Iterator[Producer]:
    p = Producer(group)
    # Producer has no set_instance_name in this binding; the C function exists
    dll.SetProducerInstanceName(p._handle, instance(group).encode())
    p.set_namesrv_addr(namesrv)
    try:
        p.start()
        yield p
    finally:
        p.shutdown()


@contextmanager
def cpp_consumer(namesrv: str, group: str, name: str, topics: list[str], inbox: Inbox, orderly: bool = False,
                 model: MessageModel = MessageModel.CLUSTERING) -> Iterator[PushConsumer]:
    c = PushConsumer(group, orderly=orderly, message_model=model)
    c.set_instance_name(name)
    c.set_namesrv_addr(namesrv)
    for topic in topics:
        c.subscribe(topic, inbox)
    try:
        c.start()
        yield c
    finally:
        c.shutdown()


def send_sync(p: Producer, topic: str, seq: str, i: int, **kw: str) -> Sent:
    m, sent = make_message(topic, seq, i, **kw)
    result = p.send_sync(m)
    assert result.status == SendStatus.OK, result
    sent.msg_id = result.msg_id
    return sent


# -- admin requests with our own remoting client ---------------------------------------------------------------------
def invoke(admin: SyncRemotingClient, addr: str, code: int, fields: dict[str, object]) -> RemotingCommand:
    return admin.invoke(addr, RemotingCommand.request(code, fields))


def create_topic(admin: SyncRemotingClient, broker, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC, then wait until the NameServer routes ``queues`` queues (the broker re-registers
    in the background; a client that looked the topic up earlier would route it through TBW102)."""
    resp = invoke(admin, broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    def routed() -> bool:
        r = invoke(admin, broker.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return r.code == ResponseCode.SUCCESS and [
            q.write_queue_nums for q in TopicRouteData.from_json(r.body).queue_datas] == [queues]

    assert wait_until(routed, 10), f"the NameServer never routed {topic} with {queues} queues"


def consumer_ids(admin: SyncRemotingClient, broker, group: str) -> list[str]:
    resp = invoke(admin, broker.addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if resp.code != ResponseCode.SUCCESS:
        return []
    return GetConsumerListByGroupResponseBody.from_json(resp.body).consumer_id_list


def offsets(admin: SyncRemotingClient, broker, code: int, topic: str, queues: int, group: str = "") -> list[int]:
    out = []
    for q in range(queues):
        fields: dict[str, object] = {"topic": topic, "queueId": q}
        if group:
            fields["consumerGroup"] = group
        resp = invoke(admin, broker.addr, code, fields)
        out.append(int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1)
    return out


def wait_for_probes(p: Producer, topic: str, queues: int, inboxes: list[Inbox], each: bool, timeout: float = 30) -> int:
    """Send one probe to every queue per round until a round arrives as wanted: ``each`` (broadcasting) at every
    inbox exactly once; otherwise (clustering) exactly once overall with every inbox getting some (the queues are
    split). Returns the number of rounds sent."""
    deadline = time.monotonic() + timeout
    for rnd in itertools.count():
        seqs = {f"probe:{rnd}:{q}" for q in range(queues)}
        for q in range(queues):
            m, _ = make_message(topic, f"probe:{rnd}:{q}", q, tags="probe")
            assert p.send_orderly(m, q, queue_selector=hashing_queue_selector).status == SendStatus.OK
        wait_all(inboxes, seqs, 3, each=each)
        time.sleep(0.1)  # a duplicate would come right behind
        per_inbox = [Counter(i.seqs(f"probe:{rnd}:")) for i in inboxes]
        if each:
            ok = all(c == Counter(seqs) for c in per_inbox)
        else:
            ok = sum(per_inbox, Counter()) == Counter(seqs) and all(per_inbox)
        if ok:
            return rnd + 1
        assert time.monotonic() < deadline, (
            f"consumers never settled on {topic}: last round {per_inbox}\n{cpp_log_tail()}")
    raise AssertionError("unreachable")


# -- tests -----------------------------------------------------------------------------------------------------------
def test_sync_and_oneway_messages_arrive_intact_exactly_once(namesrv, broker):
    auto, created = "CppAutoTopic", "CppCreatedTopic"
    with SyncRemotingClient() as admin:
        create_topic(admin, broker, created, 3)
    sent: dict[str, Sent] = {}
    with cpp_producer(namesrv, "PG-intact") as p:
        for topic in (auto, created):  # the first send to ``auto`` creates it through TBW102
            for i in range(12):
                s = send_sync(p, topic, f"{topic}:sync:{i}", i)
                sent[s.seq] = s
            for i in range(8):
                m, s = make_message(topic, f"{topic}:oneway:{i}", i)
                p.send_oneway(m)  # no result; with a healthy broker every one must arrive all the same
                sent[s.seq] = s
    inbox = Inbox()
    with cpp_consumer(namesrv, "CG-intact", instance("intact"), [auto, created], inbox):
        arrived = wait_all([inbox], set(sent), 20)
        time.sleep(SETTLE_S)
    assert not inbox.errors, inbox.errors
    counts = Counter(inbox.seqs())
    assert arrived, f"missing {sorted(set(sent) - set(counts))}\n{cpp_log_tail()}"
    assert counts == Counter(set(sent)), f"duplicates: {[s for s, n in counts.items() if n > 1]}"
    for got in inbox.snapshot():
        assert_intact(got, sent[got.seq])
    queues = {t: {g.queue_id for g in inbox.snapshot(t)} for t in (auto, created)}
    assert queues[auto] <= set(range(4)) and queues[created] <= set(range(3)), queues  # 4 by default; 3 as created
    assert_broker_log_clean(broker)


def test_consumer_resumes_from_committed_offsets_after_restarts(namesrv, broker):
    topic, group, first_n, then_m = "CppResumeTopic", "CG-resume", 20, 12
    first: dict[str, Sent] = {}
    second: dict[str, Sent] = {}
    with cpp_producer(namesrv, "PG-resume") as p:
        for i in range(first_n):
            s = send_sync(p, topic, f"first:{i}", i)
            first[s.seq] = s
    inbox1 = Inbox()
    with SyncRemotingClient() as admin:
        ends = offsets(admin, broker, RequestCode.GET_MAX_OFFSET, topic, 4)
        assert sum(ends) == first_n, ends
        with cpp_consumer(namesrv, group, instance("resume"), [topic], inbox1):
            assert wait_all([inbox1], set(first), 15), cpp_log_tail()
            # the client commits from a 5 s timer: wait for it while it still runs (not only at shutdown)
            assert wait_until(lambda: offsets(admin, broker, RequestCode.QUERY_CONSUMER_OFFSET, topic, 4,
                                              group) == ends, 15, 0.2), cpp_log_tail()
    broker.restart()  # a clean restart: the committed offsets are persisted and reloaded
    table = json.loads((broker.store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert table[f"{topic}@{group}"] == {str(q): o for q, o in enumerate(ends)}, table
    with cpp_producer(namesrv, "PG-resume") as p:
        for i in range(then_m):
            s = send_sync(p, topic, f"second:{i}", i)
            second[s.seq] = s
    inbox2 = Inbox()
    with cpp_consumer(namesrv, group, instance("resume"), [topic], inbox2):
        arrived = wait_all([inbox2], set(second), 20)
        time.sleep(SETTLE_S)
    assert not inbox1.errors and not inbox2.errors, inbox1.errors + inbox2.errors
    assert arrived, f"lost after the restart: {sorted(set(second) - set(inbox2.seqs()))}\n{cpp_log_tail()}"
    counts2 = Counter(inbox2.seqs())
    assert {s: n for s, n in counts2.items() if s.startswith("second:")} == dict.fromkeys(second, 1), counts2
    redelivered = {s for s in counts2 if s.startswith("first:")}
    assert set(counts2) <= set(first) | set(second), counts2
    # at-least-once would allow redelivery of uncommitted messages, but every offset was committed (seen above)
    assert not redelivered, f"{len(redelivered)} of the first batch redelivered despite committed offsets"
    assert Counter(inbox1.seqs()) == Counter(set(first))
    for got in inbox2.snapshot():
        assert_intact(got, second[got.seq])
    assert_broker_log_clean(broker)


def test_orderly_consumer_sees_each_key_in_send_order(namesrv, broker):
    topic, group, keys, per_key = "CppOrderlyTopic", "CG-orderly", [f"K{j}" for j in range(6)], 10
    sent: dict[str, Sent] = {}

    def send_round(p: Producer, i: int) -> None:  # one message per key, keys interleaved
        for j, key in enumerate(keys):
            m, s = make_message(topic, f"{key}:{i}", i, keys=key)
            result = p.send_orderly(m, j, queue_selector=hashing_queue_selector)  # queue = key index % queues
            assert result.status == SendStatus.OK, result
            sent[s.seq] = s

    inbox = Inbox()
    # created up front: the C++ library's ordered send through TBW102's default route once lost the route between
    # two sends ("No route info of this topic", no route request sent); creation through TBW102 has its own test
    with SyncRemotingClient() as admin:
        create_topic(admin, broker, topic, 4)
    with cpp_producer(namesrv, "PG-orderly") as p:
        for i in range(per_key // 2):  # half before the consumer starts (it reads them in batches) ...
            send_round(p, i)
        with cpp_consumer(namesrv, group, instance("orderly"), [topic], inbox, orderly=True):
            for i in range(per_key // 2, per_key):  # ... half while it consumes
                send_round(p, i)
            arrived = wait_all([inbox], set(sent), 20)
            time.sleep(SETTLE_S)
    assert not inbox.errors, inbox.errors
    assert arrived, f"missing {sorted(set(sent) - set(inbox.seqs()))}\n{cpp_log_tail()}"
    got = inbox.snapshot()
    assert Counter(g.seq for g in got) == Counter(set(sent))
    for key in keys:
        order = [int(g.seq.split(":")[1]) for g in got if g.keys == key]
        assert order == list(range(per_key)), f"{key} arrived in order {order}"
    queue_of_key = {key: {g.queue_id for g in got if g.keys == key} for key in keys}
    assert all(len(q) == 1 for q in queue_of_key.values()), queue_of_key  # the selector kept each key on one queue
    for g in got:
        assert_intact(g, sent[g.seq])
    log = broker.log()
    assert "request code=41 " in log and "lang=CPP" in log, "the orderly consumer never sent LOCK_BATCH_MQ"
    assert_broker_log_clean(broker)


def test_two_consumers_of_one_group_split_the_queues(namesrv, broker):
    topic, group = "CppSharedTopic", "CG-shared"
    a, b = Inbox(), Inbox()
    names = [instance("shared-a"), instance("shared-b")]
    sent: dict[str, Sent] = {}
    with SyncRemotingClient() as admin, ExitStack() as stack:
        create_topic(admin, broker, topic, 8)
        p = stack.enter_context(cpp_producer(namesrv, "PG-shared"))
        stack.enter_context(cpp_consumer(namesrv, group, names[0], [topic], a))
        stack.enter_context(cpp_consumer(namesrv, group, names[1], [topic], b))
        assert wait_until(lambda: len(consumer_ids(admin, broker, group)) == 2, 10), consumer_ids(admin, broker, group)
        ids = consumer_ids(admin, broker, group)
        assert sorted(i.rpartition("@")[2] for i in ids) == sorted(names), ids
        wait_for_probes(p, topic, 8, [a, b], each=False)
        for i in range(40):
            s = send_sync(p, topic, f"shared:{i}", i)
            sent[s.seq] = s
        arrived = wait_all([a, b], set(sent), 20)
        time.sleep(SETTLE_S)
        assert len(consumer_ids(admin, broker, group)) == 2  # both still members at the end
    assert not a.errors and not b.errors, a.errors + b.errors
    assert arrived, f"missing {sorted(set(sent) - set(a.seqs()) - set(b.seqs()))}\n{cpp_log_tail()}"
    assert Counter(a.seqs("shared:")) + Counter(b.seqs("shared:")) == Counter(set(sent)), "not exactly once"
    qa, qb = {g.queue_id for g in a.snapshot("shared:")}, {g.queue_id for g in b.snapshot("shared:")}
    assert qa and qb and not qa & qb and qa | qb == set(range(8)), (qa, qb)
    for g in a.snapshot("shared:") + b.snapshot("shared:"):
        assert_intact(g, sent[g.seq])
    assert_broker_log_clean(broker)


def test_broadcasting_consumers_each_receive_every_message(namesrv, broker, tmp_path, monkeypatch):
    topic, group = "CppBroadcastTopic", "CG-broadcast"
    # the local offset files go to $HOME/.rocketmq_offsets: keep them in this test's tmp dir
    monkeypatch.setenv("HOME", str(tmp_path))
    a, b = Inbox(), Inbox()
    names = [instance("bcast-a"), instance("bcast-b")]
    sent: dict[str, Sent] = {}
    with SyncRemotingClient() as admin:
        create_topic(admin, broker, topic, 4)
        with ExitStack() as stack:
            p = stack.enter_context(cpp_producer(namesrv, "PG-broadcast"))
            for name, inbox in zip(names, (a, b), strict=True):
                stack.enter_context(cpp_consumer(namesrv, group, name, [topic], inbox,
                                                 model=MessageModel.BROADCASTING))
            wait_for_probes(p, topic, 4, [a, b], each=True)
            for i in range(30):
                s = send_sync(p, topic, f"bcast:{i}", i)
                sent[s.seq] = s
            arrived = wait_all([a, b], set(sent), 20, each=True)
            time.sleep(SETTLE_S)
        committed = offsets(admin, broker, RequestCode.QUERY_CONSUMER_OFFSET, topic, 4, group)
    assert not a.errors and not b.errors, a.errors + b.errors
    assert arrived, (f"missing at a: {sorted(set(sent) - set(a.seqs()))}, at b: {sorted(set(sent) - set(b.seqs()))}"
                     f"\n{cpp_log_tail()}")
    for inbox in (a, b):
        assert Counter(inbox.seqs("bcast:")) == Counter(set(sent))
        for g in inbox.snapshot("bcast:"):
            assert_intact(g, sent[g.seq])
    # broadcasting offsets stay with each client (written at shutdown), none reach the broker
    for name in names:
        assert list(tmp_path.glob(f".rocketmq_offsets/*@{name}/{group}/offsets.Json")), name
    assert committed == [0] * 4, committed  # QUERY_CONSUMER_OFFSET's answer for "never committed, starts at 0"
    broker.stop()  # persists the offset table
    offsets_file = broker.store / "config" / "consumerOffset.json"
    assert not offsets_file.exists() or group not in offsets_file.read_text()
    assert_broker_log_clean(broker)


def test_transactional_half_message_is_invisible_to_a_cpp_consumer_until_committed(namesrv, broker):
    """The C++ producer sets TRAN_MSG=true like any property (this binding has no transactional producer):
    the broker stores a half message, which the C++ push consumer never receives, while an ordinary message
    sent after it arrives; committed with END_TRANSACTION (as a transactional producer would send it), it is
    delivered once, intact."""
    topic, group = "CppTxTopic", "tx_peer_producer"
    with SyncRemotingClient() as admin:
        create_topic(admin, broker, topic, 2)
    with cpp_producer(namesrv, group) as p:
        m, half = make_message(topic, "half", 0)
        m.set_property("TRAN_MSG", "true")
        result = p.send_sync(m)
        assert result.status == SendStatus.OK, result
        half.msg_id = result.msg_id
        whole = send_sync(p, topic, "whole", 1)
    inbox = Inbox()
    with cpp_consumer(namesrv, "CG-tx", instance("tx"), [topic], inbox), SyncMQClientAPI() as api:
        assert wait_all([inbox], {"whole"}, 20), cpp_log_tail()
        assert inbox.seqs() == ["whole"]
        stored = api.pull_message(broker.addr, PullMessageRequestHeader(
            consumer_group="tx_reader", topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, queue_offset=0,
            max_msg_nums=32, sys_flag=0, commit_offset=0, suspend_timeout_millis=0, sub_version=0)).messages()
        (unit,) = [u for u in stored if u.properties.get("UNIQ_KEY") == half.msg_id]
        api.end_transaction(broker.addr, EndTransactionRequestHeader(
            producer_group=group, tran_state_table_offset=unit.queue_offset, commit_log_offset=unit.physical_offset,
            commit_or_rollback=TRANSACTION_COMMIT_TYPE, msg_id=half.msg_id, transaction_id=half.msg_id))
        assert wait_all([inbox], {"half"}, 20), cpp_log_tail()
        time.sleep(SETTLE_S)
    assert not inbox.errors, inbox.errors
    assert Counter(inbox.seqs()) == {"whole": 1, "half": 1}
    assert_intact(inbox.snapshot("half")[0], half)
    assert_intact(inbox.snapshot("whole")[0], whole)
    assert_broker_log_clean(broker)


def test_an_online_consumer_consumes_again_after_an_admin_reset(namesrv, broker):
    """INVOKE_BROKER_TO_RESET_OFFSET while a C++ consumer runs: the broker tells it (RESET_CONSUMER_CLIENT_OFFSET
    with RocketMQ's ResetOffsetBodyForC), it consumes everything again, and its commits follow (no overwrite)."""
    topic, group, n = "CppResetTopic", "CG-reset", 12
    sent: set[str] = set()
    with cpp_producer(namesrv, "PG-reset") as p:
        for i in range(n):
            sent.add(send_sync(p, topic, f"reset:{i}", i).seq)
    inbox = Inbox()
    with SyncRemotingClient() as admin, SyncMQClientAPI() as api:
        ends = offsets(admin, broker, RequestCode.GET_MAX_OFFSET, topic, 4)
        with cpp_consumer(namesrv, group, instance("reset"), [topic], inbox):
            assert wait_all([inbox], sent, 15), cpp_log_tail()
            assert wait_until(lambda: offsets(admin, broker, RequestCode.QUERY_CONSUMER_OFFSET, topic, 4,
                                              group) == ends, 15, 0.2), cpp_log_tail()
            reset = api.reset_offset_by_time(broker.addr, group, topic, 0)
            assert sorted(reset.offset_table.values()) == [0] * 4
            assert inbox.wait_for(lambda got: len(got) >= 2 * n, 20), f"{len(inbox.got)} of {2 * n}\n{cpp_log_tail()}"
            assert wait_until(lambda: offsets(admin, broker, RequestCode.QUERY_CONSUMER_OFFSET, topic, 4,
                                              group) == ends, 15, 0.2), cpp_log_tail()
            time.sleep(SETTLE_S)
    assert not inbox.errors, inbox.errors
    assert Counter(inbox.seqs()) == Counter({s: 2 for s in sent})
    assert_broker_log_clean(broker)
