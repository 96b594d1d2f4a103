"""Consumer groups as the console shows them: one group's online members (client versions, subscriptions),
per-queue progress and lag, its pop messages in flight, and the lag of each Spark driver member's queries.
(The list is :meth:`Admin.groups`.)

A Spark driver member (``spark_mq/spark/group_member.py``) reads the queues its allocation strategy gives it
(``allocateStrategy``, default ``average``) among the group's members: the console computes that default
allocation from the members the broker lists and the group's queues, as the member itself does, and sums
the lag of those queues — its queries' lag. A query given another strategy reads other queues of the same
total.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.client.admin import Admin, GroupProgress, QueueProgress
from spark_mq.client.ids import is_spark_driver
from spark_mq.client.rebalance import allocate_average
from spark_mq.dashboard.internals import InFlight, held_messages, in_flight_of
from spark_mq.remoting.bodies import ConsumerConnection, MessageQueue


@dataclass(frozen=True)
class DriverLag:
    """A Spark driver member of the group: the queues allocated to it and their lag."""

    client_id: str
    queues: list[QueueProgress]

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclass(frozen=True)
class GroupDetail:
    name: str
    members: ConsumerConnection  # the online members and their subscriptions
    progress: GroupProgress
    topics: list[str]  # topics the group has committed offsets of
    in_flight: list[InFlight]  # popped, not acknowledged yet
    drivers: list[DriverLag]


def driver_lags(group: str, members: ConsumerConnection, progress: GroupProgress) -> list[DriverLag]:
    """Each Spark driver member's queues (the default ``average`` allocation, per topic) and their lag."""
    cids = [c.client_id for c in members.connection_set]
    by_topic: dict[str, dict[MessageQueue, QueueProgress]] = {}
    for q in progress.queues:
        by_topic.setdefault(q.topic, {})[MessageQueue(q.topic, q.broker_name, q.queue_id)] = q
    drivers = []
    for cid in sorted(c for c in cids if is_spark_driver(c)):
        mine = [queues[mq] for topic, queues in sorted(by_topic.items())
                for mq in allocate_average(group, cid, list(queues), cids)]
        drivers.append(DriverLag(cid, mine))
    return drivers


async def group_detail(admin: Admin, group: str) -> GroupDetail:
    progress = await admin.group_progress(group)
    topics = sorted({q.topic for q in progress.queues})
    members = await admin.members(group)
    in_flight = in_flight_of(await held_messages(admin), group)
    return GroupDetail(group, members, progress, topics, in_flight, driver_lags(group, members, progress))
