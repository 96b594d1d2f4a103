"""A controller-mode broker's role, as the controller decides it, and the switch to it (RocketMQ's
ReplicasManager ``changeToMaster`` / ``changeToSlave``).

In controller mode a broker starts as a slave whatever its configured role (the configured master
only asks for its set's first election): it must not take a send before the controller made it
master, or a restarted old master would write a history the elected one does not have. When the
controller names it master it becomes one in the new master epoch; when it names another broker,
a master becomes that one's slave.

``RoleWatch`` acts on the controller's view (``ReplicasManager.on_master``): it asks for the role
change ``next_role`` finds, or has a slave follow the master the controller names (its registration
with the NameServers then learns that master's HA address). ``run_roles`` makes the switch: a restart
of the broker's parts inside the process (it stops the running broker and starts the next one on the
same port and store, which registers again in its new role), not a change in place:
the store, the HA service or client, the metadata sync and the retry scheduler are all built for one
role, and a clean stop and start is the path every one of them is already tested on. What outlives
the switch is passed in: the connection to the controllers (``ControllerSeat.client``: the
controller takes a closed connection for a dead broker, which would depose a master just elected),
the master lease (``master_lease.py``) and the metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from spark_mq.broker.replication.master_lease import MasterLease
from spark_mq.common.config import ASYNC_MASTER, SLAVE, BrokerConfig
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.remoting.client import RemotingClient
from spark_mq.store.ha.epoch_file import EpochFile
from spark_mq.store.ha.replica_epochs import begin_epoch, open_epochs
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)


@lazy_dataclass(frozen=True)
class ControllerSeat(LazyDataclass):
    """What a controller-mode broker keeps across its role changes."""

    client: RemotingClient  # to the controllers, one connection each for the process's life
    master_role: str  # the role it takes when elected: its configured one, ASYNC_MASTER if configured SLAVE
    first_election: bool  # configured master: it asks for its set's first election
    lease: MasterLease  # renewed by the leading controller's heartbeat answers, whatever the role
    master_epoch: int = 0  # the master epoch it serves as master in (0 while a slave)
    known_epoch: int = 0  # the newest master epoch learned from the controller: an older view is stale


@lazy_dataclass(frozen=True)
class RoleChange(LazyDataclass):
    """The broker to start next, in place of the running one."""

    config: BrokerConfig
    seat: ControllerSeat


def controller_start(config: BrokerConfig, client: RemotingClient) -> RoleChange:
    """The first broker of a controller-mode process: a slave until the controller says otherwise."""
    seat = ControllerSeat(client, ASYNC_MASTER if config.is_slave else config.broker_role, not config.is_slave,
                          MasterLease(config.master_lease_ms))
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


def epochs_for_role(store: MessageStore, config: BrokerConfig, seat: ControllerSeat) -> EpochFile:
    """The store's epoch file; a master records its epoch before it takes a send (its writes start at
    the commitlog's end)."""
    epochs = open_epochs(store)
    if not config.is_slave and seat.master_epoch > epochs.last_epoch:
        begin_epoch(store, epochs, seat.master_epoch)
        log.info("master of %s in epoch %d from commitlog offset %d", config.broker_name, seat.master_epoch,
                 store.commitlog.max_offset())
    return epochs


class RoleWatch:
    """Acts on the controller's view of a broker's set; runs on the broker's event loop."""

    def __init__(self, config: BrokerConfig, seat: ControllerSeat, follow: Callable[[str], None]) -> None:
        """``follow``: a slave replicates from the master at this address (see ``NameServerRegistration``)."""
        self.config = config
        self.seat = seat
        self.follow = follow
        self.change: RoleChange | None = None  # set (with ``changed``) when the broker must switch role
        self.changed = asyncio.Event()

    def on_master(self, master_id: int | None, master_address: str | None, epoch: int) -> None:
        """The controller's view of this broker's set changed: switch role if it asks for it, else (a slave)
        follow the master it names, whose HA address the NameServers give once it registered there."""
        change = next_role(self.config, self.seat, master_id, epoch)
        if change is not None:
            log.warning("controller: %s is master of %s in epoch %d: this broker (id %d) becomes %s",
                        master_id, self.config.broker_name, epoch, self.config.broker_id,
                        "its master" if not change.config.is_slave else "a slave")
            self.change = change
            self.changed.set()
        elif self.config.is_slave:
            self.follow(master_address or "")


class RoleHolder(Protocol):
    """A broker as ``run_roles`` runs it: its ``role_watch`` is None outside controller mode."""

    role_watch: RoleWatch | None

    async def start(self) -> int: ...

    async def stop(self) -> None: ...


B = TypeVar("B", bound=RoleHolder)


async def run_roles(broker: B, become: Callable[[B, RoleChange], B], stop: asyncio.Event,
                    on_ready: Callable[[B], None] | None = None) -> None:
    """Run ``broker`` until ``stop`` is set; at each role change it is stopped and replaced by
    ``become(it, change)``. ``on_ready`` gets the first broker once it serves."""
    await broker.start()
    running: B | None = broker
    try:
        if on_ready is not None:
            on_ready(broker)
        while (change := await _stop_or_role_change(stop, broker.role_watch)) is not None:
            running = None
            await broker.stop()
            broker = become(broker, change)
            await broker.start()  # one that fails to start has stopped what it started
            running = broker
            log.info("broker %s now %s (id %d at the NameServers)", change.config.broker_name,
                     change.config.broker_role, change.config.registered_id)
    finally:
        if running is not None:
            await running.stop()


async def _stop_or_role_change(stop: asyncio.Event, watch: RoleWatch | None) -> RoleChange | None:
    """Wait for either; the role change, None when asked to stop."""
    waits = [asyncio.ensure_future(stop.wait())]
    if watch is not None:
        waits.append(asyncio.ensure_future(watch.changed.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if stop.is_set() or watch is None:
        return None
    return watch.change
