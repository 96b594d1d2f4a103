"""The revive service (RocketMQ's PopReviveService): redelivers what pops handed out and nobody
acknowledged within its invisible time, and rebuilds the open checkpoints from the revive topic at start.

A due checkpoint's unacknowledged messages are copied to the group's pop retry topic
``%RETRY%<group>_<topic>`` with ``reconsumeTimes + 1`` (a message already at the group's
``retryMaxTimes`` goes to ``%DLQ%<group>`` instead), through the same copy the send-back path makes
(``RetryScheduler.store_copy``: ``RETRY_TOPIC`` and ``ORIGIN_MESSAGE_ID`` set); then an ack record for
them closes the checkpoint, so a replay after a restart does not redeliver them twice.

The revive group's offset in the revive queue (``CID_RMQ_SYS_REVIVE_GROUP``, kept with the consumer
offsets, so a slave has it too) is the oldest open checkpoint's record: a replay starts there. A master
(and a slave promoted to master: its broker is started anew) replays at start; a slave does not revive.

Thread-safety: used from the broker's event loop only; ``revive_due`` takes the time as an argument.
"""

from __future__ import annotations

import asyncio
import logging

from spark_mq.broker.pop.records import ACK_TAG, BATCH_ACK_TAG, CK_TAG, REVIVE_GROUP, Ack, Checkpoint
from spark_mq.broker.pop.service import REVIVE_QUEUE_ID, PopError, PopService
from spark_mq.broker.processors.retry import PendingRetry, RetryScheduler
from spark_mq.common.errors import BodyError, MessageValidationError, StoreNotWritableError
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.names import DLQ_GROUP_TOPIC_PREFIX, dlq_topic
from spark_mq.common.properties import ORIGIN_MESSAGE_ID, RETRY_TOPIC, TAGS, UNIQ_KEY
from spark_mq.common.unit.decode import decode_message, decode_messages
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.pop_receipt import pop_retry_topic
from spark_mq.store.results import GetStatus

log = logging.getLogger(__name__)

POLL_S = 0.1  # how late a redelivery may be
REPLAY_BATCH = 256  # revive records read at once at start


class ReviveService:
    def __init__(self, pops: PopService, retry: RetryScheduler) -> None:
        self.pops = pops
        self.retry = retry

    def _end(self) -> int:
        """The revive queue's end. A master's is read without dispatching anything (``written_offset``): this is
        asked at every poll, and a read by queue offset would dispatch every append so far on the event loop,
        ten times a second, whether or not anyone pops."""
        store = self.pops.store
        if store.config.is_slave:
            return store.get_max_offset(self.pops.revive_topic, REVIVE_QUEUE_ID)
        return store.written_offset(self.pops.revive_topic, REVIVE_QUEUE_ID)

    def replay(self) -> int:
        """Rebuild the open checkpoints from the revive queue, from the revive group's offset; a group's pop
        offset moves past every checkpoint's messages (its file may be older than the log). Returns how
        many checkpoints are open."""
        p = self.pops
        offset = max(p.offsets.query(REVIVE_GROUP, p.revive_topic, REVIVE_QUEUE_ID),
                     p.store.get_min_offset(p.revive_topic, REVIVE_QUEUE_ID))
        while True:
            result = p.store.get_messages(p.revive_topic, REVIVE_QUEUE_ID, offset, REPLAY_BATCH)
            if result.status != GetStatus.FOUND:
                break
            for msg in decode_messages(result.data, result.unit_starts().tolist()):
                self._apply(msg.properties.get(TAGS), msg.body, msg.queue_offset)
            offset = result.next_begin_offset
        if len(p.checkpoints):
            log.info("pop: %d checkpoints with unacknowledged messages reopened from %s", len(p.checkpoints),
                     p.revive_topic)
        return len(p.checkpoints)

    def _apply(self, tag: str | None, body: bytes, revive_offset: int) -> None:
        p = self.pops
        try:
            if tag == CK_TAG:
                ck = Checkpoint.from_json(body)
                p.checkpoints.add(Checkpoint(**{**ck.__dict__, "revive_offset": revive_offset}))
                if ck.offsets:
                    committed = p.offsets.query(ck.group, ck.topic, ck.queue_id)
                    p.offsets.commit(ck.group, ck.topic, ck.queue_id, max(committed, max(ck.offsets) + 1))
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                ack = Ack.from_json(body)
                p.checkpoints.ack(ack.key, ack.offsets)
        except BodyError as e:
            log.warning("pop: revive record %d of %s skipped: %s", revive_offset, p.revive_topic, e)

    def revive_due(self, now_ms: int) -> int:
        """Redeliver the unacknowledged messages of every checkpoint due at ``now_ms``; returns how many."""
        p = self.pops
        revived = 0
        for ck, pending in p.checkpoints.due(now_ms):
            max_times = p.groups.find(ck.group).retry_max_times
            for offset in pending:
                self._redeliver(ck.group, ck.topic, ck.queue_id, offset, max_times)
            try:
                p.log_ack(Ack(ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time, tuple(pending),
                              p.broker_name))
            except StoreNotWritableError as e:
                log.warning("pop: revive postponed: %s", e)
                break
            p.checkpoints.ack(ck.key, tuple(pending))
            revived += len(pending)
        start = p.checkpoints.revive_offset(-1)  # -1: no checkpoint is open (their records' offsets are >= 0)
        if start < 0:
            start = self._end()
        if start != p.offsets.query(REVIVE_GROUP, p.revive_topic, REVIVE_QUEUE_ID):
            p.offsets.commit(REVIVE_GROUP, p.revive_topic, REVIVE_QUEUE_ID, start)
        return revived

    async def forward_to_dlq(self, group: str, topic: str, receipt: str, queue_offset: int | None = None) -> None:
        """Move the in-flight message ``receipt`` names to ``%DLQ%<group>`` now (gRPC's
        ForwardMessageToDeadLetterQueue) and acknowledge it. Raises PopError as ``PopService.ack``."""
        r, offset = self.pops.parse_receipt(receipt, queue_offset)
        real = r.real_topic(group, topic)
        key = (group, real, r.queue_id, r.ck_offset, r.pop_time)
        if not r.order and not self.pops.checkpoints.pending(key, offset):
            raise PopError(ResponseCode.NO_MESSAGE, f"message {offset} of queue {r.queue_id} of {real} is not in "
                                                    f"flight for group {group}")
        self._redeliver(group, real, r.queue_id, offset, 0)
        await self.pops.ack(group, topic, receipt, queue_offset)

    def _redeliver(self, group: str, topic: str, queue_id: int, offset: int, max_times: int) -> None:
        """Copy the message at ``offset`` to the pop retry topic, or to the DLQ once it was delivered
        ``max_times`` times after its first delivery."""
        p = self.pops
        result = p.store.get_messages(topic, queue_id, offset, 1)
        if result.status != GetStatus.FOUND or int(result.queue_offsets[0]) != offset:
            log.warning("pop: message %d of queue %d of %s (group %s) is no longer stored: not redelivered",
                        offset, queue_id, topic, group)
            return
        msg = decode_message(result.data)
        first_topic = msg.properties.get(RETRY_TOPIC) or msg.topic
        origin = msg.properties.get(ORIGIN_MESSAGE_ID) or msg.properties.get(UNIQ_KEY) \
            or offset_msg_id(msg.store_host, msg.physical_offset)
        target = dlq_topic(group) if msg.reconsume_times >= max_times else pop_retry_topic(group, first_topic)
        if target.startswith(DLQ_GROUP_TOPIC_PREFIX):
            self.retry.ensure_topic(target)
            log.info("pop: message %s of group %s moved to %s after %d deliveries", origin, group, target,
                     msg.reconsume_times + 1)
        else:
            p.ensure_retry_topic(group, first_topic)
        try:
            self.retry.store_copy(PendingRetry(0, p.now_ms(), msg.physical_offset, target, msg.reconsume_times + 1,
                                               first_topic, origin))
        except MessageValidationError as e:
            log.error("pop: redelivery of message %s of group %s dropped: %s", origin, group, e)

    async def run(self) -> None:
        """Redeliver as checkpoints fall due (checked every ``POLL_S``), until cancelled."""
        while True:
            await asyncio.sleep(POLL_S)
            try:
                self.revive_due(self.pops.now_ms())
            except Exception:  # retried at the next poll; the broker keeps serving
                log.exception("pop: revive failed")
