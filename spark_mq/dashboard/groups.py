"""Consumer groups as the console shows them: the list (with the topics each has offsets of) and one
group's members, per-queue progress and lag.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_mq.client.admin import Admin, GroupProgress


@dataclass(frozen=True)
class GroupDetail:
    name: str
    members: list[str]  # client ids of the online members
    progress: GroupProgress
    topics: list[str]  # topics the group has committed offsets of


async def group_detail(admin: Admin, group: str) -> GroupDetail:
    progress = await admin.group_progress(group)
    topics = sorted({q.topic for q in progress.queues})
    return GroupDetail(group, await admin.members(group), progress, topics)
