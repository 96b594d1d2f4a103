"""A controller-mode broker's role, as the controller decides it (RocketMQ's ReplicasManager
``changeToMaster`` / ``changeToSlave``).

In controller mode a broker starts as a slave whatever its configured role (the configured master
only asks for its set's first election): it must not take a send before the controller made it
master, or a restarted old master would write a history the elected one does not have. When the
controller names it master it becomes one in the new master epoch; when it names another broker,
a master becomes that one's slave.

The switch is a restart of the broker's parts inside the process (``serve`` stops the
``BrokerController`` and starts the next one on the same port and store), not a change in place:
the store, the HA service or client, the metadata sync and the retry scheduler are all built for one
role, and a clean stop and start is the path every one of them is already tested on. What outlives
the switch is passed in: the connection to the controllers (``ControllerSeat.client``: the
controller takes a closed connection for a dead broker, which would depose a master just elected)
and the metrics.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from spark_mq.common.config import ASYNC_MASTER, SLAVE, BrokerConfig
from spark_mq.remoting.client import RemotingClient


@dataclass(frozen=True)
class ControllerSeat:
    """What a controller-mode broker keeps across its role changes."""

    client: RemotingClient  # to the controllers, one connection each for the process's life
    master_role: str  # the role it takes when elected: its configured one, ASYNC_MASTER if configured SLAVE
    first_election: bool  # configured master: it asks for its set's first election
    master_epoch: int = 0  # the master epoch it serves as master in (0 while a slave)
    known_epoch: int = 0  # the newest master epoch learned from the controller: an older view is stale


@dataclass(frozen=True)
class RoleChange:
    """The broker to start next, in place of the running one."""

    config: BrokerConfig
    seat: ControllerSeat


def controller_start(config: BrokerConfig, client: RemotingClient) -> RoleChange:
    """The first broker of a controller-mode process: a slave until the controller says otherwise."""
    seat = ControllerSeat(client, ASYNC_MASTER if config.is_slave else config.broker_role, not config.is_slave)
    return RoleChange(dataclasses.replace(config, broker_role=SLAVE), seat)


def next_role(config: BrokerConfig, seat: ControllerSeat, master_id: int | None,
              master_epoch: int) -> RoleChange | None:
    """The role change the controller's view asks for, None if the running role fits it. A set without a
    master (none alive in its SyncStateSet) changes nothing: a slave waits, a master is deposed only
    by the election of another."""
    if master_id is None:
        return None
    elected = master_id == config.broker_id
    if elected and (config.is_slave or master_epoch > seat.master_epoch):
        return RoleChange(dataclasses.replace(config, broker_role=seat.master_role),
                          dataclasses.replace(seat, master_epoch=master_epoch, known_epoch=master_epoch))
    if not elected and not config.is_slave:
        return RoleChange(dataclasses.replace(config, broker_role=SLAVE),
                          dataclasses.replace(seat, master_epoch=0, known_epoch=master_epoch))
    return None
