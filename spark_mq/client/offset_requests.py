"""``OffsetRequests``: the offset requests :class:`~spark_mq.client.api.MQClientAPI` sends to a broker —
a group's committed offsets, a queue's min/max offsets and offset by time, and spark_mq's own
tiered-storage offsets. A lookup that finds nothing (QUERY_NOT_FOUND) is ``None``, not an error.

Thread-safety: coroutines of one event loop, as the API's.
"""

from __future__ import annotations

from spark_mq.client.requester import Requester
from spark_mq.client.results import TieredOffset
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    Header,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryTieredOffsetRequestHeader,
    QueryTieredOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateTieredOffsetRequestHeader,
)


class OffsetRequests(Requester):
    """Typed offset requests to brokers (``addr`` is a broker's ``host:port``)."""

    async def query_consumer_offset(self, addr: str, consumer_group: str, topic: str, queue_id: int, *,
                                    zero_if_not_found: bool = True, timeout: float | None = None) -> int | None:
        """QUERY_CONSUMER_OFFSET; None when the group never committed an offset for the queue — except
        that with ``zero_if_not_found`` (the broker's default) the broker answers 0 for it while the
        queue still starts at 0; False sends RocketMQ 5's ``setZeroIfNotFound=false``."""
        fields = QueryConsumerOffsetRequestHeader(consumer_group=consumer_group, topic=topic,
                                                  queue_id=queue_id).to_ext_fields()
        if not zero_if_not_found:
            fields["setZeroIfNotFound"] = "false"
        return await self._offset(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields,
                                  QueryConsumerOffsetResponseHeader, "offset", timeout)

    async def update_consumer_offset(self, addr: str, consumer_group: str, topic: str, queue_id: int, offset: int,
                                     *, oneway: bool = False, timeout: float | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET (``oneway``: as the Java client's periodic offset persist)."""
        header = UpdateConsumerOffsetRequestHeader(consumer_group=consumer_group, topic=topic, queue_id=queue_id,
                                                   commit_offset=offset)
        if oneway:
            await self._oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=timeout)
        else:
            await self._invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=timeout)

    async def get_max_offset(self, addr: str, topic: str, queue_id: int, *,
                             timeout: float | None = None) -> int | None:
        """GET_MAX_OFFSET: the queue's next free logical offset."""
        return await self._offset(addr, RequestCode.GET_MAX_OFFSET,
                                  GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id),
                                  GetMaxOffsetResponseHeader, "offset", timeout)

    async def get_min_offset(self, addr: str, topic: str, queue_id: int, *,
                             timeout: float | None = None) -> int | None:
        """GET_MIN_OFFSET: the queue's smallest logical offset still stored."""
        return await self._offset(addr, RequestCode.GET_MIN_OFFSET,
                                  GetMinOffsetRequestHeader(topic=topic, queue_id=queue_id),
                                  GetMinOffsetResponseHeader, "offset", timeout)

    async def search_offset_by_timestamp(self, addr: str, topic: str, queue_id: int, timestamp: int, *,
                                         timeout: float | None = None) -> int | None:
        """SEARCH_OFFSET_BY_TIMESTAMP (``timestamp`` in ms since the epoch)."""
        header = SearchOffsetRequestHeader(topic=topic, queue_id=queue_id, timestamp=timestamp)
        return await self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header,
                                  SearchOffsetResponseHeader, "offset", timeout)

    async def get_earliest_msg_storetime(self, addr: str, topic: str, queue_id: int, *,
                                         timeout: float | None = None) -> int | None:
        """GET_EARLIEST_MSG_STORETIME: store timestamp (ms) of the queue's first stored message."""
        return await self._offset(addr, RequestCode.GET_EARLIEST_MSG_STORETIME,
                                  GetEarliestMsgStoretimeRequestHeader(topic=topic, queue_id=queue_id),
                                  GetEarliestMsgStoretimeResponseHeader, "timestamp", timeout)

    async def _offset(self, addr: str, code: int, header: Header | dict[str, object], response_type: type[Header],
                      name: str, timeout: float | None) -> int | None:
        response = await self._invoke(addr, code, header, timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return getattr(response_type.from_ext_fields(response.ext_fields), name)

    # -- broker: tiered storage (spark_mq's own requests) -------------------------------------

    async def update_tiered_offset(self, addr: str, topic: str, queue_id: int, offset: int, *,
                                   timeout: float | None = None) -> None:
        """UPDATE_TIERED_OFFSET: queue offsets [0, ``offset``) of the queue are archived. Raises
        MQClientError for an unknown topic (TOPIC_NOT_EXIST) or queue, an offset past the queue's
        max offset or below the recorded one (INVALID_PARAMETER: it never moves back); sending
        the recorded offset again succeeds."""
        header = UpdateTieredOffsetRequestHeader(topic=topic, queue_id=queue_id, offset=offset)
        await self._invoke(addr, RequestCode.UPDATE_TIERED_OFFSET, header, timeout=timeout)

    async def query_tiered_offset(self, addr: str, topic: str, queue_id: int, *,
                                  timeout: float | None = None) -> TieredOffset:
        """QUERY_TIERED_OFFSET: the queue's archived-up-to, cold, min and max offsets."""
        response = await self._invoke(addr, RequestCode.QUERY_TIERED_OFFSET,
                                      QueryTieredOffsetRequestHeader(topic=topic, queue_id=queue_id), timeout=timeout)
        out = QueryTieredOffsetResponseHeader.from_ext_fields(response.ext_fields)
        return TieredOffset(out.offset, out.cold_offset, out.min_offset, out.max_offset)
