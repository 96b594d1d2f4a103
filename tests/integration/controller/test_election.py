"""Elections by a real controller process: a dead master is replaced from the SyncStateSet by the most
up-to-date replica, a preferred replica is honoured, and replicas outside the set are elected only with
enableElectUncleanMaster (with a loud log line)."""

from __future__ import annotations

from servers import unique, wait_until

from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import ResponseCode

from ._support import FAST_CONF, ControllerClient, Heartbeats, elected_set, start_controller
from .conftest import replica_set

SUCCESS = ResponseCode.SUCCESS


def _form_set(api: ControllerClient, heartbeats: Heartbeats, name: str, in_sync: set[int]):
    """Three replicas registered and heartbeating, 0 elected master (epoch 1), then the SyncStateSet
    grown to ``in_sync`` by the master (epoch 2 if it changed)."""
    brokers = replica_set(name)
    for b in brokers:
        assert api.register(b.name, b.broker_id, b.address).code == SUCCESS
        heartbeats.start(b)
    first = api.elect(name, 0)
    assert first.code == SUCCESS, first.remark
    assert first.ext_fields["masterBrokerId"] == "0" and first.ext_fields["masterEpoch"] == "1"
    if in_sync != {0}:
        altered = api.alter(name, 0, 1, in_sync, 1)
        assert altered.code == SUCCESS, altered.remark
    return brokers


def test_a_dead_masters_most_up_to_date_in_sync_replica_becomes_master(api, heartbeats):
    name = unique("elect")
    brokers = _form_set(api, heartbeats, name, {0, 1, 2})
    brokers[1].epoch, brokers[1].max_offset = 1, 1000
    brokers[2].epoch, brokers[2].max_offset = 1, 5000  # furthest ahead

    heartbeats.stop(brokers[0])  # the master goes silent (its connection stays open)
    info = wait_until(lambda: (i := api.replica_info(name)).master_id == 2 and i, timeout=60,
                      what="replica 2 elected master")
    assert info.master_address == brokers[2].address
    assert info.master_epoch == 2
    assert info.sync_state_set == {2} and info.sync_state_set_epoch == 3  # the set restarts with the new master


def test_the_old_master_returning_does_not_take_the_set_back(api, heartbeats):
    name = unique("elect")
    brokers = _form_set(api, heartbeats, name, {0, 1})
    heartbeats.stop(brokers[0])
    wait_until(lambda: api.replica_info(name).master_id == 1, timeout=60, what="replica 1 elected master")
    heartbeats.start(brokers[0])  # back, with its old epoch

    again = api.elect(name, 0)  # as a returning broker asks
    assert again.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert again.ext_fields["masterBrokerId"] == "1" and again.ext_fields["masterEpoch"] == "2"
    fenced = api.alter(name, 0, 1, {0, 1}, 2)  # the deposed master, with its old master epoch
    assert fenced.code == ResponseCode.CONTROLLER_INVALID_MASTER


def test_a_preferred_replica_is_elected_when_in_sync_and_refused_when_not(api, heartbeats):
    name = unique("elect")
    _form_set(api, heartbeats, name, {0, 1})

    moved = api.elect(name, 1, designate=True)  # an admin moves the master to replica 1
    assert moved.code == SUCCESS, moved.remark
    assert moved.ext_fields["masterBrokerId"] == "1" and moved.ext_fields["masterEpoch"] == "2"
    assert elected_set(moved) == {1}

    refused = api.elect(name, 2, designate=True)  # 2 never joined the SyncStateSet
    assert refused.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    assert api.replica_info(name).master_id == 1


def test_without_unclean_election_a_set_whose_in_sync_replicas_are_dead_has_no_master(api, heartbeats):
    name = unique("elect")
    brokers = _form_set(api, heartbeats, name, {0})  # 1 and 2 alive but never in sync
    heartbeats.stop(brokers[0])

    info = wait_until(lambda: (i := api.replica_info(name)).master_id is None and i, timeout=60,
                      what="the dead master recorded as gone")
    assert info.master_epoch == 1  # nobody elected: no new epoch
    assert info.sync_state_set == {0}  # kept: only 0 has every acknowledged message
    refused = api.elect(name, 1)
    assert refused.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED


def test_with_unclean_election_a_replica_outside_the_set_is_elected_loudly(tmp_path, remoting):
    controller = start_controller(tmp_path / "unclean", FAST_CONF + "enableElectUncleanMaster=true\n")
    api = ControllerClient(remoting, controller.addr).wait_leading()
    heartbeats = Heartbeats(api)
    try:
        name = unique("elect")
        brokers = _form_set(api, heartbeats, name, {0})
        brokers[1].epoch, brokers[1].max_offset = 1, 10
        brokers[2].epoch, brokers[2].max_offset = 1, 20
        heartbeats.stop(brokers[0])

        info = wait_until(lambda: (i := api.replica_info(name)).master_id == 2 and i, timeout=60,
                          what="replica 2 elected from outside the SyncStateSet")
        assert info.master_epoch == 2 and info.sync_state_set == {2}
        assert "UNCLEAN ELECTION" in controller.log()
    finally:
        heartbeats.close()
        controller.stop_cleanly()


def test_a_master_whose_connection_closes_is_replaced_at_once(tmp_path, remoting):
    # heartbeats would count for a minute: only the closed connection can explain the election
    controller = start_controller(tmp_path / "conn", "scanNotActiveBrokerInterval=200\n"
                                                     "controllerHeartBeatTimeoutMills=60000\n")
    api = ControllerClient(remoting, controller.addr).wait_leading()
    master_link = SyncRemotingClient()  # the master's own connection, as a broker process has
    try:
        name = unique("elect")
        brokers = replica_set(name)
        for b in brokers:
            api.register(b.name, b.broker_id, b.address)
        ControllerClient(master_link, controller.addr).heartbeat(name, 0, brokers[0].address)
        api.heartbeat(name, 1, brokers[1].address, epoch=1, max_offset=10)
        assert api.elect(name, 0).code == SUCCESS
        assert api.alter(name, 0, 1, {0, 1}, 1).code == SUCCESS

        master_link.close()  # as the kernel closes a SIGKILLed broker's socket
        info = wait_until(lambda: (i := api.replica_info(name)).master_id == 1 and i, timeout=60,
                          what="replica 1 elected after the master's connection closed")
        assert info.master_epoch == 2
        assert "its connection closed" in controller.log()
    finally:
        master_link.close()
        controller.stop_cleanly()
