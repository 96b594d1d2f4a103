"""Real brokers acting on the controller's elections (enableControllerMode, the controller embedded in a
real NameServer with its state in a file): three replicas of one set, the master SIGKILLed, a slave
elected becomes master, registers as id 0 and takes our producer's sends; the old master restarted
rejoins as a slave of the new one and ends with a byte-identical commitlog (checked by the
independent reader)."""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
from broker._support import pull_header, send_header
from integration.ha.commitlog_files import read_commitlog
from integration.ha.ledger import Audit, Ledger
from servers import NAMESRV_READY, Broker, ServerProcess, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message
from spark_mq.remoting.codes import ResponseCode

from ._support import (
    FAST_CONF,
    TIMEOUT_S,
    ControllerClient,
    ReplicaSet,
    caught_up,
    identical_to,
    route,
    started_with_a_topic,
    sync_state_set,
)


@pytest.fixture
def embedded(tmp_path):
    """A NameServer running the controller (file state); elections are clean (from the SyncStateSet the
    masters keep)."""
    root = tmp_path / "ns"
    root.mkdir()
    (root / "namesrv.conf").write_text(f"enableControllerInNamesrv=true\ncontrollerStorePath={root / 'state'}\n"
                                       f"{FAST_CONF}")
    server = ServerProcess(["namesrv", "-c", str(root / "namesrv.conf"), "--port", "0"], root / "namesrv.log",
                           NAMESRV_READY, verbose=False)
    yield server
    server.stop_cleanly()


@pytest.fixture
def api():
    client = SyncMQClientAPI(timeout=10.0)
    yield client
    client.close()


@pytest.fixture
def replica_set(embedded, tmp_path):
    made: list[ReplicaSet] = []

    def make(extra_conf: str = "") -> ReplicaSet:
        made.append(ReplicaSet(embedded.addr, tmp_path, extra_conf))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def send(namesrv: str, topic: str, prefix: str, count: int) -> None:
    with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=2) as producer:
        for i in range(count):
            assert producer.send(Message(topic, f"{prefix}-{i}".encode())).status == SendStatus.SEND_OK


def elected(api, namesrv: str, topic: str, rs: ReplicaSet) -> Broker:
    """The replica other than 1 the route lists as id 0."""
    return wait_until(lambda: next((b for i, b in rs.brokers.items() if i != 1
                                    and route(api, namesrv, topic, rs.name).get(0) == b.addr), None),
                      TIMEOUT_S, "a slave elected, registered as id 0")


def rejoined(api, namesrv: str, topic: str, rs: ReplicaSet, new_master: Broker) -> None:
    """The old master restarted: listed as slave 1, and every replica byte-identical to the new master."""
    first = rs.brokers[1]
    first.start_again()
    wait_until(lambda: route(api, namesrv, topic, rs.name).get(1) == first.addr, TIMEOUT_S,
               "the old master listed as slave 1")
    identical_to(new_master, rs)


def test_a_killed_master_is_replaced_by_an_elected_slave_and_rejoins_as_its_slave(embedded, replica_set, api,
                                                                                   remoting):
    namesrv = embedded.addr
    rs = replica_set()
    topic = started_with_a_topic(api, namesrv, rs)
    send(namesrv, topic, "before", 20)
    end = read_commitlog(rs.brokers[1].store).end
    caught_up([rs.brokers[2], rs.brokers[3]], end)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")

    rs.brokers[1].kill()
    new_master = elected(api, namesrv, topic, rs)
    assert "becomes its master" in new_master.log()
    send(namesrv, topic, "after", 20)
    assert read_commitlog(new_master.store).end > end
    rejoined(api, namesrv, topic, rs, new_master)


def test_a_slave_leaves_a_frozen_deposed_master_for_the_elected_one(embedded, replica_set, api, remoting):
    """The master frozen (SIGSTOP) and kept so: a slave is elected, and the other slave, whose HA connection to
    the frozen master neither brings bytes nor closes, leaves it for the new master when the controller names
    it (as RocketMQ's slave does) and catches up with it, its epoch file the new master's."""
    namesrv = embedded.addr
    rs = replica_set()
    old = rs.brokers[1]
    topic = started_with_a_topic(api, namesrv, rs)
    send(namesrv, topic, "before", 10)
    caught_up([rs.brokers[2], rs.brokers[3]], read_commitlog(old.store).end)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    old.server.signal(signal.SIGSTOP)
    try:
        new_master = elected(api, namesrv, topic, rs)
        other = next(b for b in rs.brokers.values() if b not in (old, new_master))
        send(namesrv, topic, "after", 10)
        end = read_commitlog(new_master.store).end
        caught_up([other], end)
        assert read_commitlog(other.store).span(0, end) == read_commitlog(new_master.store).span(0, end)
        assert (other.store / "epochFileCheckpoint").read_text() == \
            (new_master.store / "epochFileCheckpoint").read_text()
    finally:
        old.server.signal(signal.SIGCONT)


def test_replicas_behind_a_master_that_writes_again_reach_its_new_end(embedded, replica_set, api):
    """The end of the long Jepsen run: a replica behind, and the master writes again after its end was first
    read (a consumer's offset commit, which a controller-mode master logs in its commitlog): the replicas pass
    that end without stopping at it, so the comparison must follow the master's end, and they are the master's."""
    namesrv = embedded.addr
    rs = replica_set()
    master, behind = rs.brokers[1], rs.brokers[3]
    topic = started_with_a_topic(api, namesrv, rs)
    send(namesrv, topic, "before", 10)
    caught_up([rs.brokers[2], behind], read_commitlog(master.store).end)
    ends: list[int] = []

    def commit_then_resume() -> None:
        time.sleep(1.0)  # the comparison below has read the master's end by now
        ends.append(read_commitlog(master.store).end)
        api.update_consumer_offset(master.addr, unique("readers"), topic, 0, 5)
        wait_until(lambda: read_commitlog(master.store).end > ends[0], TIMEOUT_S, "the commit logged")
        behind.server.signal(signal.SIGCONT)  # it reads what it was sent while frozen, the commit's record too

    behind.server.signal(signal.SIGSTOP)
    resume = threading.Thread(target=commit_then_resume)
    try:
        send(namesrv, topic, "while frozen", 10)  # ASYNC_MASTER: on the master and replica 2 alone
        resume.start()
        log = identical_to(master, rs)
    finally:
        behind.server.signal(signal.SIGCONT)
        resume.join()
    assert log.end > ends[0], "the offset commit was not logged after the end first read"
    assert any(u.topic.startswith("rmq_sys_CONSUMER_OFFSET_LOG") and u.offset >= ends[0] for u in log.units)


def test_a_rejoining_old_master_truncates_the_tail_no_replica_had(embedded, replica_set, api, remoting):
    namesrv = embedded.addr
    rs = replica_set()
    first, slaves = rs.brokers[1], [rs.brokers[2], rs.brokers[3]]
    topic = started_with_a_topic(api, namesrv, rs)
    send(namesrv, topic, "replicated", 10)
    replicated = read_commitlog(first.store).end
    caught_up(slaves, replicated)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    for b in slaves:  # frozen while the tail is stored, then killed and started again: what the master sent
        b.server.signal(signal.SIGSTOP)  # them meanwhile dies unread in their sockets (a slave appends every
    try:  # whole transfer it has received, even once the connection is gone)
        send(namesrv, topic, "tail", 10)  # ASYNC_MASTER: SEND_OK, on the master alone
    finally:
        first.kill()
        for b in slaves:
            b.kill()  # SIGKILL works on a stopped process
            b.start_again()
    tail = read_commitlog(first.store)
    assert tail.end > replicated

    new_master = elected(api, namesrv, topic, rs)
    send(namesrv, topic, "new", 10)
    rejoined(api, namesrv, topic, rs, new_master)
    assert "does not have it; replicating from" in first.log()  # the truncation it made
    assert read_commitlog(first.store).span(replicated, tail.end) != tail.span(replicated, tail.end)


def all_ack_in_sync(namesrv: str, replica_set, api, remoting, body: bytes) -> tuple[ReplicaSet, str, ControllerClient]:
    """An allAckInSyncStateSet set with a topic, ``body`` put on queue 0 and acknowledged, every replica in
    the SyncStateSet."""
    rs = replica_set("allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\nsyncFlushTimeout=1500\n")
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    assert api.send_message(rs.brokers[1].addr, send_header(topic, 0), body).status == SendStatus.SEND_OK
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both caught-up slaves in the set")
    return rs, topic, ctl


def test_all_ack_puts_wait_for_the_sync_state_set_which_shrinks_and_grows(embedded, replica_set, api, remoting):
    """allAckInSyncStateSet: a put waits for every member; a frozen member times puts out until it has lagged
    haMaxTimeSlaveNotCatchup, then leaves the set (puts go on without it) and rejoins once it caught up."""
    rs, topic, ctl = all_ack_in_sync(embedded.addr, replica_set, api, remoting, b"first")
    master, frozen = rs.brokers[1], rs.brokers[3]

    frozen.server.signal(signal.SIGSTOP)
    try:
        # replica 3 is still a member (for haMaxTimeSlaveNotCatchup): the put waits for it, in vain
        assert api.send_message(master.addr, send_header(topic, 0), b"waits").status == SendStatus.FLUSH_SLAVE_TIMEOUT
        wait_until(lambda: sync_state_set(ctl, rs) == {1, 2}, TIMEOUT_S, "the frozen slave out of the set")
        assert api.send_message(master.addr, send_header(topic, 0), b"without").status == SendStatus.SEND_OK
    finally:
        frozen.server.signal(signal.SIGCONT)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "the thawed slave back in the set")
    assert api.send_message(master.addr, send_header(topic, 0), b"all").status == SendStatus.SEND_OK
    end = read_commitlog(master.store).end
    caught_up([rs.brokers[2], frozen], end)
    assert "HA: SyncStateSet [1, 2] (was [1, 2, 3])" in master.log()


def kill_loop(api, remoting, namesrv: str, rs: ReplicaSet, kills: int, seed: int) -> tuple[Audit, Ledger, Broker]:
    """A ledger producer throughout; ``kills`` times: once every replica is in the SyncStateSet and a few
    more sends were acknowledged, SIGKILL the master, wait for another to be routed as id 0, restart the
    killed one (it rejoins as a slave). Returns the audit of the final master's commitlog."""
    rng = random.Random(seed)
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    by_addr = {b.addr: b for b in rs.brokers.values()}
    ledger = Ledger(namesrv, topic, body_size=rng.randrange(100, 900)).start()
    try:
        for i in range(kills + 1):
            wait_until(lambda: sync_state_set(ctl, rs) == set(rs.brokers), TIMEOUT_S, f"the full set, round {i}")
            target = ledger.acknowledged() + rng.randrange(5, 40)
            wait_until(lambda t=target: ledger.acknowledged() >= t, TIMEOUT_S, f"acknowledgements, round {i}")
            if i == kills:
                break
            master = by_addr[route(api, namesrv, topic, rs.name)[0]]
            time.sleep(rng.random() / 4)  # a random moment between two sends, or within one
            master.kill()
            wait_until(lambda m=master: route(api, namesrv, topic, rs.name).get(0) not in (None, m.addr), TIMEOUT_S,
                       f"another master routed, round {i}")
            master.start_again()
    finally:
        ledger.stop()
    final = by_addr[route(api, namesrv, topic, rs.name)[0]]
    return ledger.audit(identical_to(final, rs)), ledger, final


def test_master_kills_lose_no_put_acknowledged_by_the_whole_sync_state_set(embedded, replica_set, api, remoting):
    """CI-sized Jepsen-style run: allAckInSyncStateSet, two SIGKILLs of whichever replica is master (the second
    kills the promoted one; the slow run below kills twenty times)."""
    rs = replica_set("allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n")
    kills = 2
    audit, ledger, final = kill_loop(api, remoting, embedded.addr, rs, kills, seed=15)
    print(f"\nfailover loop: {kills} kills, {audit.summary()}, sent {ledger.sent}, "
          f"failed attempts {dict(ledger.attempts)}, final master {final.addr}")
    assert audit.lost == [], f"acknowledged messages missing from the final master: {audit.lost[:20]}"
    assert audit.acknowledged > 0


@pytest.mark.slow
def test_master_kills_lose_no_put_acknowledged_by_the_whole_sync_state_set_long(embedded, replica_set, api, remoting):
    rs = replica_set("allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n")
    kills = 20
    started = time.monotonic()
    audit, ledger, _ = kill_loop(api, remoting, embedded.addr, rs, kills, seed=1515)
    print(f"\nfailover loop: {kills} kills, {audit.summary()}, sent {ledger.sent}, failed attempts "
          f"{dict(ledger.attempts)}, runtime {time.monotonic() - started:.0f} s")
    assert audit.lost == [], f"acknowledged messages missing from the final master: {audit.lost[:20]}"


def test_a_slave_whose_history_needs_a_person_is_refused_and_keeps_its_files(embedded, replica_set, api, remoting):
    """A slave that knows a newer epoch than its master (the controller's state was reset, say) is not
    truncated: it logs what to decide and replicates nothing."""
    namesrv = embedded.addr
    rs = replica_set()
    topic = started_with_a_topic(api, namesrv, rs)
    send(namesrv, topic, "before", 5)
    slave = rs.brokers[3]
    caught_up([slave], read_commitlog(rs.brokers[1].store).end)
    slave.stop()
    before = read_commitlog(slave.store)
    # the same history plus a newer epoch from its end (CRC 0: unchecked, as RocketMQ's format allows)
    (slave.store / "epochFileCheckpoint").write_text(f"2\n0\n1-0\n99-{before.end}\n")
    send(namesrv, topic, "meanwhile", 5)
    slave.start_again()
    wait_until(lambda: "newer than its master's last epoch" in slave.log(), TIMEOUT_S, "the slave refusing")
    assert "HA: refusing master" in slave.log() and "Nothing was changed" in slave.log()
    after = read_commitlog(slave.store)
    assert after.span(0, after.end) == before.span(0, after.end) and after.end <= before.end
    assert (slave.store / "epochFileCheckpoint").read_text() == f"2\n0\n1-0\n99-{before.end}\n"


def test_puts_acknowledged_while_a_set_growth_is_unanswered_wait_for_the_joining_replica(embedded, replica_set, api,
                                                                                         remoting):
    """A caught-up slave's return to the SyncStateSet is asked of a controller that takes it but answers
    late (frozen): meanwhile the master must count the returning replica already (RocketMQ's
    synchronizing set: the union), or a put acknowledged without it is lost when that replica, a member
    for the controller, is the one elected."""
    namesrv = embedded.addr
    rs = replica_set("allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=3000\nsyncFlushTimeout=1500\n"
                     "controllerHeartBeatTimeoutMills=30000\n")  # nobody is presumed dead while the controller sleeps
    master, other, joining = rs.brokers[1], rs.brokers[2], rs.brokers[3]
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    joining.server.signal(signal.SIGSTOP)
    try:
        assert api.send_message(master.addr, send_header(topic, 0), b"waits").status == SendStatus.FLUSH_SLAVE_TIMEOUT
        wait_until(lambda: sync_state_set(ctl, rs) == {1, 2}, TIMEOUT_S, "the frozen slave out of the set")
        embedded.signal(signal.SIGSTOP)  # the controller: requests wait in its sockets
        try:
            joining.server.signal(signal.SIGCONT)
            wait_until(lambda: "cannot change the SyncStateSet to [1, 2, 3]" in master.log(), TIMEOUT_S,
                       "the master asking for the caught-up slave's return, unanswered")
            joining.server.signal(signal.SIGSTOP)
            status = api.send_message(master.addr, send_header(topic, 0), b"while-growing").status
        finally:
            embedded.signal(signal.SIGCONT)
        wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "the controller taking the grown set")
    finally:
        joining.kill()  # while frozen: what its socket holds is never written
    other.kill()  # before the master, so that the controller cannot elect it as it learns of the master's death
    wait_until(lambda: f"id 2 ({other.addr}) is gone" in embedded.log(), TIMEOUT_S, "the controller seeing 2 dead")
    master.kill()
    joining.start_again()
    wait_until(lambda: ctl.replica_info(rs.name).master_id == 3, TIMEOUT_S, "the remaining member elected")
    stored = [u.body for u in read_commitlog(joining.store).units if u.topic == topic]
    assert status != SendStatus.SEND_OK or b"while-growing" in stored, "acknowledged, then lost by a clean election"
    assert status == SendStatus.FLUSH_SLAVE_TIMEOUT


def test_consumers_read_only_what_the_whole_sync_state_set_has(embedded, replica_set, api, remoting):
    """allAckInSyncStateSet: a put the set does not have yet is not readable on the master (RocketMQ's
    confirmOffset): were it read, then lost with the master, a consumer's offset would be past messages
    the new master stores at those offsets, and it would never read them. Readable once the set has it
    (here: once the frozen member left the set)."""
    rs, topic, ctl = all_ack_in_sync(embedded.addr, replica_set, api, remoting, b"everywhere")
    master, frozen = rs.brokers[1], rs.brokers[3]

    def read() -> list[bytes]:
        result = api.pull_message(master.addr, pull_header("reader", topic, 0, 0, max_nums=64))
        return [m.body for m in result.messages()] if result.status == PullStatus.FOUND else []

    frozen.server.signal(signal.SIGSTOP)
    try:
        assert api.send_message(master.addr, send_header(topic, 0), b"not-everywhere").status \
            == SendStatus.FLUSH_SLAVE_TIMEOUT
        assert read() == [b"everywhere"]
        wait_until(lambda: sync_state_set(ctl, rs) == {1, 2}, TIMEOUT_S, "the frozen slave out of the set")
        assert read() == [b"everywhere", b"not-everywhere"]
    finally:
        frozen.server.signal(signal.SIGCONT)


def test_a_slave_of_a_set_whose_puts_wait_for_replicas_serves_no_pulls(embedded, replica_set, api, remoting):
    """Its log may run past what the set has (a restarted old master's tail, before it truncates it):
    read there, then dropped by the new history, a message would move a consumer's offset past the
    acknowledged ones the new master stores at those offsets. The refusal names the master to pull from;
    the master serves the same pull."""
    rs, topic, _ = all_ack_in_sync(embedded.addr, replica_set, api, remoting, b"everywhere")
    caught_up([rs.brokers[2]], read_commitlog(rs.brokers[1].store).end)
    with pytest.raises(MQClientError, match=f"is a slave.*pull from its master, {rs.brokers[1].addr}") as refused:
        api.pull_message(rs.brokers[2].addr, pull_header("reader", topic, 0, 0, max_nums=64))
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    result = api.pull_message(rs.brokers[1].addr, pull_header("reader", topic, 0, 0, max_nums=64))
    assert [m.body for m in result.messages()] == [b"everywhere"]
