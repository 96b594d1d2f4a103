"""What the console shows beside the anchors' pages: the replication controller's view (each broker set's
master, epochs and SyncStateSet, and its history of elections) and the messages each master holds back:
delayed (delay levels) and timer messages not yet due (the broker's own counts, GET_BROKER_RUNTIME_INFO),
and what its half (transactional) topic stores.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from spark_mq.client.admin import MASTER_ID, Admin, BrokerStatus, ControllerView
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.common.names import TRANSACTION_HALF_TOPIC
from spark_mq.remoting.bodies import EpochHistory, ReplicasInfo


@dataclass(frozen=True)
class Held:
    """What one master holds back; None where it did not say (``error``: why it did not answer)."""

    broker_name: str
    addr: str
    delayed: int | None  # delay-level messages not yet delivered
    timer: int | None  # timer messages not yet due
    half_stored: int | None  # messages in the half topic's queues (decided ones stay until their files expire)
    error: str | None = None


async def _half_stored(admin: Admin, addr: str) -> int:
    try:
        table = await admin.api.get_topic_stats_info(addr, TRANSACTION_HALF_TOPIC)
    except MQClientError:
        return 0  # no half topic there yet: no transaction was ever prepared
    return sum(max(o.max_offset - o.min_offset, 0) for o in table.offset_table.values())


async def held_messages(admin: Admin) -> list[Held]:
    masters = [s for s in await admin.brokers() if s.broker_id == MASTER_ID]

    async def one(status: BrokerStatus) -> Held:
        if status.error is not None:
            return Held(status.broker_name, status.addr, None, None, None, status.error)
        try:
            half = await _half_stored(admin, status.addr)
        except RemotingError as e:
            return Held(status.broker_name, status.addr, None, None, None, str(e))
        return Held(status.broker_name, status.addr, status.delay_pending, status.timer_pending, half)

    return list(await asyncio.gather(*map(one, masters)))


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
