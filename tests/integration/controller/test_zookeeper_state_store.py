"""The ZooKeeper store against real ZooKeeper servers (child processes): one leader among campaigning
controllers, fencing of a deposed leader by the ensemble, takeover after a SIGKILL of the leader
process with no acknowledged decision lost, a leader SIGSTOPped past its session, and an ensemble
that loses a member."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from consensus import ZooKeeperEnsemble
from kazoo.client import KazooClient
from servers import free_addr, unique, wait_until

from spark_mq.controller.state_store import NO_RECORD, StaleStateError, StateStoreError
from spark_mq.controller.zookeeper_state_store import ZooKeeperStateStore

SESSION_S = 2.0  # the campaigners' session timeout: a dead leader is replaced after about this long
TAKEOVER_TIMEOUT_S = 60.0
CAMPAIGNER = Path(__file__).with_name("campaigner.py")
KEY = "broker-a"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def root() -> str:
    return f"/{unique('controller')}"


class Leadership:
    """on_elected / on_lost of one store, counted."""

    def __init__(self) -> None:
        self.elected = 0
        self.lost = 0

    def campaign(self, store: ZooKeeperStateStore, address: str) -> None:
        store.campaign(address, self._on_elected, self._on_lost)

    def _on_elected(self) -> None:
        self.elected += 1

    def _on_lost(self) -> None:
        self.lost += 1

    @property
    def leading(self) -> bool:
        return self.elected > self.lost


class Campaigner:
    """A campaigner.py process (a stand-in controller) and what it printed."""

    def __init__(self, hosts: str, root: str, address: str, out: Path, mode: str = "write") -> None:
        self.address = address
        self.out = out
        with open(out, "wb") as f:
            self.proc = subprocess.Popen([sys.executable, str(CAMPAIGNER), hosts, root, address, KEY, str(SESSION_S),
                                          mode], stdout=f, stderr=subprocess.STDOUT)
        wait_until(lambda: "READY" in self.lines() or self.proc.poll() is not None, 60, f"{address} ready")
        assert self.proc.poll() is None, self.out.read_text()

    def lines(self, since: int = 0) -> list[str]:
        return self.out.read_bytes()[since:].decode(errors="replace").splitlines()

    def size(self) -> int:
        return self.out.stat().st_size

    def wrote(self, since: int = 0) -> list[str]:
        """The decisions whose compare-and-set this process saw acknowledged."""
        return [line.split()[1] for line in self.lines(since) if line.startswith("WROTE ")]

    def leads(self) -> bool:
        """What its last leadership callback said."""
        told = [line for line in self.lines() if line in ("ELECTED", "LOST")]
        return bool(told) and told[-1] == "ELECTED"

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)  # in case a test left it stopped
            self.signal(signal.SIGTERM)
            try:
                assert self.proc.wait(30) == 0, self.out.read_text()[-4000:]
            except subprocess.TimeoutExpired:
                self.kill()


def record(store: ZooKeeperStateStore) -> tuple[list[str], int]:
    value, version = store.load_all().get(KEY, (b"[]", NO_RECORD))
    return json.loads(value), version


def test_one_of_several_leads_followers_are_refused_and_everyone_reads_the_leader(zookeeper, root):
    observer = ZooKeeperStateStore(zookeeper.hosts, root, SESSION_S)  # reads only, never campaigns
    a, b = (ZooKeeperStateStore(zookeeper.hosts, root, SESSION_S) for _ in range(2))
    try:
        assert observer.leader_address() is None
        la, lb = Leadership(), Leadership()
        la.campaign(a, "10.0.0.1:9878")
        wait_until(lambda: la.leading, 30, "the first campaigner leads")
        lb.campaign(b, "10.0.0.2:9878")
        wait_until(lambda: b.leader_address() == "10.0.0.1:9878", 30, "the follower reads the leader")
        assert observer.leader_address() == "10.0.0.1:9878"
        assert a.compare_and_set(KEY, b"by a", NO_RECORD) == 0
        with pytest.raises(StaleStateError, match="does not lead"):
            b.compare_and_set(KEY, b"by b", 0)
        assert not lb.leading

        a.close()  # a controller that stops leaves the election at once
        wait_until(lambda: lb.leading, 30, "the second campaigner leads")
        assert observer.leader_address() == "10.0.0.2:9878"
        assert b.load_all() == {KEY: (b"by a", 0)}
        assert b.compare_and_set(KEY, b"by b", 0) == 1
    finally:
        for s in (a, b, observer):
            s.close()


def test_a_deposed_leaders_write_is_refused_by_the_ensemble(zookeeper, root):
    """The leader's election node vanishes (its session expired on the servers) before it notices:
    its next write, with the record's current version, is refused by ZooKeeper itself."""
    a, b = (ZooKeeperStateStore(zookeeper.hosts, root, SESSION_S) for _ in range(2))
    admin = KazooClient(zookeeper.hosts)
    admin.start(30)
    try:
        la, lb = Leadership(), Leadership()
        la.campaign(a, "10.0.0.1:9878")
        wait_until(lambda: la.leading, 30, "a leads")
        lb.campaign(b, "10.0.0.2:9878")
        wait_until(lambda: len(admin.get_children(f"{root}/election")) == 2, 30, "b's election node")
        assert a.compare_and_set(KEY, b"v0", NO_RECORD) == 0
        nodes = admin.get_children(f"{root}/election")
        (a_node,) = [n for n in nodes if admin.get(f"{root}/election/{n}")[0] == b"10.0.0.1:9878"]
        admin.delete(f"{root}/election/{a_node}")  # what the servers do when a's session expires

        with pytest.raises(StaleStateError, match="deposed"):
            a.compare_and_set(KEY, b"late write of a deposed leader", 0)
        wait_until(lambda: lb.leading, 30, "b takes over")
        assert b.load_all() == {KEY: (b"v0", 0)}
        assert b.compare_and_set(KEY, b"v1 by b", 0) == 1
    finally:
        admin.stop()
        admin.close()
        a.close()
        b.close()


def leader_kills(zookeeper: ZooKeeperEnsemble, root: str, tmp_path: Path, kills: int) -> list[float]:
    """Three campaigning processes write decisions while they lead; the leader is SIGKILLed ``kills``
    times (a killed one is started again, so three always campaign). Exactly one leads at a time,
    another leads and writes after about the session timeout, and the record holds every decision any
    process saw acknowledged, once each: each new leader's first write saw every earlier one.
    Returns the times from each SIGKILL to the next leader's first acknowledged write."""
    observer = ZooKeeperStateStore(zookeeper.hosts, root, SESSION_S)
    addresses = [f"127.0.0.1:{19000 + i}" for i in range(3)]
    procs = [Campaigner(zookeeper.hosts, root, a, tmp_path / f"{a}.0.out") for a in addresses]
    live = {p.address: p for p in procs}
    takeovers = []
    try:
        for kill in range(kills):
            leader = live[wait_until(observer.leader_address, 30, "a leader")]
            wait_until(lambda lead=leader: len(lead.wrote()) >= 3, 60, f"{leader.address} writing")
            assert [p for p in live.values() if p.leads()] == [leader]  # exactly one leads
            marks = {p.address: p.size() for p in live.values() if p is not leader}
            leader.kill()
            killed_at = time.monotonic()
            new = wait_until(lambda m=marks: next((live[a] for a, at in m.items() if live[a].wrote(at)), None),
                             TAKEOVER_TIMEOUT_S, "a new leader's first acknowledged write")
            takeovers.append(time.monotonic() - killed_at)
            assert observer.leader_address() == new.address
            live[leader.address] = Campaigner(zookeeper.hosts, root, leader.address,
                                              tmp_path / f"{leader.address}.{kill + 1}.out")
            procs.append(live[leader.address])
        for p in live.values():
            p.stop()

        decisions, version = record(observer)
        acknowledged = [d for p in procs for d in p.wrote()]
        assert len(decisions) == len(set(decisions)), "a decision was recorded twice"
        assert set(acknowledged) <= set(decisions), f"lost: {sorted(set(acknowledged) - set(decisions))}"
        assert version + 1 >= len(acknowledged) >= 3 * kills
        print(f"takeover after SIGKILL of the leader (session {SESSION_S:g}s), {kills} kills: median "
              f"{statistics.median(takeovers):.2f}s, max {max(takeovers):.2f}s; "
              f"{len(acknowledged)} decisions acknowledged, all in the record")
        return takeovers
    finally:
        for p in procs:
            p.stop()
        observer.close()


def test_three_controllers_one_leads_and_a_sigkilled_leader_is_replaced_losing_no_decision(zookeeper, root, tmp_path):
    leader_kills(zookeeper, root, tmp_path, kills=3)


@pytest.mark.slow
def test_twenty_sigkills_of_the_leading_controller(zookeeper, root, tmp_path):
    leader_kills(zookeeper, root, tmp_path, kills=20)


def test_a_leader_stopped_past_its_session_is_deposed_and_its_writes_are_refused(zookeeper, root, tmp_path):
    """SIGSTOP the leading process until another leads, then SIGCONT: it is told it lost, every write
    it attempts is refused (the new leader does not write, so the record's version alone would let
    them through), and the record is exactly what the other took over, with every decision the old
    leader saw acknowledged. With its new session it leads again once the other stops."""
    observer = ZooKeeperStateStore(zookeeper.hosts, root, SESSION_S)
    old = Campaigner(zookeeper.hosts, root, "127.0.0.1:19100", tmp_path / "old.out")
    new = None
    try:
        wait_until(lambda: len(old.wrote()) >= 5, 60, "the first leader writing")
        new = Campaigner(zookeeper.hosts, root, "127.0.0.1:19101", tmp_path / "new.out", mode="passive")
        old.signal(signal.SIGSTOP)
        wait_until(lambda: "ELECTED" in new.lines(), TAKEOVER_TIMEOUT_S, "the other process leads")
        at_takeover = record(observer)
        resumed_at = old.size()
        old.signal(signal.SIGCONT)
        wait_until(lambda: "LOST" in old.lines(resumed_at), 60, "the resumed leader told it lost")
        wait_until(lambda: sum(line.startswith("REFUSED") for line in old.lines(resumed_at)) >= 3, 60,
                   "the resumed leader's attempts refused")
        # a write in flight at the SIGSTOP may be acknowledged after the SIGCONT: it landed before the
        # takeover then (the fence), so the new leader has it; nothing the old one wrote is missing
        assert set(old.wrote()) <= set(at_takeover[0])
        assert record(observer) == at_takeover
        assert observer.leader_address() == new.address

        # it campaigned again with a new session: it leads once the other stops, and writes on top
        # of everything it took over
        new.stop()
        wait_until(lambda: "ELECTED" in old.lines(resumed_at) and old.wrote(resumed_at), TAKEOVER_TIMEOUT_S,
                   "the old leader leading and writing again")
        decisions, _ = record(observer)
        assert decisions[:len(at_takeover[0])] == at_takeover[0]
        assert set(old.wrote()) <= set(decisions)
    finally:
        for p in (old, new):
            if p is not None:
                p.stop()
        observer.close()


@pytest.mark.parametrize("victim", ["elected", "connected"])
def test_the_store_keeps_working_when_an_ensemble_member_dies(tmp_path, victim):
    """A three-member ensemble loses a member (SIGKILL): the one the ensemble elected (the others
    elect again), or the one the controller's session is connected to (the session moves: the
    controller gives leadership up while SUSPENDED and takes it again). The controller's records are
    all there, it leads again and writes again."""
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", size=3)
    store = ZooKeeperStateStore(ensemble.hosts, "/controller", SESSION_S * 2)
    try:
        leadership = Leadership()
        leadership.campaign(store, "127.0.0.1:19200")
        wait_until(lambda: leadership.leading, 30, "leadership")
        for i in range(10):
            store.compare_and_set(f"broker-{i}", b"before", NO_RECORD)
        if victim == "elected":
            dead = ensemble.leader()
        else:
            (dead,) = [m for m in ensemble.members if m.sessions()]
        dead.kill()
        assert ensemble.leader() is not dead
        if victim == "connected":
            wait_until(lambda: leadership.lost >= 1, 30, "leadership given up while the connection moves")
        wait_until(lambda: leadership.leading, 60, "leadership again")

        def write_again() -> bool:
            try:
                store.compare_and_set("broker-0", b"after", 0)
            except (StaleStateError, StateStoreError):
                pass  # not leading again yet, the connection still moving, or an earlier try landed
            try:
                return store.load_all()["broker-0"] == (b"after", 1)
            except StateStoreError:
                return False

        wait_until(write_again, 60, "a write through the surviving members")
        records = store.load_all()
        assert records["broker-0"] == (b"after", 1)
        assert {k: v for k, v in records.items() if k != "broker-0"} == {f"broker-{i}": (b"before", 0)
                                                                          for i in range(1, 10)}
        assert store.leader_address() == "127.0.0.1:19200"
    finally:
        store.close()
        ensemble.stop()


def test_an_unreachable_ensemble_is_a_clear_error(zookeeper):
    nobody = free_addr()
    with pytest.raises(StateStoreError, match=f"cannot connect to ZooKeeper at {nobody} within 1s"):
        ZooKeeperStateStore(nobody, connect_timeout_s=1.0)
