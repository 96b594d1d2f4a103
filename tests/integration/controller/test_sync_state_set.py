"""ALTER_SYNC_STATE_SET against a real controller: only the current master, naming the current master
epoch and SyncStateSet epoch, may change the set, and only to live registered replicas including itself;
each accepted change bumps the set's epoch."""

from __future__ import annotations

import json

from servers import unique

from spark_mq.remoting.bodies import BrokerReplicasInfo, SyncStateSet
from spark_mq.remoting.codes import RequestCode, ResponseCode

from .conftest import replica_set


def test_only_the_master_with_current_epochs_changes_the_set_to_live_replicas(api, heartbeats):
    name = unique("sss")
    brokers = replica_set(name)
    for b in brokers[:2]:
        api.register(b.name, b.broker_id, b.address)
        heartbeats.start(b)
    api.register(name, 2, brokers[2].address)  # registered, never heartbeats: not alive
    assert api.elect(name, 0).code == ResponseCode.SUCCESS  # master 0, master epoch 1, set {0} epoch 1

    refusals = {
        "not the master": api.alter(name, 1, 1, {0, 1}, 1),
        "old master epoch": api.alter(name, 0, 0, {0, 1}, 1),
        "old set epoch": api.alter(name, 0, 1, {0, 1}, 0),
        "unregistered replica": api.alter(name, 0, 1, {0, 7}, 1),
        "dead replica": api.alter(name, 0, 1, {0, 2}, 1),
        "without the master": api.alter(name, 0, 1, {1}, 1),
        "no change": api.alter(name, 0, 1, {0}, 1),
    }
    assert {why: r.code for why, r in refusals.items()} == {
        "not the master": ResponseCode.CONTROLLER_INVALID_MASTER,
        "old master epoch": ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
        "old set epoch": ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
        "unregistered replica": ResponseCode.CONTROLLER_INVALID_REPLICAS,
        "dead replica": ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
        "without the master": ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        "no change": ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
    }
    assert all(r.remark for r in refusals.values())
    info = api.replica_info(name)
    assert (info.sync_state_set, info.sync_state_set_epoch) == ({0}, 1)  # no refusal changed anything

    grown = api.alter(name, 0, 1, {0, 1}, 1)
    assert grown.code == ResponseCode.SUCCESS, grown.remark
    assert grown.ext_fields["newSyncStateSetEpoch"] == "2"
    assert SyncStateSet.from_json(grown.body) == SyncStateSet(frozenset({0, 1}), 2)
    replay = api.alter(name, 0, 1, {0}, 1)  # a late retry of an older change
    assert replay.code == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    shrunk = api.alter(name, 0, 1, {0}, 2)
    assert shrunk.code == ResponseCode.SUCCESS and shrunk.ext_fields["newSyncStateSetEpoch"] == "3"
    info = api.replica_info(name)
    assert (info.master_id, info.master_epoch, info.sync_state_set, info.sync_state_set_epoch) == (0, 1, {0}, 3)


def test_requests_about_unknown_sets_or_malformed_are_refused_with_a_reason(api):
    name = unique("sss")
    assert api.replica_info(name).code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert api.elect(name, 0).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert api.alter(name, 0, 1, {0}, 0).code == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    no_id = api.call(904, {"clusterName": "c", "brokerName": name, "brokerAddr": "127.0.0.1:1"})
    assert no_id.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    bad = api.call(1001, {"brokerName": name, "masterBrokerId": "0", "masterEpoch": "1"}, b"{not json")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "SyncStateSet" in bad.remark
    assert api.register(name, 0, "127.0.0.1:1").code == ResponseCode.SUCCESS  # still serving


def test_sync_state_data_lists_each_sets_master_epochs_and_replicas_in_and_out_of_sync(api, heartbeats):
    name, other = unique("sss"), unique("sss")
    brokers = replica_set(name)
    for b in brokers[:2]:
        api.register(b.name, b.broker_id, b.address)
        heartbeats.start(b)
    api.register(name, 2, brokers[2].address)  # never heartbeats
    api.elect(name, 0)
    api.alter(name, 0, 1, {0, 1}, 1)

    answer = api.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, json.dumps([name, other]).encode())
    assert answer.code == ResponseCode.SUCCESS
    table = BrokerReplicasInfo.from_json(answer.body).replicas_info_table
    assert set(table) == {name}  # an unknown set is left out
    info = table[name]
    assert (info.master_broker_id, info.master_address, info.master_epoch, info.sync_state_set_epoch) == (
        0, brokers[0].address, 1, 2)
    assert [(r.broker_id, r.alive) for r in info.in_sync_replicas] == [(0, True), (1, True)]
    assert [(r.broker_id, r.broker_address, r.alive) for r in info.not_in_sync_replicas] == [
        (2, brokers[2].address, False)]
