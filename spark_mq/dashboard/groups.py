"""Consumer groups as the console shows them: one group's online members (client versions, subscriptions),
per-queue progress and lag. (The list is :meth:`Admin.groups`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.client.admin import Admin, GroupProgress
from spark_mq.remoting.bodies import ConsumerConnection


@dataclass(frozen=True)
class GroupDetail:
    name: str
    members: ConsumerConnection  # the online members and their subscriptions
    progress: GroupProgress
    topics: list[str]  # topics the group has committed offsets of


async def group_detail(admin: Admin, group: str) -> GroupDetail:
    progress = await admin.group_progress(group)
    topics = sorted({q.topic for q in progress.queues})
    return GroupDetail(group, await admin.members(group), progress, topics)
