"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4) against a SYNC_MASTER and its slave (issue 14's first
acceptance test): a producer keeps a ledger of every SEND_OK, a consumer (push, and the library's pull consumer)
consumes, the master is SIGKILLed mid-run and the consumer goes on consuming every acknowledged message from the slave;
the master restarts, production and consumption continue, and no acknowledged message is lost (duplicates are counted
and reported). Then an independent reader of the files (``struct``, not our store code) finds the slave's commitlog
byte-identical to the master's over everything it copied.

The consumer runs in a process of its own (``cpp_consumer_process.py``) so that it can be SIGSTOPped: stopped, it
falls behind by more than one pull per queue while the producer goes on, then the master dies, so what it reads after
SIGCONT can only come from the slave (whose log must show its pulls).

What this client (librocketmq 1.0.1) does, as observed and read in its source:
- it pulls each queue from the member its last pull answer suggested (suggestWhichBrokerId; the master at first), and
  once its route no longer lists that member, from another member of the broker set;
- its push consumer retries a failed pull at once, and while the dead master is still in its route those retries
  spin on the lock its route refresh also needs: the refresh that would drop the master can starve for a minute or
  more (seen here: 170 000 failed pulls). A push consumer that must ride out a master's death with this client reads
  from the slave throughout, its subscription group set to ``brokerId=1`` (RocketMQ's ``updateSubGroup -i 1``;
  both brokers with ``slaveReadEnable``), so the test's push consumer does. The pull consumer asks the NameServer for
  the queues before every round, drops the dead master at once, and runs with the default group;
- a SYNC_MASTER without its slave (the first moments after its restart, until the slave reconnects) answers
  SLAVE_NOT_AVAILABLE, as RocketMQ's does; the library takes that as a failed send and sends it again (up to 3 times
  in all), so one seq can be stored more than once: those copies are counted apart from redeliveries.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from integration.ha.commitlog_files import read_commitlog
from integration.ha.conftest import ha_pair  # noqa: F401  (the fixture: a master and its slave)
from peer_helpers import cpp_log
from servers import wait_until
from test_cpp_client_broker import (
    cpp_producer,
    create_topic,
    instance,
    make_message,
    offsets,
)

from spark_mq.remoting.bodies import SubscriptionGroupConfig
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

try:
    from rocketmq.client import SendStatus
except Exception as e:  # ImportError, or OSError when librocketmq cannot load
    pytest.skip(f"the rocketmq C++ client bindings cannot be imported ({e}); pip install rocketmq==0.4.4",
                allow_module_level=True)

pytestmark = pytest.mark.timeout(240)

QUEUES = 4
TIMEOUT_S = 60.0
BEFORE_KILL, AFTER_RESTART = 40, 40  # acknowledged sends before the kill, after the restart
BACKLOG = 200  # acknowledged while the consumer is stopped: more than one pull (32) of each queue
CONSUMER_SCRIPT = Path(__file__).with_name("cpp_consumer_process.py")
SLAVE_READ = "slaveReadEnable=true\n"
SLAVE_CONF = f"{SLAVE_READ}slaveSynchronizeInterval=1000\n"


@dataclass
class Ledger:
    """What the producer thread sent: every acknowledged seq, and how many sends failed (none of those counts)."""

    acked: list[str] = field(default_factory=list)
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def snapshot(self) -> set[str]:
        with self.lock:
            return set(self.acked)


def produce(producer, topic: str, ledger: Ledger, stop: threading.Event) -> None:
    """Send one message after another until ``stop``; a SEND_OK goes into the ledger, anything else
    (an exception while the master is down, another status) is counted as failed."""
    i = 0
    while not stop.is_set():
        seq = f"ha:{i}"
        msg, _ = make_message(topic, seq, i)
        try:
            result = producer.send_sync(msg)
        except Exception as e:  # the library raises for a send it gave up on
            with ledger.lock:
                ledger.failed += 1
                ledger.errors.append(type(e).__name__)
            stop.wait(0.2)
        else:
            with ledger.lock:
                if result.status == SendStatus.OK:
                    ledger.acked.append(seq)
                else:
                    ledger.failed += 1
                    ledger.errors.append(str(result.status))
        i += 1


def wait_consumed(consumer: ConsumerProcess, seqs: set[str], what: str) -> None:
    """Until the consumer received every one of ``seqs``; a failure shows how many are missing and the client's log."""
    try:
        wait_until(lambda: seqs <= set(consumer.seqs()), TIMEOUT_S, what)
    except pytest.fail.Exception:
        pytest.fail(f"{what}: {len(seqs - set(consumer.seqs()))} never arrived\n{consumer.log()}")


class ConsumerProcess:
    """``cpp_consumer_process.py`` running (its HOME, hence its C++ log, in ``home``); what it received, in order."""

    def __init__(self, mode: str, namesrv: str, group: str, topic: str, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.proc = subprocess.Popen([sys.executable, str(CONSUMER_SCRIPT), mode, namesrv, group, topic,
                                      instance(mode)], stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, HOME=str(home)))
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: "READY" in self.snapshot() or self.proc.poll() is not None, TIMEOUT_S,
                   "the C++ consumer process to start")
        assert self.proc.poll() is None, f"the consumer process exited {self.proc.returncode}\n{self.log()}"

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.strip())

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.lines)

    def received(self) -> list[tuple[str, int, int]]:
        """(seq, queueId, queueOffset) of every message received, in order."""
        return [(f[1], int(f[2]), int(f[3])) for f in (line.split() for line in self.snapshot()) if f[0] == "MSG"]

    def seqs(self) -> list[str]:
        return [seq for seq, _, _ in self.received()]

    def log(self) -> str:
        return cpp_log(self.home)[-3000:]

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> int:
        """SIGTERM by PID (a stopped process is continued first); the exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(TIMEOUT_S)
        finally:
            self.reader.join(TIMEOUT_S)


def slave_pulls(pair, topic: str) -> int:
    """How many PULL_MESSAGE requests of the C++ client for ``topic`` the slave logged."""
    return sum(1 for line in pair.slave.log().splitlines()
               if "request code=11 " in line and "lang=CPP" in line and topic in line)


@pytest.mark.parametrize(("mode", "group_reads_slave"), [("push", True), ("pull", False)])
def test_consumer_reads_every_acknowledged_message_from_the_slave_through_a_master_kill(
        ha_pair, api, namesrv, tmp_path, mode, group_reads_slave):  # noqa: F811
    pair = ha_pair("SYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SLAVE_CONF)
    topic, group = f"CppHaTopic-{mode}", f"CG-cpp-ha-{mode}"
    ledger, stop = Ledger(), threading.Event()
    with SyncRemotingClient() as admin:
        create_topic(admin, pair.master, topic, QUEUES)
        if group_reads_slave:
            body = SubscriptionGroupConfig(group, broker_id=1).to_json()
            resp = admin.invoke(pair.master.addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        # the slave copies topic and group from its master (slaveSynchronizeInterval): it serves and steers pulls then
        wait_until(lambda: -1 not in offsets(admin, pair.slave, RequestCode.GET_MAX_OFFSET, topic, QUEUES),
                   TIMEOUT_S, "the slave to know the topic")
        slave_groups = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        wait_until(lambda: not group_reads_slave or group.encode() in admin.invoke(pair.slave.addr, slave_groups).body,
                   TIMEOUT_S, "the slave to know the group")
    # the master reports its slave's lag once the slave is connected: until then a send is SLAVE_NOT_AVAILABLE
    wait_until(lambda: "slaveFallBehindMuch" in api.get_broker_runtime_info(pair.master.addr), TIMEOUT_S,
               "the slave to connect to the master's HA port")
    consumer = ConsumerProcess(mode, namesrv, group, topic, tmp_path / f"cpp-{mode}")
    try:
        with cpp_producer(namesrv, f"PG-cpp-ha-{mode}") as p:
            sender = threading.Thread(target=produce, args=(p, topic, ledger, stop), daemon=True)
            sender.start()
            try:
                wait_until(lambda: ledger.count() >= BEFORE_KILL and len(consumer.seqs()) >= BEFORE_KILL // 2,
                           TIMEOUT_S, "sends acknowledged and consumed before the kill")
                # the consumer stops (SIGSTOP) while the producer goes on: more acknowledged messages than one
                # pull per queue answers wait for it, and the master dies before it pulls them
                consumer.signal(signal.SIGSTOP)
                stopped_at = ledger.count()
                wait_until(lambda: ledger.count() >= stopped_at + BACKLOG, TIMEOUT_S, "a backlog acknowledged")
                served_before_kill = slave_pulls(pair, topic)
                pair.master.kill()
                acked_at_kill = ledger.snapshot()
                consumer.signal(signal.SIGCONT)
                wait_consumed(consumer, acked_at_kill, "every message acknowledged before the kill (master down)")
                consumed_while_down = len(set(consumer.seqs()))
                pair.master.start_again()
                restarted_at = ledger.count()
                wait_until(lambda: ledger.count() >= restarted_at + AFTER_RESTART, TIMEOUT_S,
                           "sends acknowledged after the master restarted")
            finally:
                stop.set()
                sender.join(TIMEOUT_S)
        acked = ledger.snapshot()
        wait_consumed(consumer, acked, "every acknowledged message")
    finally:
        assert consumer.stop() == 0, consumer.log()
    received = consumer.received()
    counts = Counter(seq for seq, _, _ in received)
    lost = acked - set(counts)
    # a duplicate is either one stored message delivered again (the same queue offset) or a copy the library stored
    # by resending a failed send (the same seq at another offset): counted apart
    redelivered = sum(n - 1 for n in Counter((q, o) for _, q, o in received).values())
    resent = len(set(received)) - len(counts)
    print(f"{mode}: acknowledged {len(acked)} ({len(acked_at_kill)} before the kill), failed sends {ledger.failed} "
          f"{dict(Counter(ledger.errors))}, consumed {len(counts)} distinct ({consumed_while_down} by the master's "
          f"restart), duplicates {len(received) - len(counts)} ({redelivered} redelivered, {resent} resent copies), "
          f"lost {len(lost)}")
    assert not lost, sorted(lost)
    if group_reads_slave:  # the consumer followed its group's brokerId to the slave before the kill
        assert served_before_kill, "the slave served no PULL_MESSAGE before the kill"
    assert slave_pulls(pair, topic) > served_before_kill, "the slave served no PULL_MESSAGE after the kill"

    # once the master reports its slave caught up, both commitlogs are byte-identical (the files, read with struct,
    # after clean stops), and the slave's holds every acknowledged message
    wait_until(lambda: api.get_broker_runtime_info(pair.master.addr).get("slaveFallBehindMuch") == "0", TIMEOUT_S,
               "the slave to catch up with the restarted master")
    for broker in (pair.slave, pair.master):
        broker.stop()
    m, s = read_commitlog(pair.master.store), read_commitlog(pair.slave.store)
    assert 0 < s.end == m.end and s.files.keys() == m.files.keys(), (s.end, m.end)
    assert s.span(0, s.end) == m.span(0, m.end)
    stored = Counter(u.body.decode().split()[1] for u in s.units if u.topic == topic)
    assert acked <= set(stored), sorted(acked - set(stored))
    assert resent == sum(n - 1 for seq, n in stored.items() if seq in counts)  # the copies are in the files
