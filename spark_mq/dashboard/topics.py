"""Topics as the console lists them: each topic's kind (normal, retry, DLQ, system), a filtered page of
the list (so thousands of topics stay one small page), and one topic's route, queues and readers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from spark_mq.client.admin import Admin, TopicStats
from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.common.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.dashboard.clients import refused
from spark_mq.remoting.bodies import TopicRouteData

PAGE_SIZE = 50


class TopicKind(enum.Enum):
    NORMAL = "normal"
    RETRY = "retry"
    DLQ = "dlq"
    SYSTEM = "system"


def kind_of(topic: str) -> TopicKind:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return TopicKind.RETRY
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return TopicKind.DLQ
    return TopicKind.SYSTEM if is_system_topic(topic) else TopicKind.NORMAL


@dataclass(frozen=True)
class Page:
    items: list[str]
    number: int  # 1-based
    pages: int
    total: int  # topics matching the filter


def page_of(topics: list[str], kind: TopicKind | None, text: str, number: int, size: int = PAGE_SIZE) -> Page:
    """Page ``number`` of the topics of ``kind`` (None: all) whose name contains ``text``."""
    text = text.lower()
    matching = [t for t in topics if (kind is None or kind_of(t) is kind) and text in t.lower()]
    pages = max((len(matching) + size - 1) // size, 1)
    number = min(max(number, 1), pages)
    return Page(matching[(number - 1) * size: number * size], number, pages, len(matching))


def perm_text(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


@dataclass(frozen=True)
class TopicDetail:
    name: str
    kind: TopicKind
    route: TopicRouteData
    stats: TopicStats | None
    readers: list[str] | None  # groups with committed offsets of the topic; None: the account may not list groups
    error: str | None  # why stats are missing (a dead broker)


async def topic_detail(admin: Admin, topic: str, may_list_groups: bool) -> TopicDetail | None:
    """The topic's route, queue offsets and readers; None when no NameServer knows it."""
    route = await admin.route(topic)
    if route is None:
        return None
    stats = error = None
    try:
        stats = await admin.topic_stats(topic)
    except (RemotingError, MQClientError) as e:  # a dead broker of the route: said, and the route shown
        error = str(e)
    readers = None
    if may_list_groups:
        try:
            readers = sorted(g for g, topics in (await admin.groups()).items() if topic in topics)
        except MQClientError as e:
            if not refused(e):
                raise
    return TopicDetail(topic, kind_of(topic), route, stats, readers, error)
