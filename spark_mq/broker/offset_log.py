"""A master's consumer-offset log, ``rmq_sys_CONSUMER_OFFSET_LOG_<broker>``: every change of a committed offset
(commit, reset, dropped group or topic) as a record in the commitlog, so that it replicates with the messages.

A slave copies its master's offset table only every slaveSynchronizeInterval; a slave promoted in between
would start from that older table and answer offsets lower than what the consumers had committed. Instead, a
master (and a slave promoted to master: its broker is started anew) replays at start the records past the
log group's offset (``CID_RMQ_SYS_OFFSET_LOG_GROUP``, kept in the table itself, so the slave's copy says how
far that copy is): a commit only where it is ahead, a reset or a drop as it was. consumerOffset.json stays
the source at restart; replay only brings what is newer than its copy.

A commit is answered to consumers (QUERY_CONSUMER_OFFSET, ``ConsumerOffsetManager.answer``) only once its
record is on the replicas sends wait for (allAckInSyncStateSet, minInSyncReplicas, SYNC_MASTER): until then a
consumer is told the offset before it, so that no master elected meanwhile tells a consumer less than it was
told before (an isolated master keeps taking oneway commits it cannot replicate). Resets and drops are
answered at once.

One record holds the changes of one turn of the event loop, as a JSON list of ``[kind, "topic@group", queue
id, offset]`` (kinds ``c``, ``r``, ``d`` as ``consumer_offsets.OffsetChange``). The log is an ordinary topic
(one queue, normal retention): the log group's offset is its end, so it holds nothing back.

Thread-safety: used from the broker's event loop only (``replay`` before it is enabled, from any thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from spark_mq.broker.consumer_offsets import COMMIT, ConsumerOffsetManager, OffsetChange
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.errors import MessageValidationError, StoreNotWritableError
from spark_mq.common.message import MessageBatch
from spark_mq.common.unit.decode import decode_messages
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus

log = logging.getLogger(__name__)

OFFSET_LOG_TOPIC_PREFIX = "rmq_sys_CONSUMER_OFFSET_LOG_"
OFFSET_LOG_GROUP = "CID_RMQ_SYS_OFFSET_LOG_GROUP"  # its offset in the log: where a replay starts
LOG_QUEUE_ID = 0
REPLAY_BATCH = 256  # records read at once at start
RETRY_S = 0.1  # how soon the records are waited for again after the replicas did not confirm them in time

QueueKey = tuple[str, int]
"""(``topic@group``, queue id)."""


class OffsetLog:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 broker_name: str, on_topic_created: Callable[[], None],
                 replicated: Callable[[int], Awaitable[bool]]) -> None:
        """``replicated(end)``: as PopService's, whether the replicas sends wait for have the commitlog below
        ``end`` in time."""
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.topic = OFFSET_LOG_TOPIC_PREFIX + broker_name
        self.on_topic_created = on_topic_created
        self.replicated = replicated
        self.written_end = 0  # commitlog offset past the last record written
        self._pending: list[OffsetChange] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._told: dict[QueueKey, int] = {}  # what consumers are told while a commit of the queue is unconfirmed
        self._unconfirmed: dict[QueueKey, list[tuple[int, int]]] = {}  # (record end, offset), oldest first
        self._written = asyncio.Event()

    def replay(self) -> int:
        """Apply the records past the log group's offset; returns how many offsets they moved."""
        o = self.offsets
        offset = max(o.query(OFFSET_LOG_GROUP, self.topic, LOG_QUEUE_ID),
                     self.store.get_min_offset(self.topic, LOG_QUEUE_ID))
        moved = 0
        while True:
            result = self.store.get_messages(self.topic, LOG_QUEUE_ID, offset, REPLAY_BATCH)
            if result.status != GetStatus.FOUND:
                break
            for msg in decode_messages(result.data, result.unit_starts().tolist()):
                try:
                    moved += o.replay([(str(k), str(key), int(q), int(v)) for k, key, q, v in json.loads(msg.body)])
                except (ValueError, TypeError) as e:
                    log.warning("offset log: record %d of %s skipped: %r", msg.queue_offset, self.topic, e)
            offset = result.next_begin_offset
        o.commit(OFFSET_LOG_GROUP, self.topic, LOG_QUEUE_ID, offset)
        if moved:
            log.info("offset log: %d committed offsets moved forward by %s", moved, self.topic)
        return moved

    def enable(self) -> None:
        """From now on, every change of the offsets is logged (call on the event loop, after ``replay``)."""
        self._loop = asyncio.get_running_loop()
        self.offsets.journal = self

    def note(self, changes: list[OffsetChange]) -> None:
        """Changes about to be made now: written together at the end of this turn of the event loop."""
        if not self._pending:
            assert self._loop is not None
            self._loop.call_soon(self.flush)
        self._pending.extend(changes)
        for kind, key, queue_id, _ in changes:
            if kind == COMMIT:
                self._told.setdefault((key, queue_id), self.offsets.of_key(key, queue_id))
            else:  # a reset or drop is answered at once
                for q in [k for k in self._told if k[0] == key]:
                    self._told.pop(q)
                    self._unconfirmed.pop(q, None)

    def confirmed(self, key: str, queue_id: int, offset: int) -> int:
        """``offset`` (the table's), or the last one of the queue on the replicas while a later one is not."""
        return self._told.get((key, queue_id), offset)

    def _confirm(self, end: int) -> None:
        """The records below commitlog offset ``end`` are on the replicas."""
        pending = {(key, q) for _, key, q, _ in self._pending}
        for k in list(self._unconfirmed):
            waiting = self._unconfirmed[k]
            while waiting and waiting[0][0] <= end:
                self._told[k] = waiting.pop(0)[1]
            if not waiting and k not in pending:
                del self._unconfirmed[k]
                self._told.pop(k, None)

    def flush(self) -> None:
        """Write what was noted as one record, and move the log group's offset past it."""
        if not self._pending:
            return
        changes, self._pending = self._pending, []
        body = json.dumps(changes, separators=(",", ":")).encode()
        if self.topics.ensure_system_topic(self.topic):
            self.on_topic_created()
        try:
            result = self.store.put_messages(MessageBatch.of(self.topic, LOG_QUEUE_ID, [body]),
                                             wait_flush=False)
        except (StoreNotWritableError, MessageValidationError) as e:
            log.warning("offset log: %d bytes of offset changes not logged (a slave promoted now would not have "
                        "them): %s", len(body), e)
            return
        self.written_end = max(self.written_end, result.end_offset)
        self.offsets.commit(OFFSET_LOG_GROUP, self.topic, LOG_QUEUE_ID, result.queue_offset + 1)
        for kind, key, queue_id, offset in changes:
            if kind == COMMIT and (key, queue_id) in self._told:
                self._unconfirmed.setdefault((key, queue_id), []).append((result.end_offset, offset))
        self._written.set()

    async def recorded(self) -> bool:
        """Whether the changes so far are on the replicas sends wait for (within syncFlushTimeout)."""
        self.flush()
        end = self.written_end
        if not await self.replicated(end):
            return False
        self._confirm(end)
        return True

    async def run(self) -> None:
        """Confirm the records as the replicas get them (what consumers are told follows), until cancelled."""
        while True:
            await self._written.wait()
            self._written.clear()
            end = self.written_end
            if await self.replicated(end):
                self._confirm(end)
            else:
                self._written.set()
                await asyncio.sleep(RETRY_S)
