"""Which role a controller-mode broker takes from the controller's view (``role_change``)."""

from __future__ import annotations

import pytest

from spark_mq.broker.replication.role_change import controller_start, next_role
from spark_mq.common.config import ASYNC_MASTER, SLAVE, SYNC_MASTER, BrokerConfig
from spark_mq.common.errors import ConfigError
from spark_mq.remoting.client import RemotingClient


def config(role: str, broker_id: int = 2) -> BrokerConfig:
    return BrokerConfig(broker_id=broker_id, broker_role=role, enable_controller_mode=True,
                        controller_addr="127.0.0.1:9876")


def test_a_controller_mode_broker_starts_as_a_slave_and_only_a_configured_master_asks_for_the_first_election():
    start = controller_start(config(SYNC_MASTER), RemotingClient())
    assert (start.config.broker_role, start.config.registered_id) == (SLAVE, 2)
    assert (start.seat.master_role, start.seat.first_election) == (SYNC_MASTER, True)
    slave = controller_start(config(SLAVE), RemotingClient())
    assert (slave.seat.master_role, slave.seat.first_election) == (ASYNC_MASTER, False)


def test_elected_it_becomes_master_in_the_epoch_registered_as_0_and_named_another_it_becomes_a_slave():
    start = controller_start(config(ASYNC_MASTER), RemotingClient())
    assert next_role(start.config, start.seat, None, 0) is None  # no master: nothing changes
    assert next_role(start.config, start.seat, 3, 1) is None  # a slave of another master stays one
    master = next_role(start.config, start.seat, 2, 4)
    assert master is not None
    assert (master.config.broker_role, master.config.registered_id, master.seat.master_epoch) == (ASYNC_MASTER, 0, 4)
    assert next_role(master.config, master.seat, 2, 4) is None
    deposed = next_role(master.config, master.seat, 3, 5)
    assert deposed is not None and (deposed.config.broker_role, deposed.config.registered_id) == (SLAVE, 2)


def test_controller_mode_needs_a_replica_id_above_0():
    with pytest.raises(ConfigError, match="enableControllerMode=true needs brokerId > 0"):
        config(ASYNC_MASTER, broker_id=0)
