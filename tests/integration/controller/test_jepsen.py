"""Jepsen-style acceptance run of automatic failover (issue 15): one broker set of three replicas with
allAckInSyncStateSet, its controllers three ``spark-mq controller`` processes sharing their state in a
real ZooKeeper, a producer keeping a ledger of every SEND_OK and a consumer group (our push consumer,
committing offsets) reading throughout, while faults hit the real processes by the PID we started:

- kill: SIGKILL of the current master; it restarts once another replica is routed as master;
- stop: SIGSTOP of the master until another replica is routed as master (so for longer than
  controllerHeartBeatTimeoutMills: the controller elected a successor), then SIGCONT. A send queued to
  it while it was frozen is among the first things it serves, still believing itself master: whatever
  it acknowledges must survive in the new history;
- controller: SIGKILL of the master and, at once, of the leading controller: another controller takes
  over and completes the election; the killed one restarts on its port and follows.

At the end: no acknowledged message missing from the final master's commitlog (the independent struct
reader) nor from what the consumers read; every replica's commitlog and epoch file are the final
master's; each master epoch had one master, and the epochs the controllers reported only grew.
Duplicates the consumers saw are counted and printed.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from integration.broker._support import send_header
from integration.ha.ledger import Audit, Ledger, body_of, key_of
from servers import Broker, ServerProcess, start_namesrv, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import SparkMQError
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import ResponseCode

from ._support import (
    FAST_CONF,
    TIMEOUT_S,
    ControllerClient,
    ReplicaInfo,
    ReplicaSet,
    identical_to,
    route,
    start_controller,
    started_with_a_topic,
    zookeeper_conf,
)

KILL, STOP, CONTROLLER = "kill", "stop", "controller"
REPLICAS_CONF = "allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\nsyncFlushTimeout=3000\n"
CONTROLLERS = 3
READERS = 2
READ_TIMEOUT_S = 120  # consumers catching up on everything once the faults are over (a loaded machine)
MASTER_EPOCH_LINE = re.compile(r"master of (\S+) in epoch (\d+) from commitlog offset")


class Controllers:
    """``CONTROLLERS`` controller processes sharing one ZooKeeper root; a killed one restarts on its port
    (the brokers' controllerAddr lists every port)."""

    def __init__(self, root: Path, conf: str, remoting: SyncRemotingClient) -> None:
        self.root = root
        self.conf = conf
        self.servers = [start_controller(root / f"controller{i}", conf) for i in range(CONTROLLERS)]
        self.clients = [ControllerClient(remoting, s.addr) for s in self.servers]

    @property
    def addrs(self) -> str:
        return ";".join(s.addr for s in self.servers)

    def _leading(self) -> int | None:
        for i, (server, client) in enumerate(zip(self.servers, self.clients, strict=True)):
            try:
                if server.alive() and client.metadata().get("isLeader") == "true":
                    return i
            except SparkMQError:
                continue
        return None

    def leader(self) -> int:
        """The index of the leading controller (waits for one)."""
        return wait_until(lambda: (i := self._leading()) is not None and (i,), TIMEOUT_S, "a leading controller")[0]

    def replica_info(self, name: str) -> ReplicaInfo | None:
        """The leading controller's record of broker set ``name`` (None while none leads or answers)."""
        i = self._leading()
        try:
            info = None if i is None else self.clients[i].replica_info(name)
        except SparkMQError:
            return None
        return info if info is not None and info.code == ResponseCode.SUCCESS else None

    def kill(self, i: int) -> None:
        self.servers[i].kill()

    def restart(self, i: int) -> None:
        self.servers[i] = start_controller(self.root / f"controller{i}", self.conf, port=self.servers[i].port)

    def stop(self) -> None:
        for s in self.servers:
            if s.alive():
                s.stop_cleanly()


class Readers:
    """A consumer group of ``READERS`` push consumers reading ``topic`` from its first message (routes
    refreshed every second, to follow the master changes), counting every ledger key they are given."""

    def __init__(self, namesrv: str, topic: str) -> None:
        group = unique("jepsen_readers")
        self._lock = threading.Lock()
        self.seen: Counter[str] = Counter()
        self.consumers = []
        for i in range(READERS):
            c = SyncPushConsumer(group, ClientConfig(namesrv, instance_name=f"reader{i}",
                                                     poll_name_server_interval_s=1.0), consume_from="first")
            c.subscribe(topic)
            c.register_listener(self._read)
            c.start()
            self.consumers.append(c)

    def _read(self, messages: list[StoredMessage]) -> bool:
        with self._lock:
            self.seen.update(k for m in messages if (k := key_of(m.body)) is not None)
        return True

    def keys(self) -> set[str]:
        with self._lock:
            return set(self.seen)

    def duplicates(self) -> int:
        with self._lock:
            return sum(c - 1 for c in self.seen.values())

    def close(self) -> None:
        for c in self.consumers:
            c.shutdown()


@dataclass
class Figures:
    """What a run did and saw."""

    faults: Counter = field(default_factory=Counter)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # (master epoch, master id) after each fault
    probes: Counter = field(default_factory=Counter)  # a frozen master's answers to the sends queued to it
    probes_acked: set[str] = field(default_factory=set)


@pytest.fixture
def jepsen_cluster(zookeeper, remoting, tmp_path):
    """The ZooKeeper-backed controllers, a NameServer and the three replicas (brokers told of every
    controller); stopped by PID afterwards."""
    controllers = Controllers(tmp_path, FAST_CONF + zookeeper_conf(zookeeper.hosts, f"/{unique('jepsen')}"),
                              remoting)
    namesrv: ServerProcess | None = None
    rs: ReplicaSet | None = None
    try:
        controllers.leader()
        namesrv = start_namesrv(tmp_path / "namesrv.log", verbose=False)
        rs = ReplicaSet(namesrv.addr, tmp_path, REPLICAS_CONF, controllers=controllers.addrs)
        yield namesrv.addr, controllers, rs
    finally:
        if rs is not None:
            for b in rs.brokers.values():
                if b.server.alive():
                    b.server.signal(signal.SIGCONT)
            rs.stop()
        if namesrv is not None:
            namesrv.stop_cleanly()
        controllers.stop()


def full_set(controllers: Controllers, rs: ReplicaSet) -> bool:
    info = controllers.replica_info(rs.name)
    return info is not None and info.sync_state_set == set(rs.brokers)


def probe(api: SyncMQClientAPI, addr: str, topic: str, key: str, figures: Figures) -> None:
    """One send straight to ``addr`` (a frozen master: it waits in its socket); SEND_OK is recorded."""
    try:
        status = api.send_message(addr, send_header(topic, 0, keys=key), body_of(key, 100)).status
    except SparkMQError as e:  # e.g. the connection closed as it switched role
        figures.probes[type(e).__name__] += 1
        return
    figures.probes[status.name] += 1
    if status == SendStatus.SEND_OK:
        figures.probes_acked.add(key)


def run_faults(api: SyncMQClientAPI, namesrv: str, controllers: Controllers, rs: ReplicaSet, topic: str,
               ledger: Ledger, faults: list[str], seed: int) -> Figures:
    """Each fault in turn, once every replica is back in the SyncStateSet and more sends were acknowledged."""
    rng = random.Random(seed)
    by_addr = {b.addr: b for b in rs.brokers.values()}
    ids = {b.addr: i for i, b in rs.brokers.items()}
    figures = Figures()
    for i, fault in enumerate([*faults, None]):
        wait_until(lambda: full_set(controllers, rs), TIMEOUT_S, f"the full SyncStateSet, round {i}")
        target = ledger.acknowledged() + rng.randrange(5, 40)
        wait_until(lambda t=target: ledger.acknowledged() >= t, TIMEOUT_S, f"acknowledgements, round {i}")
        if fault is None:
            break
        master = by_addr[route(api, namesrv, topic, rs.name)[0]]
        time.sleep(rng.random() / 4)  # a random moment between two sends, or within one
        controller = None
        if fault == STOP:
            master.server.signal(signal.SIGSTOP)
        else:
            master.kill()
            if fault == CONTROLLER:
                controller = controllers.leader()
                controllers.kill(controller)
        new = wait_until(lambda m=master: (a := route(api, namesrv, topic, rs.name).get(0)) not in (None, m.addr) and a,
                         TIMEOUT_S, f"another master routed after {fault}, round {i}")
        info = wait_until(lambda a=new: (r := controllers.replica_info(rs.name)) is not None
                          and r.master_id == ids[a] and r, TIMEOUT_S, f"the controllers naming it, round {i}")
        figures.epochs.append((info.master_epoch, ids[new]))
        if fault == STOP:
            sender = threading.Thread(target=probe, args=(api, master.addr, topic, f"probe{i}", figures))
            sender.start()
            time.sleep(1.0)  # lets the probe reach the frozen master's socket (its answer is what we check)
            master.server.signal(signal.SIGCONT)
            sender.join(TIMEOUT_S)
        else:
            if controller is not None:
                controllers.restart(controller)
            master.start_again()
        figures.faults[fault] += 1
    return figures


def masters_by_epoch(rs: ReplicaSet) -> dict[int, set[int]]:
    """Which replicas took mastership in which epoch, from their logs (kept across restarts)."""
    found: dict[int, set[int]] = {}
    for i, b in rs.brokers.items():
        for name, epoch in MASTER_EPOCH_LINE.findall(b.log()):
            if name == rs.name:
                found.setdefault(int(epoch), set()).add(i)
    return found


def epoch_entries(b: Broker) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a replica's epoch file."""
    lines = (b.store / "epochFileCheckpoint").read_text().split()
    return [(int(e), int(o)) for e, o in (line.split("-") for line in lines if "-" in line)]


def jepsen(api: SyncMQClientAPI, cluster, faults: list[str], seed: int) -> None:
    namesrv, controllers, rs = cluster
    started = time.monotonic()
    topic = started_with_a_topic(api, namesrv, rs)
    readers = Readers(namesrv, topic)
    try:
        ledger = Ledger(namesrv, topic, body_size=random.Random(seed).randrange(100, 900)).start()
        try:
            figures = run_faults(api, namesrv, controllers, rs, topic, ledger, faults, seed)
        finally:
            ledger.stop()
        final = {b.addr: b for b in rs.brokers.values()}[route(api, namesrv, topic, rs.name)[0]]
        log = identical_to(final, rs)  # every replica: the final master's commitlog and epoch file
        audit: Audit = ledger.audit(log)
        stored = {k for u in log.units if u.topic == topic and (k := key_of(u.body)) is not None}
        acked = ledger.acked | figures.probes_acked
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (acked & stored) - readers.keys() and time.monotonic() < deadline:
            time.sleep(0.5)  # the consumers reading every acknowledged message (asserted below)
        unread = sorted(acked - readers.keys())
        where = {k: (u.queue_id, u.queue_offset) for u in log.units if u.topic == topic
                 and (k := key_of(u.body)) in set(unread[:20])}
        dirty = sorted(readers.keys() - stored)
        print(f"\njepsen: faults {dict(figures.faults)}, {audit.summary()}, sent {ledger.sent}, failed attempts "
              f"{dict(ledger.attempts)}; consumers read {sum(readers.seen.values())} "
              f"({len(readers.keys())} distinct, duplicates {readers.duplicates()}, read but not in the final "
              f"history {len(dirty)}: {dirty[:5]}); frozen masters answered {dict(figures.probes)}; "
              f"epochs (epoch, master) {figures.epochs}; runtime {time.monotonic() - started:.0f} s")
    finally:
        readers.close()
    assert audit.lost == [], f"acknowledged messages missing from the final master: {audit.lost[:20]}"
    assert figures.probes_acked <= stored, f"a frozen master acknowledged {figures.probes_acked - stored}, then lost"
    assert unread == [], f"acknowledged messages no consumer read: {len(unread)}, e.g. (queue, offset) {where}"
    assert audit.acknowledged > 0
    assert figures.faults == Counter(faults)
    epochs = [e for e, _ in figures.epochs]
    assert epochs == sorted(set(epochs)), f"master epochs did not only grow: {figures.epochs}"
    masters = masters_by_epoch(rs)
    assert all(len(m) == 1 for m in masters.values()), f"an epoch with two masters: {masters}"
    assert {(e, m) for e, m in figures.epochs} <= {(e, next(iter(m))) for e, m in masters.items()}
    entries = epoch_entries(final)
    assert [e for e, _ in entries] == sorted({e for e, _ in entries}), entries
    assert [o for _, o in entries] == sorted(o for _, o in entries), entries


@pytest.mark.timeout(240)
def test_acknowledged_messages_survive_master_kills_freezes_and_a_controller_leader_kill(jepsen_cluster):
    """CI-sized: one fault of each kind."""
    api = SyncMQClientAPI(timeout=TIMEOUT_S)
    try:
        jepsen(api, jepsen_cluster, [KILL, STOP, CONTROLLER], seed=15)
    finally:
        api.close()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_acknowledged_messages_survive_master_kills_freezes_and_a_controller_leader_kill_long(jepsen_cluster):
    """20 kills, 5 freezes, 2 controller-leader kills (with the master's), in a random order."""
    faults = [KILL] * 20 + [STOP] * 5 + [CONTROLLER] * 2
    random.Random(1515).shuffle(faults)
    api = SyncMQClientAPI(timeout=TIMEOUT_S)
    try:
        jepsen(api, jepsen_cluster, faults, seed=1515)
    finally:
        api.close()
