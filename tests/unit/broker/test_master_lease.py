"""The master lease (``replication/master_lease.py``): its arithmetic on an injected clock, the gate's
refusals and log lines, and the configuration's check of the lease against the controller's timeout."""

from __future__ import annotations

import logging
import re

import pytest

from spark_mq.broker.replication.master_lease import LeaseGate, MasterLease, wall_time
from spark_mq.common.config import BrokerConfig
from spark_mq.common.errors import ConfigError

INTERVAL = re.compile(r"master lease: broker=(\S+) id=(\d+) acknowledged from=(\S+) to=(\S+) reason=(.*)")


class Clocks:
    """One moment on two clocks: the monotonic one the lease counts on and the wall clock the log writes."""

    def __init__(self) -> None:
        self.now = 100.0

    def mono(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now


def controller_config(**keys: int) -> BrokerConfig:
    return BrokerConfig(broker_id=1, enable_controller_mode=True, controller_addr="127.0.0.1:9876", **keys)


def test_the_lease_runs_from_the_heartbeats_send_time_and_only_grows():
    clocks = Clocks()
    lease = MasterLease(3000, clock=clocks.mono)
    assert not lease.valid() and lease.remaining_s() == 0
    lease.grant(sent_at=99.5)  # answered at 100.0: the lease counts from the send
    assert lease.valid() and lease.remaining_s() == pytest.approx(2.5)
    lease.grant(sent_at=99.0)  # a late answer to an older heartbeat does not shorten it
    assert lease.remaining_s() == pytest.approx(2.5)
    clocks.now = 102.5
    assert not lease.valid()
    assert lease.since_last_grant_ms() == 3000


def test_the_gate_refuses_once_the_lease_ran_out_and_logs_one_parsable_interval(caplog):
    caplog.set_level(logging.INFO, "spark_mq.broker.replication.master_lease")
    clocks = Clocks()
    lease = MasterLease(2000, clock=clocks.mono)
    changes: list[bool] = []
    gate = LeaseGate(lease, "b", 1, lambda: changes.append(gate.holds()), wall=clocks.wall)
    assert gate.refusal() is not None and not changes  # never granted: never acknowledging
    lease.grant(sent_at=100.0)
    assert gate.refusal() is None and changes == [True]
    assert f"acknowledging from={wall_time(clocks.wall())}" in caplog.text
    clocks.now = 101.0
    assert gate.refusal() is None and changes == [True]
    clocks.now = 103.0  # ran out at 102.0
    refusal = gate.refusal()
    assert refusal is not None and refusal.startswith("master lease expired: no heartbeat answered by the controller "
                                                      "leader for 3000 ms, masterLeaseMills=2000")
    assert gate.refusal() == refusal and changes == [True, False]  # one change, one warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    name, broker_id, start, end, reason = INTERVAL.search(warnings[0].getMessage()).groups()
    assert (name, broker_id, start, end) == ("b", "1", wall_time(1_800_000_100.0), wall_time(1_800_000_102.0))
    assert reason.startswith("expired")
    lease.grant(sent_at=103.0)
    assert gate.refusal() is None and changes == [True, False, True]


def test_a_closed_gate_acknowledges_nothing_and_ends_its_interval_at_the_close(caplog):
    caplog.set_level(logging.INFO, "spark_mq.broker.replication.master_lease")
    clocks = Clocks()
    lease = MasterLease(2000, clock=clocks.mono)
    gate = LeaseGate(lease, "b", 2, lambda: None, wall=clocks.wall)
    lease.grant(sent_at=100.0)
    assert gate.acknowledging
    clocks.now = 100.5
    gate.close()
    assert not gate.acknowledging and "leaving its master role" in (gate.refusal() or "")
    ended = [INTERVAL.search(r.getMessage()) for r in caplog.records]
    assert [m.group(4, 5) for m in ended if m] == [(wall_time(1_800_000_100.5), "role ended")]


def test_the_default_lease_is_the_controller_timeout_less_two_heartbeats():
    assert controller_config().master_lease_ms == 10_000 - 2 * 1000
    assert controller_config(controller_heart_beat_timeout_mills=4000, broker_heartbeat_interval=300,
                             master_lease_mills=3700).master_lease_ms == 3700


@pytest.mark.parametrize(("keys", "message"), [
    ({"master_lease_mills": 9500}, "masterLeaseMills=9500 must end at least one brokerHeartbeatInterval"),
    ({"master_lease_mills": 1000}, "masterLeaseMills=1000 must be longer than brokerHeartbeatInterval"),
    ({"controller_heart_beat_timeout_mills": 3000}, "masterLeaseMills=1000 must be longer"),
])
def test_a_lease_that_could_outlive_the_controllers_timeout_or_a_heartbeat_is_refused(keys, message):
    with pytest.raises(ConfigError, match=message):
        controller_config(**keys)
    BrokerConfig(**keys)  # outside controller mode the lease is not used
