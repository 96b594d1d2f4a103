"""A slave the controller promotes runs the master's background services (the role switch restarts the
broker's parts as a master): delayed and timer messages sent to the old master and due only after its
SIGKILL are delivered by the new one (once: the independent commitlog reader counts the copies), and a transaction the
old master could not settle (its producer answered UNKNOW) is committed by the new master's check-back."""

from __future__ import annotations

import collections
import threading

from integration.ha.commitlog_files import read_commitlog
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.message import Message

from ._support import ControllerClient
from .test_broker_failover import (  # noqa: F401 (api, embedded, replica_set: fixtures)
    TIMEOUT_S,
    api,
    elected,
    embedded,
    replica_set,
    started_with_a_topic,
    sync_state_set,
)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
# level 1: due after the kill (a few seconds after the sends; the premise below asserts nothing was delivered before
# it), whether before or after the election: a new master delivers what is overdue at once
DELAY_S = 8
SERVICES_CONF = (f"allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\nmessageDelayLevel={DELAY_S}s 30s\n"
                 "flushDelayOffsetInterval=300\ntransactionTimeOut=1000\ntransactionCheckInterval=300\n"
                 "transactionCheckMax=1000\nmappedFileSizeTimerLog=400000\n")
COUNT = 5
COMMIT, UNKNOW = LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.UNKNOW


def copies(store) -> collections.Counter:
    return collections.Counter((u.topic, u.body) for u in read_commitlog(store).units)


class Records:
    """The application's records the checker answers from: UNKNOW until the transaction is decided."""

    def __init__(self) -> None:
        self.decided = threading.Event()
        self.checks_after_decision = 0

    def check(self, msg) -> LocalTransactionState:
        if not self.decided.is_set():
            return UNKNOW
        self.checks_after_decision += 1
        return COMMIT


def test_a_promoted_slave_delivers_due_delayed_messages_and_checks_transactions_back(
        embedded, replica_set, api, remoting):  # noqa: F811 (fixtures imported above)
    namesrv = embedded.addr
    rs = replica_set(SERVICES_CONF)
    first = rs.brokers[1]
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    delayed = [f"delayed-{i}".encode() for i in range(COUNT)]
    timers = [f"timer-{i}".encode() for i in range(COUNT)]
    with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=2) as producer:
        for body in delayed:  # allAckInSyncStateSet: SEND_OK once every replica has it
            assert producer.send(Message(topic, body, delay_level=1)).status == SendStatus.SEND_OK
        for body in timers:
            timer = Message(topic, body, properties={"TIMER_DELAY_SEC": str(DELAY_S)})
            assert producer.send(timer).status == SendStatus.SEND_OK
    records = Records()
    # reaches the new master soon: heartbeats go to the routed master, the new one learned at the next route poll
    config = ClientConfig(namesrv_addr=namesrv, heartbeat_broker_interval_s=1, poll_name_server_interval_s=1)
    with SyncTransactionProducer(unique("tx_failover"), config, lambda msg, arg: UNKNOW, records.check) as tx:
        assert tx.send_message_in_transaction(Message(topic, b"undecided")).local_state == UNKNOW
        # SEND_OK under allAckInSyncStateSet: both slaves have it (the old master re-puts it at each UNKNOW check)
        assert all(copies(rs.brokers[i].store)[(HALF_TOPIC, b"undecided")] for i in (2, 3))
        first.kill()
        on_old = copies(first.store)
        # the premise: the old master had delivered neither before it died
        assert all(on_old[(SCHEDULE_TOPIC, b)] == 1 and on_old[(topic, b)] == 0 for b in delayed), on_old
        assert all(on_old[(TIMER_TOPIC, b)] == 1 and on_old[(topic, b)] == 0 for b in timers), on_old
        assert on_old[(HALF_TOPIC, b"undecided")] >= 1 and on_old[(topic, b"undecided")] == 0

        new_master = elected(api, namesrv, topic, rs)
        records.decided.set()
        wait_until(lambda: copies(new_master.store)[(topic, b"undecided")] == 1, TIMEOUT_S,
                   "the transaction committed by the new master's check-back")
    assert records.checks_after_decision >= 1

    def delivered() -> collections.Counter | None:
        found = copies(new_master.store)
        return found if all(found[(topic, b)] for b in delayed + timers) else None

    on_new = wait_until(delivered, TIMEOUT_S + DELAY_S, "the delayed and timer messages delivered by the new master")
    assert all(on_new[(topic, b)] == 1 for b in delayed + timers), on_new  # delivered once
    assert "Traceback" not in new_master.log()
