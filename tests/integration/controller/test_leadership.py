"""Controller processes sharing one state store: one leads, the others answer CONTROLLER_NOT_LEADER
naming the leader; a SIGKILLed leader's successor, and a restarted controller, have every decision."""

from __future__ import annotations

import pytest
from servers import unique, wait_until

from spark_mq.remoting.codes import ResponseCode

from ._support import ControllerClient, Heartbeats, start_controller
from .conftest import replica_set


def _decide_something(api: ControllerClient, name: str) -> None:
    """A set with master 1 (epoch 1) and SyncStateSet {1, 2} (epoch 2)."""
    for b in replica_set(name):
        api.register(b.name, b.broker_id, b.address)
        api.heartbeat(b.name, b.broker_id, b.address)
    assert api.elect(name, 1).code == ResponseCode.SUCCESS
    assert api.alter(name, 1, 1, {1, 2}, 1).code == ResponseCode.SUCCESS


def test_a_follower_redirects_to_the_leader_and_takes_over_when_it_is_killed(tmp_path, remoting):
    store = tmp_path / "shared-store"
    first = start_controller(tmp_path / "a", store=store)
    leader = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", store=store)
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


def test_a_restarted_controller_keeps_its_decisions(tmp_path, remoting):
    root = tmp_path / "c"
    controller = start_controller(root)
    api = ControllerClient(remoting, controller.addr).wait_leading()
    name = unique("restart")
    _decide_something(api, name)
    controller.kill()  # SIGKILL: nothing is flushed on the way out

    controller = start_controller(root, port=controller.port)
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


def test_a_restarted_controller_does_not_depose_a_master_it_has_not_heard_from_yet(tmp_path, remoting):
    root = tmp_path / "c"
    conf = "scanNotActiveBrokerInterval=200\ncontrollerHeartBeatTimeoutMills=60000\n"  # a long presumption
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
        tmp_path, remoting, kill_leader):
    store = tmp_path / "shared-store"
    first = start_controller(tmp_path / "a", store=store)
    leader = ControllerClient(remoting, first.addr).wait_leading()
    second = start_controller(tmp_path / "b", store=store)
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
