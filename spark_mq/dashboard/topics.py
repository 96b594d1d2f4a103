"""Topics as the console lists them: each topic's kind (normal, retry, DLQ, system), a filtered page of
the list (so thousands of topics stay one small page), and one topic's route, queues, readers and tiered
archive (per queue: the archived range, whose end is the boundary between the cold tier and the hot one,
and its bytes; the table's version), read from the table itself with delta-rs or pyarrow, no Spark.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from deltalake.exceptions import DeltaError

from spark_mq.client.admin import Admin, TopicStats
from spark_mq.common.errors import MQClientError, RemotingError, SparkMQError
from spark_mq.common.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.dashboard.clients import refused
from spark_mq.remoting.bodies import TopicRouteData
from spark_mq.tiered.archive import detect_format, open_archive

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
class QueueArchive:
    first: int | None  # the queue's first archived offset
    end: int | None  # just past its last archived one: below it the cold tier, from it the broker (hot)
    bytes: int  # of its data files


@dataclass(frozen=True)
class TopicArchive:
    uri: str
    format: str
    version: int | None  # the Delta table's version; None for Parquet
    queues: dict[tuple[str, int], QueueArchive]  # by (broker set, queue id)


def topic_archive(root: str, topic: str, queues: list[tuple[str, int]]) -> TopicArchive | None:
    """The archive of ``topic`` under ``root`` for ``queues``; None when it has no table yet. Blocking
    (file reads): run it off the event loop."""
    if detect_format(root, topic) is None:
        return None
    archive = open_archive(root, topic)
    found = {}
    for broker, queue_id in queues:
        first, end = archive.archived_range(broker, queue_id)
        found[(broker, queue_id)] = QueueArchive(first, end, archive.queue_bytes(broker, queue_id) if end else 0)
    return TopicArchive(archive.uri, archive.format, archive.version(), found)


@dataclass(frozen=True)
class TopicDetail:
    name: str
    kind: TopicKind
    route: TopicRouteData
    stats: TopicStats | None
    readers: list[str] | None  # groups with committed offsets of the topic; None: the account may not list groups
    error: str | None  # why stats are missing (a dead broker)
    archive: TopicArchive | None = None  # None: no archive root given, or no table of the topic there
    archive_error: str | None = None  # why the archive could not be read


async def topic_detail(admin: Admin, topic: str, may_list_groups: bool, archive_root: str = "") -> TopicDetail | None:
    """The topic's route, queue offsets, readers and archive (under ``archive_root``, when given); None
    when no NameServer knows it."""
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
    archive = archive_error = None
    if archive_root and stats is not None:
        queues = [(q.broker_name, q.queue_id) for q in stats.queues]
        try:
            archive = await asyncio.get_running_loop().run_in_executor(None, topic_archive, archive_root, topic, queues)
        except (OSError, DeltaError, SparkMQError) as e:  # an unreadable root or table: said, the page shown
            archive_error = f"the archive at {archive_root} cannot be read: {e}"
    return TopicDetail(topic, kind_of(topic), route, stats, readers, error, archive, archive_error)
