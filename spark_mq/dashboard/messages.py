"""Messages as the console finds and shows them: searches by topic and time range, by key and by id;
one message's properties and body as text, JSON or hex; resending a copy to its topic or to one group.

Search results are summaries without bodies (a body is fetched only for the message page that shows
it), so the console never holds a body it does not show.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from spark_mq.client.admin import Admin, FoundMessage
from spark_mq.client.producer import Producer
from spark_mq.client.queue_pull import pull_header
from spark_mq.client.results import PullStatus, SendResult
from spark_mq.common import properties as prop
from spark_mq.common.errors import ClientError
from spark_mq.common.message import Message
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.names import DLQ_GROUP_TOPIC_PREFIX, retry_topic
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import SUB_ALL, MessageQueue

SEARCH_MAX = 100  # messages a search lists at most
BROWSE_GROUP = "spark_mq_console_browse"  # the group time-range searches pull as (they commit nothing)
HEX_MAX = 4096  # body bytes shown in hex at most
# properties the broker or the producer sets on a send: a resent copy gets its own
NOT_COPIED = frozenset({prop.UNIQ_KEY, prop.KEYS, prop.TAGS, prop.REAL_TOPIC, prop.REAL_QUEUE_ID, prop.DELAY,
                        prop.TIMER_DELIVER_MS, prop.TIMER_DELAY_SEC, prop.TIMER_DELAY_MS, prop.TIMER_OUT_MS,
                        prop.TRANSACTION_PREPARED, prop.PRODUCER_GROUP, prop.WAIT_STORE_MSG_OK,
                        "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", prop.RETRY_TOPIC, prop.ORIGIN_MESSAGE_ID})


@dataclass(frozen=True)
class Summary:
    """A message in a search result: where it is and what it is, without its body."""

    msg_id: str  # offsetMsgId
    uniq_key: str | None
    topic: str
    broker_name: str | None
    queue_id: int
    queue_offset: int
    keys: str
    tags: str
    store_timestamp: int
    body_size: int


def summary(m: StoredMessage, broker_name: str | None) -> Summary:
    return Summary(offset_msg_id(m.store_host, m.physical_offset), m.properties.get(prop.UNIQ_KEY), m.topic,
                   broker_name, m.queue_id, m.queue_offset, m.properties.get(prop.KEYS, ""),
                   m.properties.get(prop.TAGS, ""), m.store_timestamp, len(m.body))


async def by_key(admin: Admin, topic: str, key: str, begin_ms: int, end_ms: int) -> list[Summary]:
    found = await admin.query_by_key(topic, key, begin_ms, end_ms, SEARCH_MAX)
    return [summary(f.message, f.broker_name) for f in found]


async def by_time(admin: Admin, topic: str, begin_ms: int, end_ms: int) -> list[Summary]:
    """Messages of ``topic`` stored in [begin_ms, end_ms], oldest first per queue, at most SEARCH_MAX:
    each queue's offsets at the two times (SEARCH_OFFSET_BY_TIMESTAMP), then pulls between them."""
    route = await admin.route(topic)
    if route is None:
        raise ClientError(f"topic {topic!r} is not known to the NameServers: check its name")
    masters = {b.broker_name: b.broker_addrs[0] for b in route.broker_datas if 0 in b.broker_addrs}
    queues = [(q.broker_name, masters[q.broker_name], i) for q in route.queue_datas if q.broker_name in masters
              for i in range(q.read_queue_nums)]

    async def one(broker: str, addr: str, queue_id: int) -> list[Summary]:
        start = await admin.api.search_offset_by_timestamp(addr, topic, queue_id, begin_ms) or 0
        out: list[Summary] = []
        while len(out) < SEARCH_MAX:
            header = pull_header(BROWSE_GROUP, MessageQueue(topic, broker, queue_id), start,
                                 SEARCH_MAX - len(out), SUB_ALL)
            result = await admin.api.pull_message(addr, header)
            if result.status != PullStatus.FOUND:
                break
            batch = result.messages()
            out += [summary(m, broker) for m in batch if begin_ms <= m.store_timestamp <= end_ms]
            if not batch or batch[-1].store_timestamp > end_ms or result.next_begin_offset <= start:
                break
            start = result.next_begin_offset
        return out

    found = [s for part in await asyncio.gather(*(one(*q) for q in queues)) for s in part]
    found.sort(key=lambda s: (s.store_timestamp, s.broker_name or "", s.queue_id, s.queue_offset))
    return found[:SEARCH_MAX]


@dataclass(frozen=True)
class Body:
    """A body shown three ways: text (None if not UTF-8), pretty JSON (None if not JSON), hex (the first
    HEX_MAX bytes)."""

    size: int
    text: str | None
    json: str | None
    hex: str


def body_views(body: bytes) -> Body:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    shown = body[:HEX_MAX]
    rows = [f"{i:08x}  {shown[i:i + 16].hex(' ')}" for i in range(0, len(shown), 16)]
    return Body(len(body), text, pretty, "\n".join(rows))


async def consumed_by(admin: Admin, found: FoundMessage) -> dict[str, bool]:
    """Each group with offsets of the message's topic: whether its committed offset of the message's queue
    is past the message (it has consumed it). Listing groups is an admin request."""
    m = found.message
    out = {}
    for group, topics in sorted((await admin.groups()).items()):
        if m.topic in topics:
            progress = await admin.group_progress(group, m.topic)
            out[group] = any(q.broker_name == found.broker_name and q.queue_id == m.queue_id
                             and q.consumer_offset > m.queue_offset for q in progress.queues)
    return out


def origin_topic(m: StoredMessage) -> str:
    """The topic a message was first sent to: a retried or dead-lettered copy names it in RETRY_TOPIC."""
    return m.properties.get(prop.RETRY_TOPIC) or m.topic


async def resend(producer: Producer, found: FoundMessage, group: str | None) -> SendResult:
    """Send a copy of ``found``: to ``group`` only (its retry topic, which each member of the group
    consumes as the original topic), or (None) to the topic it was first sent to, for every group.
    A dead-lettered message needs a group: its DLQ names the group it failed in."""
    m = found.message
    if group is None and m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX) and prop.RETRY_TOPIC not in m.properties:
        raise ClientError("this DLQ message does not name its first topic: resend it to its group")
    properties = {k: v for k, v in m.properties.items() if k not in NOT_COPIED}
    properties[prop.ORIGIN_MESSAGE_ID] = found.uniq_key or found.msg_id
    topic = origin_topic(m)
    if group is not None:
        properties[prop.RETRY_TOPIC] = topic
        topic = retry_topic(group)
    copy = Message(topic, m.body, tags=m.properties.get(prop.TAGS) or None,
                   keys=m.properties.get(prop.KEYS) or None, properties=properties)
    return await producer.send(copy)
