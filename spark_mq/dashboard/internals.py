"""What the console shows beside the anchors' pages: the replication controller's view (each broker set's
master, epochs and SyncStateSet, and its history of elections) and the messages each master holds back:
delayed (delay levels) and timer messages not yet due, half (transactional) messages not decided yet,
and popped messages not acknowledged yet (the broker's own counts and tables, GET_BROKER_RUNTIME_INFO).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from spark_mq.client.admin import MASTER_ID, Admin, BrokerStatus, ControllerView
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.remoting.bodies import EpochHistory, ReplicasInfo


@dataclass(frozen=True)
class InFlight:
    """Popped messages of ``group`` in one queue that no one has acknowledged yet (invisible until then)."""

    group: str
    topic: str
    broker_name: str
    queue_id: int
    count: int


@dataclass(frozen=True)
class Held:
    """What one master holds back; None where it did not say (``error``: why it did not answer)."""

    broker_name: str
    addr: str
    delayed: int | None  # delay-level messages not yet delivered
    timer: int | None  # timer messages not yet due
    half_undecided: int | None  # half messages with no commit or rollback yet (the broker's live table)
    in_flight: list[InFlight] | None = None  # None: the broker does not say (not a spark_mq broker)
    error: str | None = None


def held_of(status: BrokerStatus) -> Held:
    if status.error is not None:
        return Held(status.broker_name, status.addr, None, None, None, error=status.error)
    pops = status.pop_in_flight
    in_flight = None if pops is None else [InFlight(g, t, status.broker_name, q, n) for (g, t, q), n in pops.items()]
    return Held(status.broker_name, status.addr, status.delay_pending, status.timer_pending, status.half_undecided,
                in_flight)


async def held_messages(admin: Admin) -> list[Held]:
    return [held_of(s) for s in await admin.brokers() if s.broker_id == MASTER_ID]


def in_flight_of(held: list[Held], group: str | None = None) -> list[InFlight]:
    """The pop messages in flight of every master (of ``group`` only, when given), by group, topic and queue."""
    found = [f for h in held for f in h.in_flight or () if group is None or f.group == group]
    return sorted(found, key=lambda f: (f.group, f.topic, f.broker_name, f.queue_id))


@dataclass(frozen=True)
class Controllers:
    view: ControllerView
    elections: dict[str, EpochHistory | str]  # per broker set: its master's epoch history, or why it is missing


async def controller(admin: Admin, controller_addrs: list[str]) -> Controllers | None:
    """The controllers' view and each set's history of elections (its master's epoch entries: each term's
    epoch and the commitlog offset it began at); None when no address given answers as a controller."""
    view = await admin.controller_view(controller_addrs)
    if view.leader is None:
        return None

    async def history(info: ReplicasInfo) -> EpochHistory | str:
        if info.master_address is None:
            return "no master"
        try:
            return await admin.api.get_epoch_history(info.master_address)
        except (RemotingError, MQClientError) as e:
            return str(e)

    names = sorted(view.broker_sets)
    found = await asyncio.gather(*(history(view.broker_sets[n]) for n in names))
    return Controllers(view, dict(zip(names, found, strict=True)))
