"""Offsets, lookups and administration: GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, INVOKE_BROKER_TO_RESET_OFFSET, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID,
UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER, GET_ALL_TOPIC_CONFIG, GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS, GET_PRODUCER_CONNECTION_LIST, GET_CONSUMER_CONNECTION_LIST and GET_BROKER_RUNTIME_INFO (parts of
RocketMQ's AdminBrokerProcessor and QueryMessageProcessor).

A reset (RocketMQ's Broker2Client.resetOffset) moves the group's committed offsets here, then tells the
group's online members (RESET_CONSUMER_CLIENT_OFFSET, oneway) so they adopt the new offsets instead of
committing their old ones over them. Unlike RocketMQ 4.x, a group with no member online is reset too
(RocketMQ answers CONSUMER_NOT_ONLINE and its admin tool falls back to per-queue commits).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from spark_mq import __version__
from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.tiered_offsets import TieredOffsetManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.config import BrokerConfig
from spark_mq.common.errors import RemotingError
from spark_mq.common.unit.layout import STORE_TIMESTAMP_OFFSET
from spark_mq.remoting.bodies import (
    ClientConnection,
    ConsumerConnection,
    ConsumeStats,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    TopicConfig,
    TopicOffset,
    TopicStatsTable,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import LanguageCode, RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

ROCKETMQ_VERSION_DESC = "V4_9_7"  # the protocol level we speak
RESET_TO_MAX = -1  # a reset's timestamp meaning "each queue's max offset" (RocketMQ's)


def last_store_time(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """Store time of the message just before queue offset ``offset`` (0 if none)."""
    if offset <= store.get_min_offset(topic, queue_id):
        return 0
    got = store.get_messages(topic, queue_id, offset - 1, 1)
    if got.count == 0:
        return 0
    return int.from_bytes(got.data[STORE_TIMESTAMP_OFFSET : STORE_TIMESTAMP_OFFSET + 8], "big")


class AdminProcessor:
    """Serves offsets, lookups and administration with the collaborators it is given; runs on the
    broker's event loop."""

    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, clients: ClientRegistry,
                 offsets: ConsumerOffsetManager, tiered: TieredOffsetManager, hold: PullHoldService,
                 metrics: BrokerMetrics, on_topic_changed: Callable[[], None],
                 runtime_extras: Callable[[], dict[str, str]]) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.clients = clients
        self.offsets = offsets
        self.tiered = tiered
        self.hold = hold
        self.metrics = metrics
        self.on_topic_changed = on_topic_changed
        self.runtime_extras = runtime_extras  # brokerRole, HA figures, grpcListenPort, messages held back
        self.started_ms = int(time.time() * 1000)

    def register_on(self, server) -> None:
        for code, handler in {
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topics,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
        }.items():
            server.register(code, handler)

    async def max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        return cmd.make_response(ResponseCode.SUCCESS,
                                 ext_fields={"offset": self.store.get_max_offset(h.topic, h.queue_id)})

    async def min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        return cmd.make_response(ResponseCode.SUCCESS,
                                 ext_fields={"offset": self.store.get_min_offset(h.topic, h.queue_id)})

    async def search_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})

    async def earliest_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext_fields(cmd.ext_fields)
        ts = self.store.get_earliest_store_time(h.topic, h.queue_id)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": max(ts, 0)})

    async def reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Each readable queue of the topic here to its first message stored at or after the time
        (max offset if none is that late); without ``isForce`` a queue whose committed offset is
        already earlier keeps it. Answers the offsets the group now has (ResetOffsetBody)."""
        h = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        broker = self.config.broker_name
        topic = self.topics.get(h.topic)
        if topic is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist on broker {broker}")
        committed = self.offsets.offsets(h.group, h.topic)
        members = self.clients.consumer_group(h.group)
        if not committed and (members is None or not members.channels):
            return cmd.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     f"consumer group {h.group} has no offsets of topic {h.topic} on broker {broker} "
                                     f"and no member online: check the group name (has it consumed this topic?)")
        table: dict[int, int] = {}
        for q in range(topic.read_queue_nums):
            target = (self.store.get_max_offset(h.topic, q) if h.timestamp == RESET_TO_MAX
                      else self.store.get_offset_in_queue_by_time(h.topic, q, h.timestamp))
            current = committed.get(q, -1)
            table[q] = max(target, 0) if h.is_force or current < 0 or target < current else current
        self.offsets.reset(h.group, h.topic, {**committed, **table})
        body = ResetOffsetBody({MessageQueue(h.topic, broker, q): o for q, o in table.items()})
        log.info("offsets of group %s on topic %s reset to time %d (force %s) by %s: %s", h.group, h.topic,
                 h.timestamp, h.is_force, conn.peer, table)
        self._tell_members(h, body)
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    def _tell_members(self, h: ResetOffsetRequestHeader, body: ResetOffsetBody) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET to the group's online members; C++ clients get the body they read
        (RocketMQ's ResetOffsetBodyForC)."""
        members = self.clients.consumer_group(h.group)
        requests = {cpp: RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, h.to_ext_fields(),
                                                 body=body.to_json_for_cpp() if cpp else body.to_json())
                    for cpp in (False, True)}
        for conn, channel in list(members.channels.items()) if members else ():
            with contextlib.suppress(RemotingError):
                conn.send_oneway(requests[channel.language == LanguageCode.CPP.name])

    async def query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        store = self.store
        units = store.query_by_key(h.topic, h.key, max(1, h.max_num), h.begin_timestamp, h.end_timestamp)
        if not units:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     f"can not find message, maybe time range not correct: key {h.key}")
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={
            "indexLastUpdateTimestamp": int(time.time() * 1000),
            "indexLastUpdatePhyoffset": store.commitlog.max_offset(),
        }, body=b"".join(units))

    async def view_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        unit = self.store.look_message_by_offset(h.offset)
        if unit is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return cmd.make_response(ResponseCode.SUCCESS, body=unit)

    async def create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)  # the topic follows the naming rule
        if h.read_queue_nums <= 0 or h.write_queue_nums <= 0:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "readQueueNums and writeQueueNums must be positive")
        self.topics.upsert(TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                                              h.topic_filter_type, h.topic_sys_flag or 0, h.order))
        self.on_topic_changed()
        return cmd.make_response(ResponseCode.SUCCESS)

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_ext_fields(cmd.ext_fields)
        if self.topics.delete(h.topic):
            self.offsets.drop_topic(h.topic)
            self.tiered.drop_topic(h.topic)
            self.store.delete_topic(h.topic)
            self.on_topic_changed()
        return cmd.make_response(ResponseCode.SUCCESS)

    async def all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=self.topics.wrapper().to_json())

    async def topic_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        topic = self.topics.get(h.topic)
        if topic is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table = {}
        for q in range(topic.write_queue_nums):
            hi = self.store.get_max_offset(h.topic, q)
            table[MessageQueue(h.topic, self.config.broker_name, q)] = TopicOffset(
                self.store.get_min_offset(h.topic, q), hi, last_store_time(self.store, h.topic, q, hi))
        return cmd.make_response(ResponseCode.SUCCESS, body=TopicStatsTable(table).to_json())

    async def producer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The producers that announced the group (RocketMQ's ``getProducerConnectionList``)."""
        h = GetProducerConnectionListRequestHeader.from_ext_fields(cmd.ext_fields)
        live = [c for c in self.clients.producer_channels(h.producer_group) if not c.conn.closed]
        if not live:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist")
        body = ProducerConnection([ClientConnection(c.client_id, c.conn.peer, c.language, c.version) for c in live])
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    async def consumer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The group's online consumers (remoting and 5.x gRPC clients) and their subscriptions (RocketMQ's
        ``getConsumerConnectionList``)."""
        h = GetConsumerConnectionListRequestHeader.from_ext_fields(cmd.ext_fields)
        info = self.clients.consumer_group(h.consumer_group)
        live = [c for c in info.channels.values() if not c.conn.closed] if info else []
        if info is None or not live:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                     f"the consumer group[{h.consumer_group}] not online")
        body = ConsumerConnection([ClientConnection(c.client_id, c.conn.peer, c.language, c.version) for c in live],
                                  dict(info.subscriptions), info.consume_type, info.message_model,
                                  info.consume_from_where)
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    async def consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext_fields(cmd.ext_fields)
        info = self.clients.consumer_group(h.consumer_group)
        topics = {h.topic} if h.topic else {
            t for t in self.topics.topics if self.offsets.offsets(h.consumer_group, t)
        } | set(info.subscriptions if info else ())
        table = {}
        for t in sorted(topics):
            topic = self.topics.get(t)
            if topic is None:
                continue
            for q in range(topic.write_queue_nums):
                committed = self.offsets.query(h.consumer_group, t, q)
                table[MessageQueue(t, self.config.broker_name, q)] = OffsetWrapper(
                    self.store.get_max_offset(t, q), max(committed, 0),
                    last_store_time(self.store, t, q, committed) if committed > 0 else 0)
        if not table:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                     f"the consumer group[{h.consumer_group}] not online and has no offsets")
        tps = self.metrics.consume_tps(h.consumer_group, time.monotonic())
        return cmd.make_response(ResponseCode.SUCCESS, body=ConsumeStats(table, tps).to_json())

    async def runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        store = self.store
        table = {
            "brokerVersionDesc": ROCKETMQ_VERSION_DESC,
            "sparkMqVersion": __version__,
            "msgPutTotalTodayNow": str(self.metrics.put_total()),
            "msgGetTotalTodayNow": str(self.metrics.get_total()),
            "commitLogMinOffset": str(store.commitlog.min_offset()),
            "commitLogMaxOffset": str(store.commitlog.max_offset()),
            "commitLogDiskRatio": f"{store.retention.disk_ratio(store.root):.4f}",
            "dispatchBehindMessages": str(store.dispatch_backlog()),
            "pullHoldWaiters": str(self.hold.waiting),
            "topicCount": str(len(self.topics.topics)),
            "bootTimestamp": str(self.started_ms),
            "flushDiskType": self.config.flush_disk_type,
            "storeWritable": str(store.write_refusal is None).lower(),
            **self.runtime_extras(),
        }
        return cmd.make_response(ResponseCode.SUCCESS, body=KVTable(table).to_json())
