"""Client-facing group requests: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
QUERY/UPDATE_CONSUMER_OFFSET, LOCK_BATCH_MQ/UNLOCK_BATCH_MQ (RocketMQ's ClientManageProcessor,
ConsumerManageProcessor and the lock part of AdminBrokerProcessor).

Every change of a consumer group's membership is pushed to its members as a oneway
NOTIFY_CONSUMER_IDS_CHANGED so they rebalance at once instead of at their next 20 s tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.queue_locks import QueueLockManager
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.remoting.bodies import (
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ClientProcessor:
    """Serves the group requests with the collaborators it is given; runs on the broker's event loop."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, clients: ClientRegistry,
                 offsets: ConsumerOffsetManager, locks: QueueLockManager, filters: Sql92Filters,
                 on_topic_created: Callable[[], None], notify_group_changes: Callable[[Iterable[str]], None]) -> None:
        self.store = store
        self.topics = topics
        self.clients = clients
        self.offsets = offsets
        self.locks = locks
        self.filters = filters
        self.on_topic_created = on_topic_created
        self.notify_group_changes = notify_group_changes

    def register_on(self, server) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock)
        server.on_connect(lambda conn: conn.on_close(self._closed))

    def _closed(self, conn: Connection) -> None:
        self.notify_group_changes(self.clients.drop_connection(conn))

    async def heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        hb = HeartbeatData.from_json(cmd.body)
        for p in hb.producer_data_set:
            self.clients.register_producer(p.group_name, hb.client_id, conn, cmd.language, cmd.version)
        changed = []
        for c in hb.consumer_data_set:
            if c.message_model == "CLUSTERING" and self.topics.ensure_retry_topic(c.group_name):
                self.on_topic_created()
            if self.clients.register_consumer(c, hb.client_id, conn, cmd.language, cmd.version):
                log.info("consumer %s joined group %s", hb.client_id, c.group_name)
                changed.append(c.group_name)
        self.notify_group_changes(changed)
        # registered as RocketMQ registers them (membership still counts), but a subscription the
        # broker cannot serve (SQL92 switched off, a bad expression) is told at once; its pulls fail too
        for c in hb.consumer_data_set:
            for sub in c.subscription_data_set:
                found = self.filters.resolve(cmd, c.group_name, sub.topic, sub.expression_type, sub.sub_string,
                                             conn.peer)
                if isinstance(found, RemotingCommand):
                    return found
        return cmd.make_response(ResponseCode.SUCCESS)

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
        changed = self.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
        self.notify_group_changes(changed)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        info = self.clients.consumer_group(h.consumer_group)
        if info is None or not info.channels:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return cmd.make_response(ResponseCode.SUCCESS,
                                 body=GetConsumerListByGroupResponseBody(info.client_ids()).to_json())

    async def query_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.offsets.answer(h.consumer_group, h.topic, h.queue_id)
        # RocketMQ 5: a client that resolves its own start (consume-from) sends setZeroIfNotFound=false
        zero_if_not_found = str(cmd.ext_fields.get("setZeroIfNotFound", "true")).lower() != "false"
        if offset < 0 and zero_if_not_found and self.store.get_min_offset(h.topic, h.queue_id) <= 0:
            offset = 0  # the queue still starts at 0: a new group may read it from the start
        if offset < 0:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})

    async def update_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if not cmd.is_oneway and not await self.offsets.recorded():
            return cmd.make_response(ResponseCode.FLUSH_SLAVE_TIMEOUT, "offset committed but not replicated to the "
                                                                       "slaves in time: commit it again")
        return cmd.make_response(ResponseCode.SUCCESS)

    async def lock(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = LockBatchRequestBody.from_json(cmd.body)
        held = self.locks.try_lock(req.consumer_group, req.mq_set, req.client_id)
        ordered = [mq for mq in req.mq_set if mq in held]
        return cmd.make_response(ResponseCode.SUCCESS, body=LockBatchResponseBody(ordered).to_json())

    async def unlock(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = UnlockBatchRequestBody.from_json(cmd.body)
        self.locks.unlock(req.consumer_group, req.mq_set, req.client_id)
        return cmd.make_response(ResponseCode.SUCCESS)
