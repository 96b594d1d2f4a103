"""Controller processes sharing their state in a real ZooKeeper (controllerType=zookeeper): one leads, the
others answer CONTROLLER_NOT_LEADER naming the leader; a SIGKILLed leader's successor, and a restarted
controller (on ZooKeeper or on its own file), have every decision; a leader frozen past its session
is deposed and follows when it returns; a second controller on one state file is refused."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from servers import unique, wait_until

from spark_mq.remoting.codes import ResponseCode

from ._support import FAST_CONF, ControllerClient, Heartbeats, start_controller
from .conftest import replica_set


@pytest.fixture(params=["zookeeper", "file"])
def own_store(request) -> str:
    """The controller keys of a restarting controller's store: its own root in ZooKeeper, or its own file."""
    return request.getfixturevalue("shared_store") if request.param == "zookeeper" else ""


def _decide_something(api: ControllerClient, name: str) -> None:
    """A set with master 1 (epoch 1) and SyncStateSet {1, 2} (epoch 2)."""
    for b in replica_set(name):
        api.register(b.name, b.broker_id, b.address)
        api.heartbeat(b.name, b.broker_id, b.address)
    assert api.elect(name, 1).code == ResponseCode.SUCCESS
    assert api.alter(name, 1, 1, {1, 2}, 1).code == ResponseCode.SUCCESS


def test_a_follower_redirects_to_the_leader_and_takes_over_when_it_is_killed(tmp_path, remoting, shared_store):
    first = start_controller(tmp_path / "a", FAST_CONF + shared_store)
    leader = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", FAST_CONF + shared_store)
    follower = ControllerClient(remoting, second.addr)
    try:
        name = unique("lead")
        _decide_something(leader, name)

        redirected = follower.register(name, 0, "127.0.0.1:20000")
        assert redirected.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert redirected.ext_fields["controllerLeaderAddress"] == first.addr
        assert first.addr in redirected.remark
        assert follower.replica_info(name).code == ResponseCode.CONTROLLER_NOT_LEADER
        meta = follower.metadata()
        assert (meta["isLeader"], meta["controllerLeaderAddress"]) == ("false", first.addr)

        first.kill()
        follower.wait_leading()
        assert follower.metadata()["controllerLeaderAddress"] == second.addr
        info = follower.replica_info(name)
        assert (info.master_id, info.master_epoch, info.sync_state_set, info.sync_state_set_epoch) == (1, 1, {1, 2}, 2)
    finally:
        first.kill()
        second.stop_cleanly()


def test_a_leader_frozen_past_its_session_is_deposed_and_follows_when_it_returns(tmp_path, remoting, shared_store):
    first = start_controller(tmp_path / "a", FAST_CONF + shared_store)
    frozen = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", FAST_CONF + shared_store)
    successor = ControllerClient(remoting, second.addr)
    beats = Heartbeats(successor)  # the master and its slave stay alive to the successor
    try:
        name = unique("frozen")
        _decide_something(frozen, name)
        for b in replica_set(name)[1:]:
            beats.start(b)

        first.signal(signal.SIGSTOP)  # its ZooKeeper session expires while it cannot tell
        successor.wait_leading()
        shrunk = successor.alter(name, 1, 1, {1}, 2)
        assert shrunk.code == ResponseCode.SUCCESS and shrunk.ext_fields["newSyncStateSetEpoch"] == "3"

        first.signal(signal.SIGCONT)
        following = {"isLeader": "false", "controllerLeaderAddress": second.addr}
        wait_until(lambda: following.items() <= frozen.metadata().items(), timeout=60,
                   what="the returning controller following the successor")
        stale = frozen.alter(name, 1, 1, {1, 2}, 3)
        assert stale.code == ResponseCode.CONTROLLER_NOT_LEADER
        assert stale.ext_fields["controllerLeaderAddress"] == second.addr
        info = successor.replica_info(name)
        assert (info.master_id, info.master_epoch, info.sync_state_set, info.sync_state_set_epoch) == (1, 1, {1}, 3)
    finally:
        beats.close()
        if first.alive():
            first.signal(signal.SIGCONT)
        first.stop_cleanly()
        second.stop_cleanly()


def test_a_restarted_controller_keeps_its_decisions(tmp_path, remoting, own_store):
    root, conf = tmp_path / "c", FAST_CONF + own_store
    controller = start_controller(root, conf)
    api = ControllerClient(remoting, controller.addr).wait_leading()
    name = unique("restart")
    _decide_something(api, name)
    controller.kill()  # SIGKILL: nothing is flushed on the way out

    controller = start_controller(root, conf, port=controller.port)
    try:
        api = ControllerClient(remoting, controller.addr).wait_leading()
        info = wait_until(lambda: (i := api.replica_info(name)).code == ResponseCode.SUCCESS and i, timeout=30,
                          what="the restarted controller answering")
        assert (info.master_id, info.master_address, info.master_epoch) == (1, "127.0.0.1:20001", 1)
        assert (info.sync_state_set, info.sync_state_set_epoch) == ({1, 2}, 2)
        assert api.alter(name, 1, 1, {1}, 1).code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        api.heartbeat(name, 1, "127.0.0.1:20001")
        shrunk = api.alter(name, 1, 1, {1}, 2)  # the master carries on where it left off
        assert shrunk.code == ResponseCode.SUCCESS and shrunk.ext_fields["newSyncStateSetEpoch"] == "3"
    finally:
        controller.stop_cleanly()


def test_a_restarted_controller_does_not_depose_a_master_it_has_not_heard_from_yet(tmp_path, remoting, own_store):
    root = tmp_path / "c"
    conf = "scanNotActiveBrokerInterval=200\ncontrollerHeartBeatTimeoutMills=60000\n" + own_store  # a long presumption
    controller = start_controller(root, conf)
    api = ControllerClient(remoting, controller.addr).wait_leading()
    name = unique("restart")
    _decide_something(api, name)
    controller.kill()

    controller = start_controller(root, conf, port=controller.port)
    try:
        api = ControllerClient(remoting, controller.addr).wait_leading()
        api.heartbeat(name, 2, "127.0.0.1:20002")  # a slave is back first; the master has not beaten yet
        registered = api.register(name, 2, "127.0.0.1:20002")
        assert registered.ext_fields.get("masterBrokerId") == "1"  # told to follow master 1, epoch 1
        assert registered.ext_fields.get("masterEpoch") == "1"
        stays = api.elect(name, 2)  # as a slave finding no master would ask
        assert stays.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        assert api.replica_info(name).master_epoch == 1
    finally:
        controller.stop_cleanly()


@pytest.mark.parametrize("kill_leader", ["before its election", "after its election"])
def test_a_dead_master_is_replaced_exactly_once_when_the_leader_is_killed_around_the_election(
        tmp_path, remoting, shared_store, kill_leader):
    first = start_controller(tmp_path / "a", FAST_CONF + shared_store)
    leader = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", FAST_CONF + shared_store)
    follower = ControllerClient(remoting, second.addr)
    beats = [Heartbeats(leader), Heartbeats(follower)]  # brokers heartbeat to every controller
    try:
        name = unique("lead")
        brokers = replica_set(name)
        brokers[1].epoch, brokers[1].max_offset = 1, 100
        brokers[2].epoch, brokers[2].max_offset = 1, 200
        for b in brokers:
            leader.register(b.name, b.broker_id, b.address)
            for hb in beats:
                hb.start(b)
        assert leader.elect(name, 0).code == ResponseCode.SUCCESS
        assert leader.alter(name, 0, 1, {0, 1, 2}, 1).code == ResponseCode.SUCCESS

        for hb in beats:
            hb.stop(brokers[0])
        if kill_leader == "after its election":
            wait_until(lambda: leader.replica_info(name).master_epoch == 2, timeout=60, what="the leader's election")
        first.kill()
        follower.wait_leading()
        info = wait_until(lambda: (i := follower.replica_info(name)).master_id == 2 and i, timeout=60,
                          what="replica 2 master under the new leader")
        assert (info.master_epoch, info.sync_state_set, info.sync_state_set_epoch) == (2, {2}, 3)  # one election
    finally:
        for hb in beats:
            hb.close()
        first.kill()
        second.stop_cleanly()


def test_a_second_controller_on_one_state_file_is_refused(tmp_path, remoting):
    store = tmp_path / "one-store"
    first = start_controller(tmp_path / "a", store=store)
    try:
        api = ControllerClient(remoting, first.addr).wait_leading()
        (tmp_path / "b.conf").write_text(FAST_CONF)
        second = subprocess.run([sys.executable, "-m", "spark_mq.cli", "controller", "-c", str(tmp_path / "b.conf"),
                                 "--port", "0", "--store", str(store)], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"{store / 'state.json'} is in use by another process" in second.stderr
        assert "controllers sharing their state use ZooKeeper" in second.stderr
        assert api.metadata()["isLeader"] == "true"  # the first one carries on
    finally:
        first.stop_cleanly()
