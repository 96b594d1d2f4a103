"""The controller's rules on one broker set's state, and the election policy, without a process."""

from __future__ import annotations

import logging

import pytest

from spark_mq.controller.elect_policy import ElectPolicy, ReplicaProgress
from spark_mq.controller.heartbeats import BrokerLiveTable
from spark_mq.controller.replicas_info import (
    CONTROLLER_TRIGGER,
    BrokerSetState,
    Refusal,
    elect_master,
    needs_new_master,
    register_broker,
)
from spark_mq.remoting.codes import ResponseCode

NAME = "broker-a"


def _state(master: int | None = 0, in_sync=(0, 1, 2), master_epoch: int = 1, set_epoch: int = 2) -> BrokerSetState:
    return BrokerSetState("c", NAME, {0: "h:0", 1: "h:1", 2: "h:2"}, master, master_epoch, frozenset(in_sync),
                          set_epoch)


def _policy(alive: set[int], progress: dict[int, ReplicaProgress] | None = None) -> ElectPolicy:
    return ElectPolicy(lambda _n, i: i in alive, lambda _n, i: (progress or {}).get(i, ReplicaProgress()))


def test_the_state_survives_its_record_form():
    state = _state()
    assert BrokerSetState.from_bytes(state.to_bytes()) == state
    assert BrokerSetState.from_bytes(_state(master=None).to_bytes()).master_address is None


def test_registering_adds_a_replica_or_its_new_address_and_checks_the_cluster():
    first = register_broker(None, "c", NAME, 0, "h:0")
    assert first == BrokerSetState("c", NAME, {0: "h:0"})
    assert register_broker(first, "c", NAME, 0, "h:0") is first
    assert register_broker(first, "c", NAME, 0, "h:9").replicas == {0: "h:9"}
    with pytest.raises(Refusal) as refused:
        register_broker(first, "other", NAME, 1, "h:1")
    assert refused.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST


def test_the_most_up_to_date_live_in_sync_replica_wins_epoch_before_offset_then_priority():
    progress = {1: ReplicaProgress(2, 100), 2: ReplicaProgress(1, 9000)}
    election = elect_master(_state(), CONTROLLER_TRIGGER, False, _policy({1, 2}, progress), unclean=False)
    assert election.refusal is None
    assert (election.state.master_id, election.state.master_epoch) == (1, 2)
    assert (election.state.sync_state_set, election.state.sync_state_set_epoch) == ({1}, 3)
    tie = {1: ReplicaProgress(1, 50, election_priority=5), 2: ReplicaProgress(1, 50, election_priority=1)}
    assert elect_master(_state(), CONTROLLER_TRIGGER, False, _policy({1, 2}, tie), False).state.master_id == 2


def test_a_live_master_stays_unless_another_replica_is_preferred():
    stays = elect_master(_state(), 1, False, _policy({0, 1, 2}), unclean=False)
    assert stays.state is None and stays.refusal.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    moved = elect_master(_state(), 2, True, _policy({0, 1, 2}), unclean=False)
    assert moved.refusal is None and moved.state.master_id == 2


def test_unclean_election_only_when_enabled_and_logged_loudly(caplog):
    outside = _state(in_sync=(0,))
    off = elect_master(outside, CONTROLLER_TRIGGER, False, _policy({1, 2}), unclean=False)
    assert off.refusal.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
    assert off.state.master_id is None and off.state.master_epoch == 1  # recorded: no master, nobody elected
    with caplog.at_level(logging.ERROR):
        on = elect_master(outside, CONTROLLER_TRIGGER, False, _policy({1, 2}, {2: ReplicaProgress(1, 7)}), True)
    assert on.refusal is None and on.state.master_id == 2
    assert any("UNCLEAN ELECTION" in r.message and r.levelno == logging.ERROR for r in caplog.records)


def test_the_first_election_makes_the_asker_master():
    fresh = BrokerSetState("c", NAME, {0: "h:0", 3: "h:3"})
    election = elect_master(fresh, 3, False, _policy(set()), unclean=False)
    assert (election.state.master_id, election.state.master_epoch, election.state.sync_state_set) == (3, 1, {3})


def test_a_set_needs_a_new_master_only_if_its_master_is_dead_and_a_replica_lives():
    assert needs_new_master(_state(), lambda i: i == 1)
    assert not needs_new_master(_state(), lambda i: i == 0)
    assert not needs_new_master(_state(), lambda i: False)


def test_a_set_that_lost_its_master_to_a_failed_election_needs_one_once_a_member_lives():
    lost = _state(master=None, in_sync=(2,))
    assert needs_new_master(lost, lambda i: i == 2)
    assert not needs_new_master(lost, lambda i: i != 2)  # only clean: a SyncStateSet member
    assert not needs_new_master(_state(master=None, master_epoch=0), lambda i: True)  # never elected: the first
    election = elect_master(lost, CONTROLLER_TRIGGER, False, _policy({2}), unclean=False)
    assert (election.state.master_id, election.state.master_epoch, election.state.sync_state_set) == (2, 2, {2})


def test_heartbeat_progress_only_moves_forward_and_silence_kills():
    now = [0.0]
    table = BrokerLiveTable(1000, clock=lambda: now[0])
    table.on_heartbeat("c", NAME, 1, "h:1", None, epoch=2, max_offset=500, timeout_ms=None, election_priority=None)
    table.on_heartbeat("c", NAME, 1, "h:1", None, epoch=1, max_offset=900, timeout_ms=None, election_priority=3)
    assert table.progress(NAME, 1) == ReplicaProgress(2, 500, 3)
    now[0] = 1.5
    assert not table.is_alive(NAME, 1)
    assert [i.broker_id for i in table.expire()] == [1]
    assert table.progress(NAME, 1) == ReplicaProgress()


def test_after_a_takeover_a_silent_master_may_hold_its_lease_for_one_lease_a_closed_one_not():
    now = [10.0]
    table = BrokerLiveTable(4000, clock=lambda: now[0])
    conn_1, conn_2 = object(), object()
    table.on_heartbeat("c", NAME, 1, "h:1", conn_1, epoch=1, max_offset=0, timeout_ms=None, election_priority=None,
                       lease_ms=3000)
    table.on_heartbeat("c", NAME, 2, "h:2", conn_2, epoch=1, max_offset=0, timeout_ms=None, election_priority=None)
    now[0] = 20.0  # both silent past their timeout: dead to this controller
    table.expire()
    took_over = 20.0
    assert table.may_hold_lease(NAME, 1, took_over)  # its lease, as it reported it: 3 s
    assert table.may_hold_lease(NAME, 3, took_over)  # never heard: the default timeout bounds any lease
    now[0] = 23.5
    assert not table.may_hold_lease(NAME, 1, took_over) and table.may_hold_lease(NAME, 3, took_over)
    now[0] = 24.5
    assert not table.may_hold_lease(NAME, 3, took_over)
    table.on_heartbeat("c", NAME, 2, "h:2", conn_2, epoch=1, max_offset=0, timeout_ms=None, election_priority=None)
    table.on_channel_closed(conn_2)  # a dead process: replaced at once
    assert not table.may_hold_lease(NAME, 2, now[0])
