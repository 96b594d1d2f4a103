"""A partitioned controller ensemble (issue 29's acceptance): three ZooKeeper members, two ``spark-mq controller``
processes on them (controllerType=zookeeper), a NameServer and a controller-mode broker set of three, each
process on a host of its own (``tests/netns.py``). The ZooKeeper ensemble is split 2|1 with the leading
controller on the minority side (``tests/faults.py``: zk3 and ctl1 cut from zk1, zk2 and ctl2; the brokers
and the test still reach both controllers). Then:

- the minority side elects nothing: zk3 stops serving, ctl1 steps down and answers every election and
  record request CONTROLLER_NOT_LEADER, to the brokers as to the test;
- the majority side's controller takes over with the broker set's record as it was;
- the master, SIGKILLed during the split, is replaced by the majority side's controller only;
- after the heal, every ZooKeeper member holds the same record, both controllers name the same leader,
  and the epochs only grew: nothing the majority decided is lost, nothing from the minority is in it.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest
from consensus import ZooKeeperEnsemble, require_zookeeper
from faults import Faults, why_no_faults
from integration.controller._support import (
    TIMEOUT_S,
    ControllerClient,
    ReplicaSet,
    route,
    started_with_a_topic,
    zookeeper_conf,
)
from servers import unique, wait_until

from spark_mq.controller.replicas_info import BrokerSetState
from spark_mq.controller.zookeeper_state_store import ZooKeeperStateStore
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import ResponseCode

from ._cluster import Security, broker_host_conf, start_controller_on, start_namesrv_on

ZOOKEEPERS = ["zk1", "zk2", "zk3"]
REPLICAS = (1, 2, 3)
ROLES = [*ZOOKEEPERS, "ctl1", "ctl2", "namesrv", *(f"replica{i}" for i in REPLICAS)]
MINORITY = ["zk3", "ctl1"]
MAJORITY = ["zk1", "zk2", "ctl2"]
STEP_DOWN_S = 5.0  # the controllers' ZooKeeper session is 2 s: the minority's leader gives up well within this
READ_SESSION_S = 4.0


def leads(ctl: ControllerClient) -> bool:
    return ctl.metadata().get("isLeader") == "true"


def minority_elects_nothing(ctl: ControllerClient, broker_name: str) -> None:
    """``ctl`` does not lead and answers an election and a record request CONTROLLER_NOT_LEADER."""
    assert not leads(ctl)
    assert ctl.elect(broker_name).code == ResponseCode.CONTROLLER_NOT_LEADER
    assert ctl.replica_info(broker_name).code == ResponseCode.CONTROLLER_NOT_LEADER


def records_on(member, root: str) -> dict[str, BrokerSetState]:
    """The broker sets' records as ZooKeeper member ``member`` alone holds them (synced with its leader)."""
    store = ZooKeeperStateStore(member.address, root, session_timeout_s=READ_SESSION_S)
    try:
        return {name: BrokerSetState.from_bytes(value) for name, (value, _) in store.load_all().items()}
    finally:
        store.close()


def test_a_zookeeper_quorum_split_elects_nothing_on_the_minority_side_and_loses_no_election_state(
        network, tmp_path):
    require_zookeeper()
    if reason := why_no_faults():
        pytest.skip(reason)
    net = network(ROLES)
    security = Security(acl=False, tls=False, root=tmp_path / "security")
    security.prepare([])
    faults = Faults.on(net)
    with ExitStack() as stack:
        ensemble = ZooKeeperEnsemble(tmp_path / "zookeeper", machines=[
            (net.hosts[zk].address, net.launcher(zk)) for zk in ZOOKEEPERS])
        stack.callback(ensemble.stop)
        root = f"/{unique('split')}"
        conf = zookeeper_conf(ensemble.hosts, root)
        remoting = SyncRemotingClient()
        stack.callback(remoting.close)
        servers = {}
        for role in ("ctl1", "ctl2"):  # ctl1 first: it leads
            servers[role] = start_controller_on(net, role, tmp_path / role, security, conf)
            stack.callback(servers[role].stop_cleanly)
            if role == "ctl1":
                ControllerClient(remoting, servers[role].addr).wait_leading()
        ctl1, ctl2 = (ControllerClient(remoting, servers[r].addr) for r in ("ctl1", "ctl2"))
        namesrv = start_namesrv_on(net, "namesrv", tmp_path / "namesrv", security)
        stack.callback(namesrv.stop_cleanly)
        rs = ReplicaSet(namesrv.addr, tmp_path, "", f"{ctl1.addr};{ctl2.addr}",
                        replica_conf={i: broker_host_conf(net, f"replica{i}", security) for i in REPLICAS},
                        launchers={i: net.launcher(f"replica{i}") for i in REPLICAS})
        stack.callback(rs.stop)
        api = security.api(namesrv.addr)
        stack.callback(api.close)
        topic = started_with_a_topic(api, namesrv.addr, rs)
        wait_until(lambda: ctl1.replica_info(rs.name).sync_state_set == set(REPLICAS), TIMEOUT_S,
                   "every replica in sync")
        before = ctl1.replica_info(rs.name)
        assert leads(ctl1) and not leads(ctl2)

        split = time.monotonic()
        faults.partition(MINORITY, MAJORITY)
        stack.callback(faults.heal)
        wait_until(lambda: not leads(ctl1), STEP_DOWN_S, "the minority's controller to step down")
        stepped_down = time.monotonic() - split
        wait_until(lambda: leads(ctl2), TIMEOUT_S, "the majority's controller to take over")
        took_over = time.monotonic() - split
        assert ensemble.members[2].mode() == "", "zk3 serves clients without a quorum"
        assert ctl2.replica_info(rs.name) == before, "the majority's controller took over another record"
        minority_elects_nothing(ctl1, rs.name)
        rs.brokers[1].kill()
        killed = time.monotonic()
        during = wait_until(lambda: (i := ctl2.replica_info(rs.name)).master_id not in (None, 1) and i, TIMEOUT_S,
                            "the majority's controller to elect another master")
        reelected = time.monotonic() - killed
        minority_elects_nothing(ctl1, rs.name)
        assert "electing a new one" not in servers["ctl1"].log(), "the minority's controller acted on the death"
        assert during.master_epoch > before.master_epoch
        new_master = rs.brokers[during.master_id]
        wait_until(lambda: route(api, namesrv.addr, topic, rs.name).get(0) == new_master.addr, TIMEOUT_S,
                   "the new master routed")

        faults.heal()
        healed = time.monotonic()
        wait_until(lambda: ensemble.members[2].mode() == "follower", TIMEOUT_S, "zk3 back in the ensemble")
        wait_until(lambda: ctl1.metadata().get("controllerLeaderAddress") == ctl2.addr, TIMEOUT_S,
                   "ctl1 following ctl2")
        rejoined = time.monotonic() - healed
        assert leads(ctl2) and not leads(ctl1)
        after = ctl2.replica_info(rs.name)
        assert after.master_id == during.master_id and after.master_epoch == during.master_epoch
        assert after.sync_state_set_epoch >= during.sync_state_set_epoch >= before.sync_state_set_epoch
        held = [records_on(m, root)[rs.name] for m in ensemble.members]
        assert held[0] == held[1] == held[2], f"the members hold different records: {held}"
        assert (held[0].master_id, held[0].master_epoch) == (after.master_id, after.master_epoch)
        print(f"\nquorum split 2|1: the minority's controller stepped down {stepped_down:.2f} s after the cut, the "
              f"majority's led at {took_over:.2f} s; master killed during the split, re-elected in "
              f"{reelected:.2f} s (epoch {before.master_epoch} -> {after.master_epoch}); rejoined {rejoined:.2f} s "
              "after the heal")
