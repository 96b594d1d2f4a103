"""What the console shows beside the anchors' pages: the replication controller's view (each broker
set's master, epochs and SyncStateSet) and the messages the brokers hold back: delayed (delay levels),
timer and half (transactional) messages, per master, from their system topics' queues.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from spark_mq.client.admin import Admin, ControllerView
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.common.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANSACTION_HALF_TOPIC

HELD_TOPICS = {"delayed (delay levels)": SCHEDULE_TOPIC, "timer": TIMER_TOPIC,
               "half (transactions not decided)": TRANSACTION_HALF_TOPIC}


@dataclass(frozen=True)
class Held:
    """Messages a master holds in one system topic: stored offsets [min, max) summed over its queues."""

    what: str
    topic: str
    broker_name: str
    stored: int | None  # None: the broker did not answer (``error`` says why)
    error: str | None = None


async def held_messages(admin: Admin) -> list[Held]:
    masters = await admin.master_addrs()

    async def one(what: str, topic: str, name: str, addr: str) -> Held:
        try:
            table = await admin.api.get_topic_stats_info(addr, topic)
        except MQClientError:
            return Held(what, topic, name, 0)  # the topic does not exist there yet: nothing held
        except RemotingError as e:
            return Held(what, topic, name, None, str(e))
        return Held(what, topic, name, sum(max(o.max_offset - o.min_offset, 0) for o in table.offset_table.values()))

    return list(await asyncio.gather(*(one(w, t, n, a) for w, t in HELD_TOPICS.items()
                                       for n, a in sorted(masters.items()))))


async def controller(admin: Admin, controller_addrs: list[str]) -> ControllerView | None:
    """The controllers' view, None when no address given answers as a controller."""
    view = await admin.controller_view(controller_addrs)
    return view if view.leader is not None else None
