"""TransactionalMessageService on a real MessageStore, the clock injected (nothing sleeps): renewal
on check-back, a late answer about a renewed copy, duplicate answers, the state read back from the
op queue after a restart, and discarding past transactionCheckMax. Check requests go to a recording
connection (the network is the integration tests' part)."""

from __future__ import annotations

from unit_helpers import FakeClock

from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.transaction.check_back import CHECK_MAX_TIME_TOPIC, RemotingCheckBack
from spark_mq.broker.transaction.commit import real_batch
from spark_mq.broker.transaction.half_messages import HALF_TOPIC
from spark_mq.broker.transaction.service import OP_HALF_TOPIC, TransactionalMessageService, TransactionConfig
from spark_mq.client.results import decode_units_list
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.common.unit.decode import decode_message
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)

GROUP = "tx_group"
CONFIG = TransactionConfig(time_out_ms=1000, check_interval_ms=100, check_max=2)


class RecordingConnection:
    closed = False
    peer = "127.0.0.1:1"

    def __init__(self) -> None:
        self.sent = []

    def send_oneway(self, cmd) -> None:
        self.sent.append(cmd)


def service(store, clock, conn, tmp_path, metrics=None) -> TransactionalMessageService:
    s = TransactionalMessageService(store, lambda group: [RemotingCheckBack(conn)] if group == GROUP else [],
                                    metrics or BrokerMetrics(tmp_path), "broker-a", CONFIG,
                                    on_stored=lambda *a: None, ensure_topic=lambda name: None, clock=clock)
    s.load()
    return s


def half(store, svc, clock, body: bytes, key: str) -> tuple[int, int]:
    """Store a prepared message as the broker does; returns (queue offset, commitlog offset)."""
    batch = MessageBatch.of("orders", 1, [body], [encode_properties({"UNIQ_KEY": key, "TRAN_MSG": "true"})],
                            born_timestamp=int(clock() * 1000))
    h = svc.half_batch(batch, GROUP)
    result = store.put_messages(h)
    svc.stored_half(result.queue_offset, h)
    return result.queue_offset, int(result.physical_offsets[0])


def end(svc, queue_offset: int, phys: int, state: int) -> tuple[int, str]:
    return svc.end(EndTransactionRequestHeader(producer_group=GROUP, tran_state_table_offset=queue_offset,
                                               commit_log_offset=phys, commit_or_rollback=state))


def bodies(store, topic: str, queue_id: int = 1) -> list[bytes]:
    r = store.get_messages(topic, queue_id, 0, 100)
    return [m.body for m in decode_units_list(r.data)] if r.data else []


def test_a_late_answer_about_a_renewed_copy_commits_the_live_copy_once(make_store, tmp_path):
    clock, conn = FakeClock(), RecordingConnection()
    store = make_store(clock=clock)
    svc = service(store, clock, conn, tmp_path)
    q, phys = half(store, svc, clock, b"pay", "T1")
    assert bodies(store, "orders") == [] and svc.check() == 0  # not timed out yet
    clock.advance(2)
    assert svc.check() == 1
    (cmd,) = conn.sent
    assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE
    check = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
    assert check.tran_state_table_offset != q  # the renewed copy is asked about
    assert decode_message(cmd.body).topic == "orders"  # with its real topic, as RocketMQ sends it
    assert decode_message(cmd.body).properties["TRANSACTION_CHECK_TIMES"] == "1"

    assert end(svc, q, phys, TRANSACTION_COMMIT_TYPE)[0] == ResponseCode.SUCCESS  # the answer to the first send
    assert bodies(store, "orders") == [b"pay"]
    # the answer to the check, and a repeated one: already resolved
    assert end(svc, check.tran_state_table_offset, check.commit_log_offset, TRANSACTION_COMMIT_TYPE) == (
        ResponseCode.SUCCESS, "already resolved")
    assert end(svc, q, phys, TRANSACTION_ROLLBACK_TYPE) == (ResponseCode.SUCCESS, "already resolved")
    assert bodies(store, "orders") == [b"pay"]
    committed = decode_units_list(store.get_messages("orders", 1, 0, 1).data)[0]
    assert "TRAN_MSG" not in committed.properties and committed.properties["TRAN_PREPARED_QUEUE_OFFSET"] == str(q)
    clock.advance(10)
    assert svc.check() == 0 and not svc.live


def test_state_survives_a_restart_through_the_op_queue(make_store, tmp_path):
    clock, conn = FakeClock(), RecordingConnection()
    root = tmp_path / "store"
    store = make_store(root, clock=clock)
    svc = service(store, clock, conn, tmp_path)
    q1, p1 = half(store, svc, clock, b"committed", "A")
    q2, p2 = half(store, svc, clock, b"rolled back", "B")
    half(store, svc, clock, b"open", "C")
    end(svc, q1, p1, TRANSACTION_COMMIT_TYPE)
    end(svc, q2, p2, TRANSACTION_ROLLBACK_TYPE)
    assert store.get_max_offset(OP_HALF_TOPIC, 0) == 2
    store.shutdown()

    store = make_store(root, clock=clock)
    again = service(store, clock, conn, tmp_path)
    assert sorted(again.by_key) == ["C"]
    assert end(again, q1, p1, TRANSACTION_COMMIT_TYPE) == (ResponseCode.SUCCESS, "already resolved")
    clock.advance(2)
    assert again.check() == 1
    assert decode_message(conn.sent[-1].body).body == b"open"
    assert bodies(store, "orders") == [b"committed"]


def test_past_check_max_a_half_message_is_discarded_and_counted(make_store, tmp_path):
    clock, conn = FakeClock(), RecordingConnection()
    store = make_store(clock=clock)
    metrics = BrokerMetrics(tmp_path)
    svc = service(store, clock, conn, tmp_path, metrics)
    half(store, svc, clock, b"unknown", "U")
    clock.advance(2)
    sent = [svc.check() for _ in range(CONFIG.check_max + 2)]
    assert sent == [1] * CONFIG.check_max + [0, 0]
    assert metrics._transactions == {"half": 1, "check": CONFIG.check_max, "discarded": 1}
    assert bodies(store, CHECK_MAX_TIME_TOPIC, 0) == [b"unknown"]
    assert not svc.live and svc.progress == store.get_max_offset(HALF_TOPIC, 0)
    assert bodies(store, "orders") == []


def half_batch(store, svc, clock, bodies_: list[bytes], writer: str, queue_id: int, keys: list[str]) -> tuple[int, int]:
    """Store a prepared batch as the broker does (one transaction: ``__transactionId__`` = ``writer``);
    returns the first half message's (queue offset, commitlog offset)."""
    props = [encode_properties({"UNIQ_KEY": k, "TRAN_MSG": "true", "__transactionId__": writer}) for k in keys]
    batch = MessageBatch.of("orders", queue_id, bodies_, props, born_timestamp=int(clock() * 1000))
    h = svc.half_batch(batch, GROUP)
    result = store.put_messages(h)
    svc.stored_half(result.queue_offset, h)
    return result.queue_offset, int(result.physical_offsets[0])


def test_a_prepared_batch_is_one_transaction_checked_once_and_committed_once(make_store, tmp_path):
    """Two prepared batches of writer W (queues 1 and 2; the second request retried after a lost
    answer, so stored twice) and one of writer V: one check per writer; END about any message of W
    commits all of W's, each once and in order; V's rollback drops V's."""
    clock, conn = FakeClock(), RecordingConnection()
    store = make_store(clock=clock)
    svc = service(store, clock, conn, tmp_path)
    q1, p1 = half_batch(store, svc, clock, [b"w1", b"w2", b"w3"], "W", 1, ["k1", "k2", "k3"])
    for _ in range(2):
        half_batch(store, svc, clock, [b"w4", b"w5"], "W", 2, ["k4", "k5"])
    qv, pv = half_batch(store, svc, clock, [b"v1"], "V", 1, ["kv"])
    clock.advance(2)
    assert svc.check() == 2  # one check per transaction, not per message
    asked = sorted(decode_message(c.body).properties["__transactionId__"] for c in conn.sent)
    assert asked == ["V", "W"]
    assert end(svc, q1 + 1, p1 + 1, TRANSACTION_COMMIT_TYPE)[0] != ResponseCode.SUCCESS  # not a message's offset
    assert end(svc, q1, p1, TRANSACTION_COMMIT_TYPE) == (ResponseCode.SUCCESS, "")  # about the renewed original
    assert bodies(store, "orders", 1) == [b"w1", b"w2", b"w3"]
    assert bodies(store, "orders", 2) == [b"w4", b"w5"]
    assert end(svc, qv, pv, TRANSACTION_ROLLBACK_TYPE) == (ResponseCode.SUCCESS, "")
    assert end(svc, q1, p1, TRANSACTION_COMMIT_TYPE) == (ResponseCode.SUCCESS, "already resolved")
    assert bodies(store, "orders", 1) == [b"w1", b"w2", b"w3"] and not svc.live


def test_a_batch_commit_cut_short_by_a_crash_is_finished_at_start(make_store, tmp_path):
    """The commitlog as a SIGKILL between the puts of a batch commit leaves it: queue 1's committed
    copies stored, queue 2's not, no op record. The restart finds the committed prefix and commits
    the rest: each message once; a second restart changes nothing."""
    clock, conn = FakeClock(), RecordingConnection()
    root = tmp_path / "store"
    store = make_store(root, clock=clock)
    svc = service(store, clock, conn, tmp_path)
    half_batch(store, svc, clock, [b"a", b"b", b"c"], "W", 1, ["ka", "kb", "kc"])
    half_batch(store, svc, clock, [b"d", b"e"], "W", 2, ["kd", "ke"])
    live = decode_units_list(store.get_messages(HALF_TOPIC, 0, 0, 10).data)
    store.put_messages(real_batch(live[:3], "orders", 1))  # the first put of the commit, then the crash
    store.shutdown()

    for _ in range(2):
        store = make_store(root, clock=clock)
        again = service(store, clock, conn, tmp_path)
        assert not again.live
        assert bodies(store, "orders", 1) == [b"a", b"b", b"c"]
        assert bodies(store, "orders", 2) == [b"d", b"e"]
        store.shutdown()
    assert conn.sent == []  # decided without asking anyone
