"""UPDATE_TIERED_OFFSET and QUERY_TIERED_OFFSET: spark_mq's own requests (no RocketMQ
counterpart), through which offload jobs record how far each queue is archived and learn which
range of it is cold (stored in full commitlog files, the ones retention may delete).

A request the broker cannot honour is answered with an error code and a remark saying why:
TOPIC_NOT_EXIST for an unknown topic; INVALID_PARAMETER for a queue id outside the topic's
queues, a negative offset, an offset past the queue's max offset, or one below the recorded
offset (watermarks never move back; sending the recorded offset again succeeds, changing nothing).
Watermarks are kept whether tieredStoreEnable is on or not: it only decides whether retention
waits for them.

GET_ALL_TIERED_OFFSET (also spark_mq's own) answers the whole table: a slave copies its master's
watermarks with it (SlaveSynchronize), so its retention waits for the same archive. A slave refuses
UPDATE_TIERED_OFFSET (SERVICE_NOT_AVAILABLE, naming its master): its next sync would replace the
watermark anyway, possibly by a lower one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.broker.tiered_offsets import TieredOffsetManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    QueryTieredOffsetRequestHeader,
    QueryTieredOffsetResponseHeader,
    UpdateTieredOffsetRequestHeader,
)
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class TieredOffsetProcessor:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, tiered: TieredOffsetManager,
                 slave_refusal: Callable[[], str | None] = lambda: None) -> None:
        """``slave_refusal()``: why this broker refuses writes (it is a slave), else None."""
        self.store = store
        self.topics = topics
        self.tiered = tiered
        self.slave_refusal = slave_refusal

    def register_on(self, server) -> None:
        server.register(RequestCode.UPDATE_TIERED_OFFSET, self.update)
        server.register(RequestCode.QUERY_TIERED_OFFSET, self.query)
        server.register(RequestCode.GET_ALL_TIERED_OFFSET, self.all_offsets)

    def _unknown_queue(self, cmd: RemotingCommand, topic: str, queue_id: int) -> RemotingCommand | None:
        """The error response when ``topic``:``queue_id`` is not a queue of this broker, else None."""
        config = self.topics.get(topic)
        if config is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue_id < queues:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"queueId {queue_id} is not a queue of topic {topic} (queues 0..{queues - 1})")
        return None

    async def update(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        refusal = self.slave_refusal()
        if refusal is not None:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        h = UpdateTieredOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        refused = self._unknown_queue(cmd, h.topic, h.queue_id)
        if refused is not None:
            return refused
        queue = f"{h.topic}:{h.queue_id}"
        current = self.tiered.get(h.topic, h.queue_id)
        max_offset = self.store.get_max_offset(h.topic, h.queue_id)
        if h.offset < 0:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, f"tiered offset {h.offset} of {queue} is negative")
        if h.offset > max_offset:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"tiered offset {h.offset} of {queue} is past the queue's max offset {max_offset}")
        if h.offset < current:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER,
                                     f"tiered offset of {queue} is {current} already and never moves back "
                                     f"(asked for {h.offset})")
        try:
            changed = self.tiered.set(h.topic, h.queue_id, h.offset)
        except OSError as e:
            log.error("cannot persist the tiered offset of %s: %s", queue, e)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"cannot persist the tiered offset of {queue}: {e}")
        if changed:
            log.info("%s archived up to queue offset %d (from %d)", queue, h.offset, current)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def query(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueryTieredOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        refused = self._unknown_queue(cmd, h.topic, h.queue_id)
        if refused is not None:
            return refused
        store = self.store
        out = QueryTieredOffsetResponseHeader(
            offset=self.tiered.get(h.topic, h.queue_id),
            min_offset=store.get_min_offset(h.topic, h.queue_id),
            cold_offset=store.get_cold_offset(h.topic, h.queue_id),
            max_offset=store.get_max_offset(h.topic, h.queue_id),  # read last: never below the cold offset
        )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=out.to_ext_fields())

    async def all_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=self.tiered.to_json())
