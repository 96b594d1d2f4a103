"""``AdminRequests``: what tools ask a broker or a controller — message lookups by key, id and
commitlog offset, runtime and consumption stats, the controller's metadata and SyncStateSets, topic
creation and deletion (the requests of RocketMQ's ``mqadmin`` behind :mod:`spark_mq.client.admin`).

Thread-safety: coroutines of one event loop, as the API's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from spark_mq.client.requester import Requester
from spark_mq.client.results import decode_units_list
from spark_mq.common.message import unpack_host
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.perm import PERM_READ_WRITE
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import (
    BrokerReplicasInfo,
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    EpochHistory,
    KVTable,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicStatsTable,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetMetaDataResponseHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ViewMessageRequestHeader,
)

UNIQUE_KEY_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: QUERY_MESSAGE by UNIQ_KEY


class AdminRequests(Requester):
    """Typed lookup and admin requests (``addr`` is a broker's, or a controller's, ``host:port``)."""

    async def query_message(self, addr: str, topic: str, key: str, max_num: int, begin: int, end: int, *,
                            unique_key: bool = False, timeout: float | None = None) -> list[StoredMessage]:
        """QUERY_MESSAGE: messages of ``topic`` indexed under ``key`` stored in [begin, end] ms;
        ``unique_key`` looks ``key`` up as a UNIQ_KEY. ``[]`` when nothing matches."""
        header = QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin,
                                           end_timestamp=end)
        fields = header.to_ext_fields()
        if unique_key:
            fields[UNIQUE_KEY_QUERY_FLAG] = "true"
        response = await self._invoke(addr, RequestCode.QUERY_MESSAGE, fields, timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        return decode_units_list(response.body)

    async def view_message(self, addr: str, commitlog_offset: int, *,
                           timeout: float | None = None) -> StoredMessage | None:
        """VIEW_MESSAGE_BY_ID by commitlog offset; None on QUERY_NOT_FOUND."""
        response = await self._invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                      ViewMessageRequestHeader(offset=commitlog_offset), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        units = decode_units_list(response.body)
        return units[0] if units else None

    async def view_message_by_id(self, addr: str | None, msg_id: str, *,
                                 timeout: float | None = None) -> StoredMessage | None:
        """The message whose offsetMsgId is ``msg_id``, from ``addr`` or (None) the store host in the id."""
        host, offset = parse_offset_msg_id(msg_id)
        return await self.view_message(addr or unpack_host(host), offset, timeout=timeout)

    # -- broker: admin ------------------------------------------------------------------------

    async def get_broker_runtime_info(self, addr: str, *, timeout: float | None = None) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's stats table (all values strings)."""
        response = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=timeout)
        return KVTable.from_json(response.body).table

    async def get_controller_metadata(self, addr: str, *, timeout: float | None = None) -> GetMetaDataResponseHeader:
        """CONTROLLER_GET_METADATA_INFO: whether this controller leads, and the leader's address."""
        response = await self._invoke(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=timeout)
        return GetMetaDataResponseHeader.from_ext_fields(response.ext_fields)

    async def get_sync_state_data(self, addr: str, broker_names: Iterable[str], *,
                                  timeout: float | None = None) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA from the leading controller: per broker set its master, epochs and
        replicas in and out of the SyncStateSet (sets the controller does not know are left out)."""
        response = await self._invoke(addr, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                      body=json.dumps(sorted(broker_names)).encode(), timeout=timeout)
        return BrokerReplicasInfo.from_json(response.body)

    async def get_topic_stats_info(self, addr: str, topic: str, *, timeout: float | None = None) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO: min/max offset and last update time per queue on this broker."""
        response = await self._invoke(addr, RequestCode.GET_TOPIC_STATS_INFO,
                                      GetTopicStatsInfoRequestHeader(topic=topic), timeout=timeout)
        return TopicStatsTable.from_json(response.body)

    async def get_consume_stats(self, addr: str, consumer_group: str, topic: str | None = None, *,
                                timeout: float | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS: broker and consumer offsets per queue of the group (one topic, or all)."""
        header = GetConsumeStatsRequestHeader(consumer_group=consumer_group, topic=topic)
        response = await self._invoke(addr, RequestCode.GET_CONSUME_STATS, header, timeout=timeout)
        return ConsumeStats.from_json(response.body)

    async def reset_offset_by_time(self, addr: str, group: str, topic: str, timestamp_ms: int, *, force: bool = True,
                                   timeout: float | None = None) -> ResetOffsetBody:
        """INVOKE_BROKER_TO_RESET_OFFSET: the broker moves ``group``'s offsets of its queues of ``topic``
        to the first message stored at or after ``timestamp_ms`` (-1: the end), tells the group's online
        members, and answers the new offsets. Without ``force`` an offset only moves backwards."""
        header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp_ms, is_force=force)
        response = await self._invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header, timeout=timeout)
        return ResetOffsetBody.from_json(response.body)

    async def create_topic(self, addr: str, topic: str, read_queue_nums: int = 8, write_queue_nums: int = 8,
                           perm: int = PERM_READ_WRITE, *, default_topic: str = AUTO_CREATE_TOPIC,
                           topic_filter_type: str = "SINGLE_TAG", topic_sys_flag: int = 0, order: bool = False,
                           timeout: float | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC on one broker (which then registers it with the NameServers)."""
        header = CreateTopicRequestHeader(topic=topic, default_topic=default_topic, read_queue_nums=read_queue_nums,
                                          write_queue_nums=write_queue_nums, perm=perm,
                                          topic_filter_type=topic_filter_type, topic_sys_flag=topic_sys_flag,
                                          order=order)
        await self._invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout=timeout)

    async def get_consumer_connection_list(self, addr: str, group: str, *,
                                           timeout: float | None = None) -> ConsumerConnection | None:
        """GET_CONSUMER_CONNECTION_LIST: the group's consumers online at the broker; None when none is."""
        response = await self._invoke(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                      GetConsumerConnectionListRequestHeader(consumer_group=group), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
        return ConsumerConnection.from_json(response.body) if response.code == ResponseCode.SUCCESS else None

    async def get_producer_connection_list(self, addr: str, group: str, *,
                                           timeout: float | None = None) -> ProducerConnection | None:
        """GET_PRODUCER_CONNECTION_LIST: the group's producers connected to the broker; None when none is (the
        broker answers SYSTEM_ERROR, as RocketMQ's)."""
        response = await self._invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                      GetProducerConnectionListRequestHeader(producer_group=group), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        return ProducerConnection.from_json(response.body) if response.code == ResponseCode.SUCCESS else None

    async def update_subscription_group(self, addr: str, config: SubscriptionGroupConfig, *,
                                        timeout: float | None = None) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on one broker: the group's config there, replaced whole."""
        await self._invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.to_json(),
                           timeout=timeout)

    async def get_all_topic_config(self, addr: str, *,
                                   timeout: float | None = None) -> TopicConfigSerializeWrapper:
        """GET_ALL_TOPIC_CONFIG: every topic config of the broker, with its data version."""
        response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout=timeout)
        return TopicConfigSerializeWrapper.from_json(response.body)

    async def delete_topic_in_broker(self, addr: str, topic: str, *, timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_BROKER."""
        await self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic),
                           timeout=timeout)

    async def get_all_subscription_groups(self, addr: str, *,
                                          timeout: float | None = None) -> SubscriptionGroupWrapper:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every subscription group config of the broker (admin)."""
        response = await self._invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout=timeout)
        return SubscriptionGroupWrapper.from_json(response.body)

    async def get_all_consumer_offsets(self, addr: str, *,
                                       timeout: float | None = None) -> ConsumerOffsetSerializeWrapper:
        """GET_ALL_CONSUMER_OFFSET: every committed offset of the broker, keyed ``topic@group`` (admin)."""
        response = await self._invoke(addr, RequestCode.GET_ALL_CONSUMER_OFFSET, timeout=timeout)
        return ConsumerOffsetSerializeWrapper.from_json(response.body)

    async def delete_subscription_group(self, addr: str, group: str, *, clean_offset: bool = True,
                                        timeout: float | None = None) -> None:
        """DELETE_SUBSCRIPTIONGROUP: the broker forgets the group's config and, with ``clean_offset``, its
        committed offsets (admin)."""
        await self._invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                           DeleteSubscriptionGroupRequestHeader(group_name=group, clean_offset=clean_offset),
                           timeout=timeout)

    async def get_epoch_history(self, addr: str, *, timeout: float | None = None) -> EpochHistory:
        """GET_EPOCH_HISTORY (spark_mq's own, controller mode): the broker's commitlog range and epoch entries,
        one per master term (election) it has seen (admin)."""
        response = await self._invoke(addr, RequestCode.GET_EPOCH_HISTORY, timeout=timeout)
        return EpochHistory.from_json(response.body)
