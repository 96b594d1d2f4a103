"""CONSUMER_SEND_MSG_BACK (RocketMQ's ``SendMessageProcessor.consumerSendMsgBack``) and the
delayed redelivery it asks for.

A consumer that failed to consume a message sends it back by commitlog offset. The broker looks
the unit up and, after the delay of the requested level, stores a copy in the group's retry
topic ``%RETRY%<group>`` (one queue, created on demand) with ``reconsumeTimes + 1`` and the
properties ``RETRY_TOPIC`` (the topic the message was first sent to, kept across retries) and
``ORIGIN_MESSAGE_ID``. A message whose ``reconsumeTimes`` reached ``maxReconsumeTimes`` (16 by
default), or sent back with a negative delay level, goes at once to ``%DLQ%<group>`` instead.

Delay levels are RocketMQ's ``messageDelayLevel`` (``1s 5s 10s 30s 1m ... 2h``, level 1 is the
first); level 0 means "the broker decides": ``3 + reconsumeTimes``, capped at the last level.

Where RocketMQ parks a delayed message in ``SCHEDULE_TOPIC_XXXX`` and keeps per-level progress
in ``delayOffset.json``, we keep the pending redeliveries themselves in ``delayOffset.json``::

    {"pendingRetries": [{"id": 7, "dueMs": 1700000000000, "physOffset": 4242, "topic": "%RETRY%g",
                         "reconsumeTimes": 1, "retryTopic": "orders", "originMsgId": "..."}]}

An entry names the original unit by commitlog offset (the unit itself stays in the commitlog),
so the file stays small. It is written (atomically, fsynced) before the send-back is answered,
and again once an entry is stored, so a broker restart neither loses a redelivery nor, short of
a crash between the two writes, repeats one.

Thread-safety: used from the broker's event loop only; ``deliver_due`` is synchronous and takes
the time as an argument, so tests drive it without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels
from spark_mq.common.errors import MessageValidationError, StoreNotWritableError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.names import dlq_topic, retry_topic
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.common.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, UNIQ_KEY, encode_properties
from spark_mq.common.unit.decode import decode_message
from spark_mq.remoting.bodies import TopicConfig
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader
from spark_mq.store.config_file import JsonConfigFile
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes
POLL_S = 0.1  # how late a redelivery may be stored


@lazy_dataclass(frozen=True)
class PendingRetry(LazyDataclass):
    """One redelivery waiting for its time: the unit at ``phys_offset`` goes to ``topic``."""

    id: int
    due_ms: int
    phys_offset: int
    topic: str
    reconsume_times: int
    retry_topic: str
    origin_msg_id: str

    def to_obj(self) -> dict[str, object]:
        return {"id": self.id, "dueMs": self.due_ms, "physOffset": self.phys_offset, "topic": self.topic,
                "reconsumeTimes": self.reconsume_times, "retryTopic": self.retry_topic,
                "originMsgId": self.origin_msg_id}

    @classmethod
    def from_obj(cls, o: dict[str, object]) -> PendingRetry:
        return cls(int(o["id"]), int(o["dueMs"]), int(o["physOffset"]), str(o["topic"]),  # type: ignore[arg-type]
                   int(o["reconsumeTimes"]), str(o["retryTopic"]), str(o["originMsgId"]))  # type: ignore[arg-type]


class SendBackError(Exception):
    """A send-back the broker cannot honour; ``code`` is the response code to answer with."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


# (topic, queue id, next queue offset) of each stored copy: the broker wakes held pulls with it
Stored = Callable[[str, int, int], None]


class RetryScheduler:
    """Send-backs to retry/DLQ topics, delayed by level, persisted in ``delayOffset.json``."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, file: JsonConfigFile, *,
                 delay_levels: str = DEFAULT_DELAY_LEVELS, on_stored: Stored | None = None,
                 on_topic_created: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.topics = topics
        self.file = file
        self.delays_ms = parse_delay_levels(delay_levels)
        self.on_stored = on_stored or (lambda topic, queue_id, next_offset: None)
        self.on_topic_created = on_topic_created or (lambda: None)
        self.clock = clock
        self.pending: dict[int, PendingRetry] = {}
        self._next_id = 1

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- persistence ---------------------------------------------------------------------------
    def load(self) -> None:
        raw = self.file.load({}) or {}
        entries = [PendingRetry.from_obj(o) for o in raw.get("pendingRetries", [])]
        self.pending = {e.id: e for e in entries}
        self._next_id = max(self.pending, default=0) + 1
        if self.pending:
            log.info("%d delayed redeliveries pending from before the restart", len(self.pending))

    def persist(self) -> None:
        self.file.persist({"pendingRetries": self.pending_objs()})

    def pending_objs(self) -> list[dict[str, object]]:
        """The pending redeliveries as ``delayOffset.json`` holds them, soonest first."""
        return [e.to_obj() for e in sorted(self.pending.values(), key=lambda e: (e.due_ms, e.id))]

    def replace(self, objs: list[dict[str, object]]) -> None:
        """Hold ``objs`` (a master's pending redeliveries) instead of ours, persisted: a slave keeps
        them for when it serves as master (the file is rewritten only when they differ from ours: a slave
        takes them every sync round). Raises KeyError/ValueError/TypeError for a malformed entry."""
        pending = {e.id: e for e in (PendingRetry.from_obj(o) for o in objs)}
        if pending == self.pending:
            return
        self.pending = pending
        self._next_id = max(self.pending, default=0) + 1
        self.persist()

    # -- send-back -----------------------------------------------------------------------------
    def delay_ms(self, level: int) -> int:
        return self.delays_ms[min(max(level, 1), len(self.delays_ms)) - 1]

    def send_back(self, h: ConsumerSendMsgBackRequestHeader) -> PendingRetry:
        """Schedule the redelivery ``h`` asks for (persisted before returning); a message past its
        retries (or sent with a negative level) is stored in the DLQ at once. Raises SendBackError."""
        unit = self.store.look_message_by_offset(h.offset)
        if unit is None:
            raise SendBackError(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        msg = decode_message(unit)
        max_times = DEFAULT_MAX_RECONSUME_TIMES if h.max_reconsume_times is None else h.max_reconsume_times
        origin = h.origin_msg_id or msg.properties.get(ORIGIN_MESSAGE_ID) or msg.properties.get(UNIQ_KEY) \
            or offset_msg_id(msg.store_host, msg.physical_offset)
        first_topic = msg.properties.get(RETRY_TOPIC) or msg.topic
        now = self.now_ms()
        if msg.reconsume_times >= max_times or h.delay_level < 0:
            target, due = dlq_topic(h.group), now
        else:
            target = retry_topic(h.group)
            level = h.delay_level if h.delay_level > 0 else 3 + msg.reconsume_times
            due = now + self.delay_ms(level)
        self.ensure_topic(target)
        entry = PendingRetry(self._next_id, due, h.offset, target, msg.reconsume_times + 1, first_topic, origin)
        self._next_id += 1
        self.pending[entry.id] = entry
        if due <= now:
            self.deliver_due(now)  # the DLQ copy is stored before the answer
        else:
            self.persist()
        return entry

    def ensure_topic(self, name: str) -> None:
        if self.topics.get(name) is None:
            # RocketMQ makes a DLQ write-only; ours is readable so it can be inspected and replayed
            self.topics.upsert(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
            self.on_topic_created()

    # -- delivery ------------------------------------------------------------------------------
    def deliver_due(self, now_ms: int | None = None) -> int:
        """Store every entry due at ``now_ms``; returns how many were stored. An entry whose unit
        is gone (retention deleted it) is dropped with a warning; one the store refuses stays."""
        now = self.now_ms() if now_ms is None else now_ms
        due = sorted((e for e in self.pending.values() if e.due_ms <= now), key=lambda e: (e.due_ms, e.id))
        stored = 0
        for entry in due:
            try:
                self.store_copy(entry)
            except StoreNotWritableError as e:
                log.warning("redelivery of commitlog offset %d to %s postponed: %s", entry.phys_offset, entry.topic, e)
                break
            except MessageValidationError as e:
                log.error("redelivery of commitlog offset %d to %s dropped: %s", entry.phys_offset, entry.topic, e)
            del self.pending[entry.id]
            stored += 1
        if due:
            self.persist()
        return stored

    def store_copy(self, entry: PendingRetry) -> None:
        """Store now the copy ``entry`` describes (pop's revive service redelivers through it too)."""
        unit = self.store.look_message_by_offset(entry.phys_offset)
        if unit is None:
            log.warning("redelivery to %s dropped: commitlog offset %d is no longer stored", entry.topic,
                        entry.phys_offset)
            return
        msg = decode_message(unit)
        props = dict(msg.properties)
        props.pop(DELAY, None)
        props[RETRY_TOPIC] = entry.retry_topic
        props[ORIGIN_MESSAGE_ID] = entry.origin_msg_id
        batch = MessageBatch.of(entry.topic, 0, [msg.body], [encode_properties(props)],
                                born_timestamp=msg.born_timestamp, born_host=msg.born_host)
        batch.flags[:] = msg.flag
        batch.sys_flags[:] = msg.sys_flag
        batch.reconsume_times[:] = entry.reconsume_times
        result = self.store.put_messages(batch, wait_flush=False)
        self.on_stored(entry.topic, 0, result.queue_offset + 1)

    async def run(self) -> None:
        """Deliver entries as they fall due (checked every ``POLL_S``), until cancelled. A plain
        sleep, not ``wait_for`` on an event: cancellation must never be swallowed at shutdown."""
        while True:
            await asyncio.sleep(POLL_S)
            if self.pending:
                try:
                    self.deliver_due()
                except Exception:  # retried at the next poll; the broker keeps serving
                    log.exception("delayed redelivery failed")


class SendBackProcessor:
    """Serves CONSUMER_SEND_MSG_BACK with the broker's ``RetryScheduler``."""

    def __init__(self, scheduler: RetryScheduler) -> None:
        self.scheduler = scheduler

    def register_on(self, server) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            entry = self.scheduler.send_back(h)
        except SendBackError as e:
            return cmd.make_response(e.code, str(e))
        except StoreNotWritableError as e:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        log.debug("send-back of offset %d from group %s: %s (reconsume %d) due at %d", h.offset, h.group,
                  entry.topic, entry.reconsume_times, entry.due_ms)
        return cmd.make_response(ResponseCode.SUCCESS)
