"""The official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4) producing to a controller-mode broker set of three
replicas (``allAckInSyncStateSet``, the controller embedded in the NameServer) whose master is SIGKILLed, a slave
elected in its place and the killed one restarted (it rejoins as a slave): once in the suite, eight times over in the
slow run (issue 15).

The producer runs in a process of its own (``cpp_producer_process.py``) and keeps a ledger file of every outcome:
SEND_OK with the message id and body, or a failed send, which it sends again (the same seq and body). A C++ pull
consumer (``cpp_consumer_process.py``) reads throughout. At the end every acknowledged body is in the final master's
commitlog (the independent struct reader, every replica byte-identical to it) and was read by the consumer with the
id the producer was given; copies stored by the retry of a send whose answer was lost are counted.

What this client does through a failover, as observed and read in its source (librocketmq 1.x,
``MQClientFactory::updateTopicRouteInfo`` / ``tryToFindTopicPublishInfo``):
- it asks the NameServer for a topic's route every 30 s (a timer; never because a send failed) and otherwise only when
  its cached route has no queue on a broker set with a master; a failed send is retried (5 attempts in all) on the
  cached route, so after the master's death every send fails (connect refused, or the restarted old master, now a
  slave, refusing it) until that timer fires;
- its route then names the elected master as broker id 0 and sends resume there: the time to resume is the time to
  its next route poll (up to 30 s), not the election's.
So the failed sends are the ones in the window from the kill to the first SEND_OK after it, and the test asserts
exactly that: no send fails before the first kill nor after a window closed, and every window closes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from integration.controller import test_broker_failover as failover
from integration.controller._support import ControllerClient
from integration.controller.conftest import remoting  # noqa: F401  (the fixture: a remoting client)
from integration.controller.test_broker_failover import api, embedded, replica_set  # noqa: F401  (the fixtures)
from peer_helpers import cpp_log, ledger_seq
from servers import Broker, unique, wait_until
from test_cpp_client_broker import instance  # skips this module where the C++ client cannot load
from test_cpp_client_ha import ConsumerProcess

pytestmark = pytest.mark.timeout(900)

TIMEOUT_S = 60.0
# from a kill to the first SEND_OK after it: the election, then up to the client's 30 s route poll, on a busy machine
RESUME_TIMEOUT_S = 150.0
ACKED_PER_ROUND = 40  # acknowledged sends between two kills, once every replica is back in the SyncStateSet
REPLICAS_CONF = "allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n"
PRODUCER_SCRIPT = Path(__file__).with_name("cpp_producer_process.py")


@dataclass(frozen=True)
class Entry:
    """One line of the producer's ledger."""

    ok: bool
    seq: int
    at: float  # time.time() of the outcome
    msg_id: str  # SEND_OK: the id the library returned; a failure: what failed


def read_ledger(path: Path) -> list[Entry]:
    """Every complete line of the ledger, in order (the producer may be writing the last one)."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        kind, seq, at, what = line.split()[:4]
        entries.append(Entry(kind == "OK", int(seq), float(at), what))
    return entries


def acknowledged(path: Path) -> int:
    return sum(e.ok for e in read_ledger(path))


class ProducerProcess:
    """``cpp_producer_process.py`` running with its HOME (hence its C++ log) in ``home``."""

    def __init__(self, namesrv: str, topic: str, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.topic = topic
        self.ledger = home / "ledger.txt"
        group = unique("PG-cpp-failover")
        self.proc = subprocess.Popen([sys.executable, str(PRODUCER_SCRIPT), namesrv, group, topic, instance(group),
                                      str(self.ledger)], stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, HOME=str(home)))
        ready = self.proc.stdout.readline()
        assert ready.strip() == "READY", f"the producer process printed {ready!r}\n{self.log()}"

    def log(self) -> str:
        return cpp_log(self.home)[-3000:]

    def stop(self) -> int:
        """SIGTERM by PID (it finishes the send under way); the exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(TIMEOUT_S)


@dataclass(frozen=True)
class Kill:
    before: float  # time.time() just before the SIGKILL
    after: float  # once the killed process was reaped: a SEND_OK answered later came from another replica


def kill_masters(api, remoting, namesrv: str, rs: failover.ReplicaSet, producer: ProducerProcess,  # noqa: F811
                 kills: int) -> tuple[list[Kill], Broker]:
    """``kills`` times: once every replica is in the SyncStateSet and ACKED_PER_ROUND more sends were acknowledged,
    SIGKILL the master, wait for another to be routed as id 0, restart the killed one and wait for the producer's
    first SEND_OK after the kill. Returns the kills and the final master."""
    ctl = ControllerClient(remoting, namesrv)
    by_addr = {b.addr: b for b in rs.brokers.values()}
    topic = producer.topic
    done: list[Kill] = []
    for i in range(kills + 1):
        wait_until(lambda: failover.sync_state_set(ctl, rs) == set(rs.brokers), TIMEOUT_S, f"the full set, round {i}")
        target = acknowledged(producer.ledger) + ACKED_PER_ROUND
        wait_until(lambda t=target: acknowledged(producer.ledger) >= t, TIMEOUT_S, f"acknowledgements, round {i}")
        if i == kills:
            break
        master = by_addr[failover.route(api, namesrv, topic, rs.name)[0]]
        before = time.time()
        master.kill()
        kill = Kill(before, time.time())
        done.append(kill)
        wait_until(lambda m=master: failover.route(api, namesrv, topic, rs.name).get(0) not in (None, m.addr),
                   TIMEOUT_S, f"another master routed, round {i}")
        master.start_again()
        wait_until(lambda k=kill: resumed(read_ledger(producer.ledger), k), RESUME_TIMEOUT_S,
                   f"the C++ producer's first SEND_OK after kill {i + 1}")
    return done, by_addr[failover.route(api, namesrv, topic, rs.name)[0]]


def resumed(entries: list[Entry], kill: Kill) -> Entry | None:
    """The first SEND_OK answered after ``kill``."""
    return next((e for e in entries if e.ok and e.at > kill.after), None)


def in_window(e: Entry, kills: list[Kill], entries: list[Entry]) -> bool:
    """Whether ``e`` came from a kill to the first SEND_OK after it."""
    return any(k.before <= e.at <= resumed(entries, k).at for k in kills)


def run(api, remoting, namesrv: str, rs: failover.ReplicaSet, tmp_path: Path, kills: int) -> None:  # noqa: F811
    topic = failover.started_with_a_topic(api, namesrv, rs)
    consumer = ConsumerProcess("pull", namesrv, unique("CG-cpp-failover"), topic, tmp_path / "cpp-consumer")
    try:
        producer = ProducerProcess(namesrv, topic, tmp_path / "cpp-producer")
        try:
            done, final = kill_masters(api, remoting, namesrv, rs, producer, kills)
        finally:
            assert producer.stop() == 0, producer.log()
        entries = read_ledger(producer.ledger)
        acked = {e.seq: e.msg_id for e in entries if e.ok}
        try:
            wait_until(lambda: set(map(str, acked)) <= set(consumer.seqs()), TIMEOUT_S,
                       "the consumer to read every acknowledged message")
        except pytest.fail.Exception:
            pytest.fail(f"{len(set(map(str, acked)) - set(consumer.seqs()))} never read\n{consumer.log()}")
    finally:
        assert consumer.stop() == 0, consumer.log()

    # what the consumer read: every acknowledged seq, with the id the producer's SEND_OK carried among its copies
    ids_read: dict[str, set[str]] = defaultdict(set)
    for line in consumer.snapshot():
        fields = line.split()
        if fields[0] == "MSG":
            ids_read[fields[1]].add(fields[4])
    wrong_ids = [seq for seq, msg_id in acked.items() if msg_id not in ids_read[str(seq)]]
    assert not wrong_ids, f"read without the id of their SEND_OK: {wrong_ids[:10]}"

    # what the final master's files hold (every replica byte-identical to them)
    files = failover.identical_to(final, rs)
    stored = Counter(seq for u in files.units if u.topic == topic and (seq := ledger_seq(u.body)) is not None)
    lost = sorted(acked.keys() - stored.keys())
    duplicates = sum(n - 1 for n in stored.values())

    # failed sends only from a kill to the first SEND_OK after it
    outside = [e for e in entries if not e.ok and not in_window(e, done, entries)]
    failed = [[e.seq for e in entries if not e.ok and k.before <= e.at <= resumed(entries, k).at] for k in done]
    resume_s = [resumed(entries, k).at - k.before for k in done]
    print(f"\nC++ producer through {kills} master kills: acknowledged {len(acked)}, lost {len(lost)}, stored copies "
          f"beyond the first {duplicates}, failed sends per kill {[len(f) for f in failed]} (of messages "
          f"{[len(set(f)) for f in failed]}; {dict(Counter(e.msg_id for e in entries if not e.ok))}), seconds from "
          f"kill to the first SEND_OK after it {[round(s, 1) for s in resume_s]}, consumer read {len(ids_read)} "
          f"distinct")
    assert not lost, f"acknowledged messages missing from the final master: {lost[:20]}"
    assert not outside, f"sends failed outside a failover window: {outside[:10]}"
    assert sorted(acked) == list(range(len(acked)))  # the producer moves on only once a seq was acknowledged


def test_cpp_producer_keeps_producing_through_master_kills(embedded, replica_set, api, remoting,  # noqa: F811
                                                           tmp_path):
    """CI-sized: one kill (each costs up to the client's 30 s route poll); the slow run kills eight times."""
    run(api, remoting, embedded.addr, replica_set(REPLICAS_CONF), tmp_path, kills=1)


@pytest.mark.slow
def test_cpp_producer_keeps_producing_through_master_kills_long(embedded, replica_set, api, remoting,  # noqa: F811
                                                                tmp_path):
    run(api, remoting, embedded.addr, replica_set(REPLICAS_CONF), tmp_path, kills=8)
