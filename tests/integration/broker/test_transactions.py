"""Transactional messages against real processes (issue 16): half messages invisible until
committed, rollback, check-back (to a live producer of the group, after one was SIGKILLed),
``transactionCheckMax`` exhausted -> discarded and counted, and a broker SIGKILLed between the half
message and END_TRANSACTION: the outcome is decided by check-back, never lost, never delivered twice.

Replaces the refusal tests of tests/integration/broker/test_unserved_features.py (transactions are
served now); ``rejectTransactionMessage=true`` keeps a clear refusal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.results import PullStatus
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.remoting.bodies import HeartbeatData, ProducerConnection, ProducerData
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import RawConnection, pull_header, send_header
from .test_admin import scrape

QUEUES = 2
CHECK_MAX = 3
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TX_CONF = f"transactionTimeOut=1000\ntransactionCheckInterval=300\ntransactionCheckMax={CHECK_MAX}\n"
# the kill loops: checks counted while the producer has not heartbeated to the restarted broker yet
# must not use a transaction's checks up (that would be a discard by configuration, not a loss)
KILL_LOOP_CONF = TX_CONF.replace(f"transactionCheckMax={CHECK_MAX}", "transactionCheckMax=1000")
COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return TX_CONF


def metric(broker, event: str) -> float:
    return scrape(broker.metrics_url).get((f"spark_mq_transaction_{event}_total", ()), 0)


def bodies(api, addr: str, topic: str, queues: int = QUEUES) -> list[bytes]:
    """Every message of ``topic`` (a fresh read from offset 0 of each queue)."""
    out: list[bytes] = []
    for q in range(queues):
        offset = 0
        while True:
            r = api.pull_message(addr, pull_header(unique("reader"), topic, q, offset, max_nums=64))
            if r.status != PullStatus.FOUND:
                break
            out.extend(m.body for m in r.messages())
            offset = r.next_begin_offset
    return out


def make_topic(namesrv, broker, api, prefix: str) -> str:
    topic = unique(prefix)
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    return topic


class Checker:
    """A checker answering ``state``, counting its calls."""

    def __init__(self, state: LocalTransactionState) -> None:
        self.state = state
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, msg) -> LocalTransactionState:
        with self.lock:
            self.calls.append(msg.body.decode())
        return self.state


def test_commit_makes_the_half_message_visible_once_with_no_transaction_properties(namesrv, broker, api):
    topic = make_topic(namesrv, broker, api, "TxCommit")
    seen_during: list[list[bytes]] = []

    def execute(msg, arg):
        seen_during.append(bodies(api, broker.addr, topic))  # the half message is stored, not visible
        return COMMIT

    with SyncTransactionProducer(unique("tx_commit"), ClientConfig(namesrv_addr=namesrv), execute,
                                 Checker(COMMIT)) as producer:
        result = producer.send_message_in_transaction(Message(topic, b"paid", tags="order"), arg=1)
    assert result.local_state == COMMIT
    assert seen_during == [[]]
    wait_until(lambda: bodies(api, broker.addr, topic) == [b"paid"], timeout=30, what="the committed message")
    msgs = [m for q in range(QUEUES) for m in (api.pull_message(broker.addr, pull_header(
        unique("r"), topic, q, 0)).messages() if api.get_max_offset(broker.addr, topic, q) else [])]
    assert len(msgs) == 1 and msgs[0].tags == "order"
    assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & set(msgs[0].properties)
    assert msgs[0].properties["UNIQ_KEY"] == result.send_result.msg_id


def test_rollback_is_never_delivered(namesrv, broker, api):
    topic = make_topic(namesrv, broker, api, "TxRollback")
    before = metric(broker, "rollback")
    with SyncTransactionProducer(unique("tx_rollback"), ClientConfig(namesrv_addr=namesrv),
                                 lambda msg, arg: ROLLBACK, Checker(ROLLBACK)) as producer:
        result = producer.send_message_in_transaction(Message(topic, b"cancelled"))
        assert result.local_state == ROLLBACK
        wait_until(lambda: metric(broker, "rollback") == before + 1, timeout=30, what="the rollback")
    # a later transaction, committed by check-back: check rounds ran past the rolled-back one's timeout
    with SyncTransactionProducer(unique("tx_later"), ClientConfig(namesrv_addr=namesrv),
                                 lambda msg, arg: UNKNOW, Checker(COMMIT)) as producer:
        producer.send_message_in_transaction(Message(topic, b"later"))
        wait_until(lambda: bodies(api, broker.addr, topic) == [b"later"], timeout=60, what="the later one")
    assert bodies(api, broker.addr, topic) == [b"later"]


def test_unknown_then_check_back_commits(namesrv, broker, api):
    topic = make_topic(namesrv, broker, api, "TxCheck")
    checker = Checker(COMMIT)
    with SyncTransactionProducer(unique("tx_check"), ClientConfig(namesrv_addr=namesrv),
                                 lambda msg, arg: UNKNOW, checker) as producer:
        result = producer.send_message_in_transaction(Message(topic, b"undecided"))
        assert result.local_state == UNKNOW
        wait_until(lambda: bodies(api, broker.addr, topic) == [b"undecided"], timeout=60,
                   what="the message committed by check-back")
    assert checker.calls[0] == "undecided"
    assert bodies(api, broker.addr, topic) == [b"undecided"]


def test_check_max_exhausted_discards_and_counts(namesrv, broker, api):
    topic = make_topic(namesrv, broker, api, "TxDiscard")
    checker = Checker(UNKNOW)
    before = metric(broker, "discarded")
    with SyncTransactionProducer(unique("tx_discard"), ClientConfig(namesrv_addr=namesrv),
                                 lambda msg, arg: UNKNOW, checker) as producer:
        producer.send_message_in_transaction(Message(topic, b"forever unknown"))
        wait_until(lambda: metric(broker, "discarded") == before + 1, timeout=60, what="the discard")
    assert checker.calls == ["forever unknown"] * CHECK_MAX
    assert bodies(api, broker.addr, topic) == []
    assert b"forever unknown" in bodies(api, broker.addr, "TRANS_CHECK_MAX_TIME_TOPIC", 1)
    assert "discarded: no outcome after 3 checks" in broker.log()


# the check-back runs on the client's thread while the main thread writes: each line written whole under a lock
PRODUCER_SCRIPT = """
import sys, threading, time
from spark_mq.client.config import ClientConfig
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.message import Message
namesrv, group, topic = sys.argv[1:4]
out = threading.Lock()

def say(line):
    with out:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

def check(msg):
    say("CHECKED " + msg.body.decode())
    return LocalTransactionState.UNKNOW

p = SyncTransactionProducer(group, ClientConfig(namesrv_addr=namesrv), lambda m, a: LocalTransactionState.UNKNOW,
                            check).start()
r = p.send_message_in_transaction(Message(topic, b"from the doomed producer"))
say("SENT " + r.send_result.msg_id)
time.sleep(600)
"""


def test_check_back_to_a_killed_producer_then_to_a_live_one(namesrv, own_broker, api):
    """The group's first producer is checked back (it answers UNKNOW) and SIGKILLed; a second producer
    process of the group then gets the check and commits: delivered once."""
    b = own_broker("txdead", TX_CONF.replace(f"transactionCheckMax={CHECK_MAX}", "transactionCheckMax=100"))
    topic, group = make_topic(namesrv, b, api, "TxDeadProducer"), unique("tx_two")
    doomed = subprocess.Popen([sys.executable, "-c", PRODUCER_SCRIPT, namesrv, group, topic],
                              stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        # in either order: on a loaded machine the check-back (1 s after the send) may come before SENT is written
        told: set[str] = set()
        while len(told) < 2:
            line = doomed.stdout.readline()
            assert line, "the doomed producer ended before its send and check-back"
            told.add("SENT" if line.startswith("SENT ") else line.strip())
        assert told == {"SENT", "CHECKED from the doomed producer"}
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(30)
        checker = Checker(COMMIT)
        with SyncTransactionProducer(group, ClientConfig(namesrv_addr=namesrv), lambda m, a: COMMIT,
                                     checker) as live:
            live.publish_queues(topic)  # knows the broker: heartbeats to it
            wait_until(lambda: bodies(api, b.addr, topic) == [b"from the doomed producer"], timeout=60,
                       what="the doomed producer's message committed by the live one")
        assert checker.calls.count("from the doomed producer") >= 1
        assert bodies(api, b.addr, topic) == [b"from the doomed producer"]
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait()


def test_reject_transaction_message_refuses_clearly(own_broker, api):
    b = own_broker("txreject", TX_CONF + "rejectTransactionMessage=true\n")
    topic = unique("TxRejected")
    api.create_topic(b.addr, topic, QUEUES, QUEUES)
    with pytest.raises(MQClientError) as e:
        api.send_message(b.addr, send_header(topic, 0, props={"TRAN_MSG": "true", "PGROUP": "g"}), b"half")
    assert e.value.code == ResponseCode.NO_PERMISSION and "rejectTransactionMessage=true" in e.value.remark
    assert api.get_max_offset(b.addr, HALF_TOPIC, 0) in (0, None)


def test_a_batch_cannot_carry_a_transactional_message(broker, api):
    topic = unique("TxBatch")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    props = [encode_properties({"UNIQ_KEY": f"k{i}"}) for i in range(3)]
    props[1] = encode_properties({"UNIQ_KEY": "k1", "TRAN_MSG": "true"})
    with pytest.raises(MQClientError) as e:
        api.send_batch(broker.addr, MessageBatch.of(topic, 0, [b"a", b"b", b"c"], props), "g")
    assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in e.value.remark
    assert bodies(api, broker.addr, topic) == []


def test_broker_killed_between_half_and_end_is_decided_by_check_back_exactly_once(namesrv, own_broker, api):
    """A ledger of transactions, some committed and some rolled back before the crash; the broker is
    SIGKILLed inside the last local transaction (its END_TRANSACTION cannot arrive). After the restart
    every committed one is there once, no rolled-back one, and the last is committed by check-back."""
    b = own_broker("txkill", KILL_LOOP_CONF)
    topic = unique("TxKill")
    api.create_topic(b.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    ledger: dict[bytes, LocalTransactionState] = {}
    decided: dict[bytes, LocalTransactionState] = {}

    def execute(msg, arg):
        if arg == "kill":
            b.kill()
        return arg if isinstance(arg, LocalTransactionState) else COMMIT

    def check(msg):  # the application's records: what the local transaction decided
        return decided.get(msg.body, UNKNOW)

    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval_s=1)
    with SyncTransactionProducer(unique("tx_kill"), config, execute, check, retry_times=0) as producer:
        for i in range(10):
            state = COMMIT if i % 3 else ROLLBACK
            body = f"tx-{i}".encode()
            decided[body] = state
            assert producer.send_message_in_transaction(Message(topic, body), arg=state).local_state == state
            ledger[body] = state
        wait_until(lambda: api.get_max_offset(b.addr, OP_TOPIC, 0) == 10, timeout=30,
                   what="every decision's op record")
        last = b"tx-last"
        decided[last] = COMMIT
        producer.send_message_in_transaction(Message(topic, last), arg="kill")
        ledger[last] = COMMIT
        assert not b.server.alive()
        b.start_again()
        wait_until(lambda: last in bodies(api, b.addr, topic), timeout=60, what="the last one, by check-back")
    got = Counter(bodies(api, b.addr, topic))
    committed = {body for body, state in ledger.items() if state == COMMIT}
    assert set(got) == committed, "lost or rolled-back messages delivered"
    assert all(n == 1 for n in got.values()), f"duplicates: {got}"


def test_a_commit_whose_op_record_was_lost_in_a_crash_is_not_committed_again(namesrv, own_broker, api):
    """The commitlog as a SIGKILL between a commit's two appends leaves it: the half message, its
    committed copy in the topic (TRAN_PREPARED_QUEUE_OFFSET), no op record. After the restart the
    broker finds the copy and resolves the half message: the checker (which would say COMMIT) is not
    asked about it, and the topic holds it once."""
    b = own_broker("txlostop", KILL_LOOP_CONF)
    topic, group = unique("TxLostOp"), unique("tx_lost_op")
    api.create_topic(b.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    half = api.send_message(b.addr, send_header(topic, 0, uniq_key="tx-lost-op", group=group,
                                                props={"TRAN_MSG": "true", "PGROUP": group}), b"committed once")
    api.send_message(b.addr, send_header(topic, 0, uniq_key="tx-lost-op", group=group, props={
        "PGROUP": group, "TRAN_PREPARED_QUEUE_OFFSET": str(half.queue_offset)}), b"committed once")
    assert api.get_max_offset(b.addr, OP_TOPIC, 0) in (0, None)
    b.kill()
    b.start_again()
    wait_until(lambda: "1 committed before a crash lost their op record" in b.log(), timeout=30,
               what="the lost op record found at start")
    checker = Checker(COMMIT)
    with SyncTransactionProducer(group, ClientConfig(namesrv_addr=namesrv), lambda m, a: UNKNOW, checker) as p:
        p.send_message_in_transaction(Message(topic, b"later, checked back"))
        wait_until(lambda: b"later, checked back" in bodies(api, b.addr, topic), timeout=60, what="a later check")
    assert checker.calls == ["later, checked back"]
    assert Counter(bodies(api, b.addr, topic)) == {b"committed once": 1, b"later, checked back": 1}


BACKOFF_S = 0.1


def run_kill_loop(namesrv, b, api, transactions: int, kills: int) -> dict[str, int]:
    """A producer thread runs ``transactions`` transactions (every third rolled back) while the broker is
    SIGKILLed ``kills`` times and restarted. The application's records (``decided``: written by the local
    transaction, which runs only after the half message was stored) are the ledger; its checker answers
    from them (UNKNOW for a transaction it has no record of: a half message whose send failed stays
    unresolved, never delivered). Afterwards a fresh read of the topic holds
    exactly the committed ones, each once."""
    topic = unique("TxKillLoop")
    api.create_topic(b.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    decided: dict[bytes, LocalTransactionState] = {}
    failed: list[bytes] = []

    def execute(msg, arg):
        decided[msg.body] = arg
        return arg

    checked: list[bytes] = []

    def check(msg):  # no record yet: the local transaction may still be running (a loaded machine), so UNKNOW
        checked.append(msg.body)
        return decided.get(msg.body, UNKNOW)

    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval_s=1)
    with SyncTransactionProducer(unique("tx_loop"), config, execute, check, retry_times=0) as producer:
        def loop() -> None:
            for i in range(transactions):
                body = f"loop-{i}".encode()
                try:
                    producer.send_message_in_transaction(Message(topic, body), arg=ROLLBACK if i % 3 == 0 else COMMIT)
                except Exception:  # the broker is down: the application backs off
                    failed.append(body)
                    time.sleep(BACKOFF_S)

        sender = threading.Thread(target=loop)
        sender.start()
        for k in range(kills):
            wait_until(lambda k=k: len(decided) >= (k + 1) * transactions // (kills + 1), timeout=120,
                       what="transactions before the kill")
            b.kill()
            b.start_again()
        sender.join(300)
        assert not sender.is_alive()
        expected = {body for body, state in decided.items() if state == COMMIT}
        wait_until(lambda: set(bodies(api, b.addr, topic)) >= expected, timeout=120,
                   what=f"every committed transaction (check-back after the kills; {b.log().count('discarded:')} "
                        f"discarded)")
    got = Counter(bodies(api, b.addr, topic))
    lost = expected - set(got)
    extra = set(got) - expected
    duplicates = {body: n for body, n in got.items() if n > 1}
    assert not lost and not extra and not duplicates, (lost, extra, duplicates)
    return {"decided": len(decided), "committed": len(expected), "failed_sends": len(failed),
            "checked_back": len(set(checked))}


@pytest.fixture
def lone_cluster(tmp_path):
    """A NameServer and one broker of their own: while the broker is down, the producer must not find
    another broker through TBW102 (the module's broker) and send there."""
    ns = start_namesrv(tmp_path / "namesrv.log", verbose=False)
    b = Broker(ns.addr, tmp_path / "broker", KILL_LOOP_CONF, broker_name=unique("txloop"), verbose=False)
    yield ns.addr, b
    b.stop_if_running()
    ns.stop_cleanly()


def test_broker_sigkilled_while_transactions_run_loses_and_duplicates_nothing(lone_cluster, api):
    figures = run_kill_loop(*lone_cluster, api, transactions=60, kills=1)
    assert figures["committed"] > 0


@pytest.mark.slow
def test_broker_sigkilled_three_times_during_600_transactions(lone_cluster, api):
    figures = run_kill_loop(*lone_cluster, api, transactions=600, kills=3)
    print("kill loop:", figures)



def test_a_producer_announcing_its_group_only_in_its_periodic_heartbeat_is_checked_back(namesrv, broker, api):
    """A 4.x producer that sets no UNIQ_KEY and names its group only in its periodic HEART_BEAT (a
    Java client's comes every 30 s) stays connected: the check reaches it on the connection its half
    message came on within a few check rounds, before that heartbeat, and names the half message by
    its offset message id (RocketMQ's ``MessageExt.getMsgId()``)."""
    topic, group = make_topic(namesrv, broker, api, "TxForeign"), unique("tx_foreign")
    header = send_header(topic, 0, props={"TRAN_MSG": "true", "PGROUP": group}, group=group)
    with RawConnection(broker.addr) as producer:
        sent = producer.request(RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext_fields(),
                                                        b"no uniq key"))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        # due after transactionTimeOut (1 s); the heartbeat would come at 30 s, transactionCheckMax (3) is
        # used up after 3 rounds (0.9 s) with no producer reached
        check = producer.wait_request(RequestCode.CHECK_TRANSACTION_STATE, timeout=3.0)
        assert check is not None, f"no CHECK_TRANSACTION_STATE reached the producer:\n{broker.log()[-2000:]}"
        heartbeat = HeartbeatData("127.0.0.1@raw", [ProducerData(group)], [])
        listed = RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
        assert producer.request(listed).code == ResponseCode.SYSTEM_ERROR  # "the producer group[...] not exist"
        beat = producer.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.to_json()))
        assert beat.code == ResponseCode.SUCCESS, beat.remark
        (announced,) = ProducerConnection.from_json(producer.request(listed).body).connection_set
        again = producer.wait_request(RequestCode.CHECK_TRANSACTION_STATE, timeout=3.0)  # announced now
    assert (announced.client_id, announced.language) == ("127.0.0.1@raw", "PYTHON")
    fields = check.ext_fields
    assert fields["msgId"] == fields["offsetMsgId"] == fields["transactionId"]
    assert int(fields["commitLogOffset"]) == int(fields["offsetMsgId"][16:], 16)
    assert check.body and b"no uniq key" in check.body
    assert again is not None
    assert f"(group {group}) not sent" not in broker.log()
    assert "transaction check of None" not in broker.log()
