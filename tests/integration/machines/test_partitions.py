"""Jepsen-style run under network partitions (issue 29): one broker set of three replicas in controller mode, each
replica on a host of its own, two ``spark-mq controller`` processes on ZooKeeper (on hosts of their own), a
NameServer on its host; a ledger producer and a consumer group in the test process (the root namespace) and another
pair on a client host (``partition_client.py``), so a cut between the master and half the clients leaves the other
half working. Faults from a seeded ``fault_schedule.Schedule`` (replay: ``SPARK_MQ_FAULT_SEED``), each healed
before the next: the master cut from both controllers (it must stop acknowledging within its lease, and another
replica be elected), from its slaves, from half the clients; one-way cuts both ways between master and slaves;
latency and loss on the master; in the slow run SIGKILLs of the master mixed in.

The replicas run ``allAckInSyncStateSet=true`` with ``minInSyncReplicas=2``: a put waits for every SyncStateSet
member, and a master whose set shrank to itself (cut from its slaves, yet still heard by the controller) refuses
instead of acknowledging alone; with allAck alone it would keep acknowledging on one copy.

Checks, by readers independent of the broker (the struct commitlog reader, the brokers' log lines, the clients'
records), at the end:

- no acknowledged message of either ledger missing from the final master's commitlog;
- one master per epoch; the masters' acknowledging intervals (their master-lease log lines) never overlap, and
  every SEND_OK was answered within an acknowledging interval of the broker that stored it;
- every replica's commitlog and epoch file the final master's, after the final heal and catch-up;
- every acknowledged message given to both consumer groups; each group's committed offsets (QUERY_CONSUMER_OFFSET
  at the routed master, polled) never past a message the group had not been given yet, and never going back, not
  even at a master change: a master logs every commit in the commitlog (rmq_sys_CONSUMER_OFFSET_LOG_<broker>) and
  answers it only once the SyncStateSet has it, and a promoted slave replays that log before it serves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import time
from contextlib import ExitStack

import pytest
from consensus import ZooKeeperEnsemble, require_zookeeper
from fault_schedule import DEFAULT_KINDS, Schedule, Step, seed_from_env
from faults import GATEWAY, Faults, why_no_faults
from integration.controller._support import (
    TIMEOUT_S,
    ControllerClient,
    ReplicaSet,
    identical_to,
    route,
    started_with_a_topic,
    zookeeper_conf,
)
from integration.controller.test_jepsen import masters_by_epoch
from integration.ha.ledger import key_of
from servers import unique, wait_until

from spark_mq.common.errors import SparkMQError
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import ResponseCode

from ._cluster import REPO, Security, broker_host_conf, start_controller_on, start_namesrv_on
from ._partitions import (
    OffsetPolls,
    Side,
    committed_offsets_checked,
    lease_intervals,
    overlaps,
    redelivered,
)

REPLICAS = (1, 2, 3)
CONTROLLERS = ["ctl1", "ctl2"]
CLIENT_HOST = "client"
ROLES = ["zk", *CONTROLLERS, "namesrv", *(f"replica{i}" for i in REPLICAS), CLIENT_HOST]
QUEUES = 2  # started_with_a_topic's
LEASE_MS = 1500
REPLICAS_CONF = (f"allAckInSyncStateSet=true\nminInSyncReplicas=2\nmasterLeaseMills={LEASE_MS}\n"
                 "haMaxTimeSlaveNotCatchup=3000\nsyncFlushTimeout=3000\n")
# the schedule's hosts: the master and slaves are named when a fault is applied (the master changes)
MASTER, SLAVES = "master", ("slave_a", "slave_b")
GROUPS = {"controller": CONTROLLERS, "master": [MASTER], "slaves": list(SLAVES), "clients": [GATEWAY, CLIENT_HOST]}
ISOLATION = "controller|master"
HOLD_S = (2.0, 4.0)
SUITE_SEED = 29  # the suite run's schedule (SPARK_MQ_FAULT_SEED replays another)
ACKS_BETWEEN = 20  # acknowledged sends (root side) before each fault
KILL_SHARE = 0.3  # slow run: the share of faults during which the master is also SIGKILLed
READ_TIMEOUT_S = 120
CLIENT_SCRIPT = REPO / "tests" / "integration" / "machines" / "partition_client.py"
WALL_SLACK_S = 0.002  # the lease lines' times are in whole milliseconds


def replica(i: int) -> str:
    return f"replica{i}"


@dataclasses.dataclass
class Figures:
    """What a run did and measured."""

    faults: list[str] = dataclasses.field(default_factory=list)
    kills: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (replica, wall clock)
    # (old master, wall clock once cut, seconds from then to a new master named by the leading controller, whether the
    # old master was also killed)
    isolations: list[tuple[int, float, float, bool]] = dataclasses.field(default_factory=list)
    epochs: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (epoch, master) after each fault


class Cluster:
    """The machines, ZooKeeper, controllers, NameServer and the replica set (stopped by ``stack``)."""

    def __init__(self, network, tmp_path, stack: ExitStack) -> None:
        self.net = net = network(ROLES)
        security = Security(acl=False, tls=False, root=tmp_path / "security")
        security.prepare([])
        self.faults = Faults.on(net)
        zk = ZooKeeperEnsemble(tmp_path / "zookeeper", machines=[(net.hosts["zk"].address, net.launcher("zk"))])
        stack.callback(zk.stop)
        conf = zookeeper_conf(zk.hosts, f"/{unique('partitions')}")
        self.remoting = SyncRemotingClient()
        stack.callback(self.remoting.close)
        self.controllers = []
        for role in CONTROLLERS:  # ctl1 first: it leads
            server = start_controller_on(net, role, tmp_path / role, security, conf)
            stack.callback(server.stop_cleanly)
            self.controllers.append(ControllerClient(self.remoting, server.addr))
            if role == CONTROLLERS[0]:
                self.controllers[0].wait_leading()
        namesrv = start_namesrv_on(net, "namesrv", tmp_path / "namesrv", security)
        stack.callback(namesrv.stop_cleanly)
        self.namesrv = namesrv.addr
        self.rs = ReplicaSet(self.namesrv, tmp_path, REPLICAS_CONF, ";".join(c.addr for c in self.controllers),
                             replica_conf={i: broker_host_conf(net, replica(i), security) for i in REPLICAS},
                             launchers={i: net.launcher(replica(i)) for i in REPLICAS})
        stack.callback(self.rs.stop)
        self.api = security.api(self.namesrv)
        stack.callback(self.api.close)
        self.topic = started_with_a_topic(self.api, self.namesrv, self.rs)

    def record(self):
        """The leading controller's record of the set (None while none leads or answers)."""
        for ctl in self.controllers:
            try:
                info = ctl.replica_info(self.rs.name)
            except SparkMQError:
                continue
            if info.code == ResponseCode.SUCCESS:
                return info
        return None

    def settled(self) -> int | None:
        """The master's id once every replica runs, is in the SyncStateSet and the master is routed as such."""
        info = self.record()
        if info is None or info.sync_state_set != set(REPLICAS) or info.master_id is None:
            return None
        if not all(b.server.alive() for b in self.rs.brokers.values()):
            return None
        master = self.rs.brokers[info.master_id]
        routed = route(self.api, self.namesrv, self.topic, self.rs.name).get(0)
        return info.master_id if routed == master.addr else None

    def resolved(self, step: Step, master: int) -> Step:
        """``step`` with the schedule's master and slaves named by the hosts they are now."""
        slaves = [i for i in REPLICAS if i != master]
        names = {MASTER: replica(master), SLAVES[0]: replica(slaves[0]), SLAVES[1]: replica(slaves[1])}
        return dataclasses.replace(step, hosts=tuple(names.get(h, h) for h in step.hosts),
                                   others=tuple(names.get(h, h) for h in step.others))


def client_host(cluster: Cluster, tmp_path, stack: ExitStack, group: str) -> tuple[subprocess.Popen, dict]:
    """The client host's producer and consumer group ``group`` (partition_client.py); ``files``: stop, drain,
    out."""
    files = {name: tmp_path / f"client-{name}" for name in ("stop", "drain", "out")}
    log = stack.enter_context(open(tmp_path / "client.log", "wb"))
    proc = cluster.net.popen(CLIENT_HOST, [
        sys.executable, str(CLIENT_SCRIPT), f"--namesrv={cluster.namesrv}", f"--topic={cluster.topic}",
        f"--group={group}", f"--timeout={READ_TIMEOUT_S}", *(f"--{k}={v}" for k, v in files.items())],
        cwd=REPO, stderr=log,
        env=dict(os.environ, PYTHONPATH=f"{REPO / 'tests'}{os.pathsep}{REPO}"))
    stack.callback(lambda: proc.poll() is None and proc.kill())
    return proc, files


def run_faults(cluster: Cluster, schedule: Schedule, root: Side, kills: bool) -> Figures:
    """Each fault of ``schedule`` once the set is settled and more sends were acknowledged; held its scheduled time
    (an isolation of the master: at least until another is elected), healed; in the slow run the master is also
    SIGKILLed during a seeded share of the faults, and started again after the heal."""
    rng = random.Random(schedule.seed)
    figures = Figures()
    steps = schedule.steps
    for fault, heal in zip(steps[::2], steps[1::2], strict=True):
        master = wait_until(cluster.settled, TIMEOUT_S, f"the set settled before {fault}")
        target = root.ledger.acknowledged() + ACKS_BETWEEN
        wait_until(lambda t=target: root.ledger.acknowledged() >= t, TIMEOUT_S, f"acknowledgements before {fault}")
        kind = f"{fault.action} {','.join(fault.hosts)} | {','.join(fault.others)}"
        cluster.resolved(fault, master).apply(cluster.faults)
        cut = time.time()  # in force from here (a heartbeat sent before may still have been answered)
        killed = None
        if kills and rng.random() < KILL_SHARE:
            time.sleep(rng.uniform(0, 1))
            killed = ((record := cluster.record()) and record.master_id) or master
            cluster.rs.brokers[killed].kill()
            figures.kills.append((killed, time.time()))
        if fault.action == "partition" and set(fault.hosts) | set(fault.others) >= {MASTER, *CONTROLLERS}:
            wait_until(lambda m=master: (r := cluster.record()) is not None and r.master_id not in (None, m),
                       TIMEOUT_S, f"another master elected after {kind}")
            figures.isolations.append((master, cut, time.time() - cut, killed is not None))
        time.sleep(max(0.0, cut + heal.at_s - fault.at_s - time.time()))
        cluster.faults.heal()
        if killed is not None:
            cluster.rs.brokers[killed].start_again()
        figures.faults.append(kind)
        new = wait_until(cluster.record, TIMEOUT_S, "a controller's record")
        figures.epochs.append((new.master_epoch, new.master_id))
    return figures


def partitions(network, tmp_path, schedule: Schedule, kills: bool) -> None:
    """The run, its checks and figures; whatever fails prints the schedule with its seed (to replay it)."""
    try:
        checked_run(network, tmp_path, schedule, kills)
    except BaseException:
        print(schedule)
        raise


def checked_run(network, tmp_path, schedule: Schedule, kills: bool) -> None:
    started = time.monotonic()
    with ExitStack() as stack:
        cluster = Cluster(network, tmp_path, stack)
        rs = cluster.rs
        wait_until(cluster.settled, TIMEOUT_S, "every replica in sync")
        client_group = unique("partitions_client")
        proc, files = client_host(cluster, tmp_path, stack, client_group)
        root = Side(cluster.namesrv, cluster.topic, "root", unique("partitions_root")).start()
        stack.callback(root.close)
        polls = OffsetPolls(cluster.api, cluster.namesrv, cluster.topic, rs.name, [root.group, client_group], QUEUES)
        stack.callback(polls.close)
        figures = run_faults(cluster, schedule, root, kills)
        final_id = wait_until(cluster.settled, TIMEOUT_S, "the set settled after the last heal")
        root.stop_producing()
        files["stop"].touch()
        wait_until(lambda: files["out"].with_suffix(".acked").exists(), TIMEOUT_S, "the client host's producer")
        final = rs.brokers[final_id]
        log = identical_to(final, rs)  # every replica: the final master's commitlog and epoch file
        stored = {k for u in log.units if u.topic == cluster.topic and (k := key_of(u.body)) is not None}
        acked_root = root.ledger.acked_keys()
        acked_client = set(json.loads(files["out"].with_suffix(".acked").read_text()))
        acked = acked_root | acked_client
        files["drain"].write_text(json.dumps(sorted(acked)))  # the client host's group reads until it was given them
        wait_until(lambda: acked <= {p[3] for p in list(root.processed)}, READ_TIMEOUT_S,
                   "the root consumer group given every acknowledged message", interval=0.5)
        assert proc.wait(READ_TIMEOUT_S) == 0, (tmp_path / "client.log").read_text()[-4000:]
        now = time.time()
        report = root.report()
        client = json.loads(files["out"].read_text())
        polls.close()
    lost = sorted(acked - stored)
    in_log = [u for u in log.units if u.topic == cluster.topic and key_of(u.body) is not None]
    copies = len(in_log) - len({key_of(u.body) for u in in_log})
    addr_of = {b.addr: i for i, b in rs.brokers.items()}
    deaths = {i: [t for k, t in figures.kills if k == i] for i in REPLICAS}
    intervals = {i: lease_intervals(rs.brokers[i], deaths[i], now) for i in REPLICAS}
    outside = [(side["name"], a) for side in (report, client) for a in side["answers"]
               if not any(t1 - WALL_SLACK_S <= a[1] and a[0] <= t2 + WALL_SLACK_S
                          for t1, t2 in intervals[addr_of[a[2]]])]
    # from the cut to the end of the isolated master's acknowledging interval holding it (a killed one's: its death)
    stop_after = [(m, next((t2 - cut for t1, t2 in intervals[m] if t1 <= cut <= t2), None), killed)
                  for m, cut, _, killed in figures.isolations]
    processed = {report["group"]: report["processed"], client["group"]: client["processed"]}
    offsets = committed_offsets_checked(polls.seen, processed)
    unread_client = acked - {p[3] for p in client["processed"]}
    masters = masters_by_epoch(rs)
    to_new = [round(t, 2) for _, _, t, killed in figures.isolations if not killed]
    print(f"\npartitions (seed {schedule.seed}): {len(figures.faults)} faults, {len(figures.kills)} kills, "
          f"acknowledged {len(acked)} ({len(acked_root)} root, {len(acked_client)} client host), lost {len(lost)}, "
          f"duplicates in the commitlog {copies}, redelivered to consumers {redelivered(report['processed'])} root / "
          f"{redelivered(client['processed'])} client host; new master after an isolation {to_new} s; an isolated "
          f"master stopped acknowledging {[round(s, 3) for _, s, k in stop_after if s is not None and not k]} s after "
          f"the cut; epochs (epoch, master) {figures.epochs}; committed-offset polls {len(polls.seen)}, went back "
          f"{len(offsets.regressions)}; failed "
          f"attempts root {report['attempts']} client host {client['attempts']}; runtime "
          f"{time.monotonic() - started:.0f} s")
    problems = []
    if lost:
        problems.append(f"acknowledged messages missing from the final master: {lost[:20]}")
    if any(len(m) != 1 for m in masters.values()):
        problems.append(f"an epoch with two masters: {masters}")
    if found := overlaps(intervals):
        problems.append(f"two masters acknowledging at one moment: {found[:5]}")
    if outside:
        problems.append(f"SEND_OK answered outside the storing broker's acknowledging intervals: {outside[:5]}")
    if offsets.regressions:
        problems.append(f"committed offsets went back (group, queue, (wall, offset, master) before, after): "
                        f"{offsets.regressions[:5]}")
    if offsets.ahead:
        problems.append(f"committed offsets past messages the group had not been given: {offsets.ahead[:5]}")
    if unread_client:
        problems.append(f"acknowledged messages the client host's group was not given: {sorted(unread_client)[:20]}")
    if any(s is None or s > LEASE_MS / 1000 + WALL_SLACK_S for _, s, _ in stop_after):
        problems.append(f"an isolated master acknowledged past its lease after the cut: {stop_after}")
    assert not problems, "\n".join(problems)
    assert acked_root and acked_client
    assert len(figures.faults) == len(schedule.steps) // 2


@pytest.fixture
def can_partition():
    require_zookeeper()
    if reason := why_no_faults():
        pytest.skip(reason)


@pytest.mark.timeout(300)
def test_nothing_acknowledged_is_lost_and_no_two_masters_acknowledge_under_partitions(network, tmp_path,
                                                                                        can_partition):
    """CI-sized: one fault of each kind, in the order of a fixed seed (the suite repeats itself; the slow run
    draws a fresh seed each time)."""
    schedule = Schedule(seed_from_env(SUITE_SEED), DEFAULT_KINDS, GROUPS, hold_s=HOLD_S, gap_s=(0.0, 0.0))
    partitions(network, tmp_path, schedule, kills=False)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_nothing_acknowledged_is_lost_and_no_two_masters_acknowledge_under_partitions_and_kills_long(
        network, tmp_path, can_partition):
    """36 faults of every kind, a seeded share of them with a SIGKILL of the master."""
    schedule = Schedule(seed_from_env(), DEFAULT_KINDS, GROUPS, rounds=36, hold_s=HOLD_S, gap_s=(0.0, 0.0))
    partitions(network, tmp_path, schedule, kills=True)
