"""``MQClientAPI``: one async method per RocketMQ request code, typed values in and out.

The counterpart of RocketMQ's ``MQClientAPIImpl``: it builds each request from a header of
:mod:`spark_mq.remoting.headers` (or plain arguments for the small ones), sends it over a
:class:`~spark_mq.remoting.client.RemotingClient`, and turns the response into a typed value
(a body of :mod:`spark_mq.remoting.bodies`, a :class:`SendResult`, a :class:`PullResult`...).

Outcomes a caller expects are values:

- PULL_NOT_FOUND / PULL_RETRY_IMMEDIATELY / PULL_OFFSET_MOVED → ``PullResult`` with a status;
- FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE on a send → ``SendResult`` status;
- QUERY_NOT_FOUND on offset, KV and by-id lookups → ``None``; on QUERY_MESSAGE → ``[]``;
- TOPIC_NOT_EXIST on GET_ROUTEINFO_BY_TOPIC → ``None``.

Any other non-success code raises :class:`~spark_mq.common.errors.MQClientError` naming the
request, the server, the code and its remark; connection failures and timeouts raise the
remoting errors. Timeouts are in seconds (``timeout=None``: the API's default).

Requests the broker sends us (NOTIFY_CONSUMER_IDS_CHANGED) go to the callbacks registered with
:meth:`MQClientAPI.on_consumer_ids_changed`.

Thread-safety: all coroutines run on one event loop and may interleave freely; use
:class:`~spark_mq.client.sync_api.SyncMQClientAPI` from threads.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Iterable

import numpy as np

from spark_mq.client.results import (
    PULL_STATUS_BY_CODE,
    SEND_STATUS_BY_CODE,
    PullResult,
    RegisterBrokerResult,
    SendResult,
    TieredOffset,
    decode_units_list,
)
from spark_mq.common.errors import HeaderError, MQClientError
from spark_mq.common.message import MessageBatch, unpack_host
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.perm import PERM_READ_WRITE
from spark_mq.common.properties import (
    PRODUCER_GROUP,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
    decode_properties,
    scan_properties,
)
from spark_mq.common.unit.decode import StoredMessage, decode_message
from spark_mq.remoting.bodies import (
    BrokerReplicasInfo,
    CheckClientRequestBody,
    ClusterInfo,
    ConsumeStats,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
    body_crc32,
)
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMetaDataResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    GetTopicStatsInfoRequestHeader,
    Header,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PutKVConfigRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryTieredOffsetRequestHeader,
    QueryTieredOffsetResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    UnRegisterBrokerRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateTieredOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from spark_mq.remoting.message_batch_codec import encode_batch_body

log = logging.getLogger(__name__)

DEFAULT_TOPIC_QUEUE_NUMS = 4
UNIQUE_KEY_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG: QUERY_MESSAGE by UNIQ_KEY
MSG_REGION = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION, in a send response's extFields

ConsumerIdsChangedCallback = Callable[[str, str], "Awaitable[None] | None"]
# (the check's header, the half message with its real topic, the connection it came on)
CheckTransactionCallback = Callable[[CheckTransactionStateRequestHeader, StoredMessage, Connection],
                                    "Awaitable[None] | None"]

# what to do about a response code, where that is obvious
_HINTS: dict[int, str] = {
    ResponseCode.TOPIC_NOT_EXIST: "create the topic first (create_topic / `spark-mq admin`), "
    "or enable autoCreateTopicEnable on the broker",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "create the consumer group, or enable autoCreateSubscriptionGroup",
    ResponseCode.SUBSCRIPTION_NOT_EXIST: "send a HEART_BEAT carrying the subscription before pulling",
    ResponseCode.SUBSCRIPTION_NOT_LATEST: "send a HEART_BEAT with the current subscription before pulling",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "check the subscription expression (e.g. 'tagA || tagB')",
    ResponseCode.NO_PERMISSION: "the topic's or the broker's perm forbids this (check them with get_route_info), "
                                "or the broker does not serve what was asked (the remark says)",
    ResponseCode.SYSTEM_BUSY: "the broker is overloaded; retry after a short back-off",
    ResponseCode.SERVICE_NOT_AVAILABLE: "the broker cannot serve this now (stopping, slave, or disk full); "
    "try another broker",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "the server does not serve this request: check that the address is "
    "a broker and not a NameServer (or the reverse)",
    ResponseCode.MESSAGE_ILLEGAL: "check the topic name, the body size against maxMessageSize and the properties",
    ResponseCode.VERSION_NOT_SUPPORTED: "the server is too old or too new for this request",
    ResponseCode.CONSUMER_NOT_ONLINE: "no consumer of this group is connected to this broker",
    ResponseCode.INVALID_PARAMETER: "an argument is out of range for the broker's current state (the remark says "
    "which)",
}


def _code(code: int) -> int:
    """The ResponseCode member for ``code`` when known (its name goes in error messages)."""
    try:
        return ResponseCode(code)
    except ValueError:
        return code


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


class MQClientAPI:
    """Typed RocketMQ requests to NameServers and brokers over one ``RemotingClient``.

    ``async with MQClientAPI() as api:`` opens nothing until the first request and closes every
    connection on exit. A ``remoting`` client passed in is shared and left open on ``close``;
    server-initiated requests on it go to the MQClientAPI constructed on it last.
    """

    def __init__(self, remoting: RemotingClient | None = None, *, timeout: float = 3.0,
                 connect_timeout: float = 3.0) -> None:
        self.remoting = remoting if remoting is not None else RemotingClient(connect_timeout)
        self._owns_remoting = remoting is None
        self.timeout = timeout
        self._ids_changed: list[ConsumerIdsChangedCallback] = []
        self._transaction_checkers: dict[str, CheckTransactionCallback] = {}
        self.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._serve_notify_consumer_ids_changed)
        self.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._serve_check_transaction_state)

    async def __aenter__(self) -> MQClientAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (only when this API created its remoting client)."""
        if self._owns_remoting:
            await self.remoting.close()

    # -- plumbing -----------------------------------------------------------------------------

    def on_consumer_ids_changed(self, callback: ConsumerIdsChangedCallback) -> ConsumerIdsChangedCallback:
        """Call ``callback(consumer_group, broker_addr)`` (plain or async) on every
        NOTIFY_CONSUMER_IDS_CHANGED a broker sends; usable as a decorator. Callbacks run on the
        event loop: keep them short (set a flag, wake a rebalance task)."""
        self._ids_changed.append(callback)
        return callback

    async def _serve_notify_consumer_ids_changed(self, cmd: RemotingCommand,
                                                 conn: Connection) -> RemotingCommand | None:
        try:
            group = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(cmd.ext_fields).consumer_group
        except HeaderError as e:
            log.warning("ignoring NOTIFY_CONSUMER_IDS_CHANGED from %s: %s", conn.peer, e)
            return None
        log.debug("consumer ids of group %s changed (from broker %s)", group, conn.peer)
        for callback in list(self._ids_changed):
            try:
                outcome = callback(group, conn.peer)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("consumer-ids-changed callback %r failed for group %s", callback, group)
        # RocketMQ's broker sends it oneway; answer anyone who asked for a response
        return None if cmd.is_oneway else cmd.make_response(ResponseCode.SUCCESS)

    def on_check_transaction_state(self, group: str, callback: CheckTransactionCallback | None) -> None:
        """Route the CHECK_TRANSACTION_STATE requests about group ``group``'s half messages (their
        PGROUP property) to ``callback`` (None: stop)."""
        if callback is None:
            self._transaction_checkers.pop(group, None)
        else:
            self._transaction_checkers[group] = callback

    async def _serve_check_transaction_state(self, cmd: RemotingCommand, conn: Connection) -> None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            msg = decode_message(cmd.body)
        except (HeaderError, ValueError, struct.error) as e:
            log.warning("ignoring CHECK_TRANSACTION_STATE from %s: %s", conn.peer, e)
            return None
        group = msg.properties.get(PRODUCER_GROUP, "")
        callback = self._transaction_checkers.get(group)
        if callback is None:
            log.warning("CHECK_TRANSACTION_STATE from %s for group %s, which has no transaction producer here",
                        conn.peer, group or "<none>")
            return None
        try:
            outcome = callback(header, msg, conn)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            log.exception("transaction check of %s (group %s) failed", header.transaction_id, group)
        return None  # sent oneway: the answer is an END_TRANSACTION

    async def end_transaction(self, addr: str, header: EndTransactionRequestHeader, *,
                              timeout: float | None = None) -> None:
        """END_TRANSACTION (37), oneway as RocketMQ's producers send it."""
        await self._oneway(addr, RequestCode.END_TRANSACTION, header, timeout=timeout)

    async def end_transaction_confirmed(self, addr: str, header: EndTransactionRequestHeader, *,
                                        timeout: float | None = None) -> str:
        """END_TRANSACTION (37) as a request: the broker's answer (its remark, "" when none) once it
        applied the decision; MQClientError when it refused it."""
        response = await self._invoke(addr, RequestCode.END_TRANSACTION, header, timeout=timeout)
        return response.remark or ""

    async def _invoke(self, addr: str, code: int, header: Header | dict[str, object] | None = None,
                      body: bytes = b"", timeout: float | None = None,
                      ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Send a request; return its response if its code is in ``ok``, else raise MQClientError."""
        fields = header.to_ext_fields() if isinstance(header, Header) else header
        cmd = RemotingCommand.request(code, fields, body)
        response = await self.remoting.invoke(addr, cmd, self.timeout if timeout is None else timeout)
        if response.code not in ok:
            raise self.error(response, addr, code)
        return response

    async def _oneway(self, addr: str, code: int, header: Header, body: bytes = b"",
                      timeout: float | None = None) -> None:
        cmd = RemotingCommand.request(code, header.to_ext_fields(), body, oneway=True)
        await self.remoting.invoke_oneway(addr, cmd, self.timeout if timeout is None else timeout)

    @staticmethod
    def error(response: RemotingCommand, addr: str, request_code: int) -> MQClientError:
        code = _code(response.code)
        return MQClientError(code, response.remark, addr, _request_name(request_code), _HINTS.get(response.code))

    # -- NameServer ---------------------------------------------------------------------------

    async def get_route_info(self, namesrv: str, topic: str, *, timeout: float | None = None) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC; None when the NameServer knows no such topic."""
        response = await self._invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                      GetRouteInfoRequestHeader(topic=topic), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        return TopicRouteData.from_json(response.body)

    async def get_cluster_info(self, namesrv: str, *, timeout: float | None = None) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        response = await self._invoke(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=timeout)
        return ClusterInfo.from_json(response.body)

    async def get_all_topic_list(self, namesrv: str, *, timeout: float | None = None) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        response = await self._invoke(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout=timeout)
        return TopicList.from_json(response.body)

    async def get_topics_by_cluster(self, namesrv: str, cluster: str, *, timeout: float | None = None) -> TopicList:
        """GET_TOPICS_BY_CLUSTER."""
        response = await self._invoke(namesrv, RequestCode.GET_TOPICS_BY_CLUSTER,
                                      GetTopicsByClusterRequestHeader(cluster=cluster), timeout=timeout)
        return TopicList.from_json(response.body)

    async def register_broker(self, namesrv: str, header: RegisterBrokerRequestHeader, body: RegisterBrokerBody,
                              *, compressed: bool = False, timeout: float | None = None) -> RegisterBrokerResult:
        """REGISTER_BROKER; ``compressed`` and ``bodyCrc32`` in the header are set from the body sent."""
        raw = body.encode_compressed() if compressed else body.to_json()
        header = dataclasses.replace(header, compressed=compressed, body_crc32=body_crc32(raw))
        response = await self._invoke(namesrv, RequestCode.REGISTER_BROKER, header, raw, timeout)
        out = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
        table = KVTable.from_json(response.body).table if response.body else {}
        return RegisterBrokerResult(out.ha_server_addr, out.master_addr, table)

    async def unregister_broker(self, namesrv: str, cluster_name: str, broker_addr: str, broker_name: str,
                                broker_id: int, *, timeout: float | None = None) -> None:
        """UNREGISTER_BROKER."""
        header = UnRegisterBrokerRequestHeader(broker_name=broker_name, broker_addr=broker_addr,
                                               cluster_name=cluster_name, broker_id=broker_id)
        await self._invoke(namesrv, RequestCode.UNREGISTER_BROKER, header, timeout=timeout)

    async def put_kv_config(self, namesrv: str, namespace: str, key: str, value: str, *,
                            timeout: float | None = None) -> None:
        """PUT_KV_CONFIG."""
        header = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value)
        await self._invoke(namesrv, RequestCode.PUT_KV_CONFIG, header, timeout=timeout)

    async def get_kv_config(self, namesrv: str, namespace: str, key: str, *,
                            timeout: float | None = None) -> str | None:
        """GET_KV_CONFIG; None when the key is not set."""
        response = await self._invoke(namesrv, RequestCode.GET_KV_CONFIG,
                                      GetKVConfigRequestHeader(namespace=namespace, key=key), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return GetKVConfigResponseHeader.from_ext_fields(response.ext_fields).value

    async def get_kv_list_by_namespace(self, namesrv: str, namespace: str, *,
                                       timeout: float | None = None) -> dict[str, str] | None:
        """GET_KVLIST_BY_NAMESPACE; None when the namespace was never written."""
        response = await self._invoke(namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE,
                                      GetKVListByNamespaceRequestHeader(namespace=namespace), timeout=timeout,
                                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return KVTable.from_json(response.body).table

    async def delete_kv_config(self, namesrv: str, namespace: str, key: str, *,
                               timeout: float | None = None) -> None:
        """DELETE_KV_CONFIG."""
        header = DeleteKVConfigRequestHeader(namespace=namespace, key=key)
        await self._invoke(namesrv, RequestCode.DELETE_KV_CONFIG, header, timeout=timeout)

    async def delete_topic_in_namesrv(self, namesrv: str, topic: str, cluster_name: str | None = None, *,
                                      timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV."""
        header = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster_name)
        await self._invoke(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, header, timeout=timeout)

    # -- broker: send -------------------------------------------------------------------------

    async def send_message(self, addr: str, header: SendMessageRequestHeader | SendMessageRequestHeaderV2,
                           body: bytes, *, timeout: float | None = None) -> SendResult:
        """SEND_MESSAGE (10), header fields under their long names."""
        v1 = header.to_v1() if isinstance(header, SendMessageRequestHeaderV2) else header
        response = await self._invoke(addr, RequestCode.SEND_MESSAGE, v1, body, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, v1.topic, v1.bname, _uniq_key(v1.properties))

    async def send_message_v2(self, addr: str, header: SendMessageRequestHeader | SendMessageRequestHeaderV2,
                              body: bytes, *, timeout: float | None = None) -> SendResult:
        """SEND_MESSAGE_V2 (310), header fields under their one-letter names."""
        v2 = header.to_v2() if isinstance(header, SendMessageRequestHeader) else header
        response = await self._invoke(addr, RequestCode.SEND_MESSAGE_V2, v2, body, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, v2.topic, v2.bname, _uniq_key(v2.properties))

    async def send_batch(self, addr: str, batch: MessageBatch, producer_group: str, *,
                         properties: str | None = None, broker_name: str | None = None,
                         default_topic: str = AUTO_CREATE_TOPIC,
                         default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS, timeout: float | None = None,
                         msg_id: str | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE (320) of ``batch`` to its topic and queue, as Java's batch send.

        ``properties`` are the batch's own (default ``WAIT=true``); each message's UNIQ_KEY, if
        any, is in its encoded properties, and the result's ``msg_id`` joins them with commas
        (a caller that made the keys passes that string as ``msg_id`` and saves the scan).
        """
        n = len(batch)
        header = SendMessageRequestHeaderV2(
            producer_group=producer_group, topic=batch.topic, default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums, queue_id=batch.queue_id, sys_flag=0,
            born_timestamp=int(batch.born_timestamps[0]) if n else int(time.time() * 1000), flag=0,
            properties=f"{WAIT_STORE_MSG_OK}\x01true\x02" if properties is None else properties,
            reconsume_times=0, unit_mode=False, batch=True, bname=broker_name)
        body = encode_batch_body(batch)
        response = await self._invoke(addr, RequestCode.SEND_BATCH_MESSAGE, header, body, timeout,
                                      SEND_STATUS_BY_CODE)
        return self._send_result(response, batch.topic, broker_name,
                                 _batch_uniq_keys(batch) if msg_id is None else msg_id)

    def _send_result(self, response: RemotingCommand, topic: str, broker_name: str | None,
                     msg_id: str | None) -> SendResult:
        out = SendMessageResponseHeader.from_ext_fields(response.ext_fields)
        return SendResult(SEND_STATUS_BY_CODE[response.code], msg_id, out.msg_id, topic, broker_name, out.queue_id,
                          out.queue_offset, out.transaction_id, response.ext_fields.get(MSG_REGION))

    # -- broker: pull and consumer groups -----------------------------------------------------

    async def pull_message(self, addr: str, header: PullMessageRequestHeader,
                           timeout: float | None = None) -> PullResult:
        """PULL_MESSAGE. The default timeout outlasts the broker's long-poll suspension."""
        if timeout is None:
            timeout = self.timeout + (header.suspend_timeout_millis / 1000 if header.has_suspend else 0)
        response = await self._invoke(addr, RequestCode.PULL_MESSAGE, header, timeout=timeout, ok=PULL_STATUS_BY_CODE)
        out = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
        status = PULL_STATUS_BY_CODE[response.code]
        return PullResult(status, out.next_begin_offset, out.min_offset, out.max_offset, out.suggest_which_broker_id,
                          response.body if response.code == ResponseCode.SUCCESS else b"")

    async def heartbeat(self, addr: str, data: HeartbeatData, *, timeout: float | None = None) -> int:
        """HEART_BEAT; returns the broker's version (MQVersion ordinal) from the response."""
        response = await self._invoke(addr, RequestCode.HEART_BEAT, None, data.to_json(), timeout)
        return response.version

    async def check_client_config(self, addr: str, body: CheckClientRequestBody, *,
                                  timeout: float | None = None) -> None:
        """CHECK_CLIENT_CONFIG: whether the broker serves a subscription (SQL92: enabled, and the
        expression parses); MQClientError with the broker's reason otherwise."""
        await self._invoke(addr, RequestCode.CHECK_CLIENT_CONFIG, None, body.to_json(), timeout)

    async def consumer_send_msg_back(self, addr: str, header: ConsumerSendMsgBackRequestHeader, *,
                                     timeout: float | None = None) -> None:
        """CONSUMER_SEND_MSG_BACK: have the broker redeliver a message that failed to consume
        (through ``%RETRY%<group>``, or to ``%DLQ%<group>`` past the reconsume limit)."""
        await self._invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout=timeout)

    async def unregister_client(self, addr: str, client_id: str, producer_group: str | None = None,
                                consumer_group: str | None = None, *, timeout: float | None = None) -> None:
        """UNREGISTER_CLIENT for one producer and/or consumer group of ``client_id``."""
        header = UnregisterClientRequestHeader(client_id=client_id, producer_group=producer_group,
                                               consumer_group=consumer_group)
        await self._invoke(addr, RequestCode.UNREGISTER_CLIENT, header, timeout=timeout)

    async def get_consumer_list_by_group(self, addr: str, consumer_group: str, *,
                                         timeout: float | None = None) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's members on this broker."""
        response = await self._invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                      GetConsumerListByGroupRequestHeader(consumer_group=consumer_group),
                                      timeout=timeout)
        return GetConsumerListByGroupResponseBody.from_json(response.body).consumer_id_list

    async def lock_batch_mq(self, addr: str, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue], *,
                            timeout: float | None = None) -> list[MessageQueue]:
        """LOCK_BATCH_MQ; returns the queues this client now holds (a subset of ``mqs``)."""
        body = LockBatchRequestBody(consumer_group, client_id, list(mqs)).to_json()
        response = await self._invoke(addr, RequestCode.LOCK_BATCH_MQ, None, body, timeout)
        return LockBatchResponseBody.from_json(response.body).lock_ok_mq_set

    async def unlock_batch_mq(self, addr: str, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue], *,
                              oneway: bool = False, timeout: float | None = None) -> None:
        """UNLOCK_BATCH_MQ (``oneway``: no response awaited, as at consumer shutdown)."""
        body = UnlockBatchRequestBody(consumer_group, client_id, list(mqs)).to_json()
        if oneway:
            cmd = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, body, oneway=True)
            await self.remoting.invoke_oneway(addr, cmd, self.timeout if timeout is None else timeout)
            return
        await self._invoke(addr, RequestCode.UNLOCK_BATCH_MQ, None, body, timeout)

    # -- broker: offsets ----------------------------------------------------------------------

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

    # -- broker: lookups ----------------------------------------------------------------------

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

    async def get_all_topic_config(self, addr: str, *,
                                   timeout: float | None = None) -> TopicConfigSerializeWrapper:
        """GET_ALL_TOPIC_CONFIG: every topic config of the broker, with its data version."""
        response = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout=timeout)
        return TopicConfigSerializeWrapper.from_json(response.body)

    async def delete_topic_in_broker(self, addr: str, topic: str, *, timeout: float | None = None) -> None:
        """DELETE_TOPIC_IN_BROKER."""
        await self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic),
                           timeout=timeout)


def _uniq_key(properties: str | None) -> str | None:
    """The UNIQ_KEY inside a send header's property string, if any."""
    return decode_properties(properties.encode()).get(UNIQ_KEY) if properties else None


def _batch_uniq_keys(batch: MessageBatch) -> str | None:
    """Every message's UNIQ_KEY joined by commas (Java's batch SendResult msgId); None if any lacks one."""
    if not len(batch):
        return None
    raw = b"".join(batch.properties)
    ends = np.cumsum(batch.property_lengths)
    starts = ends - batch.property_lengths
    found_start, found_end = scan_properties(np.frombuffer(raw, dtype=np.uint8), starts, ends).find(UNIQ_KEY)
    if (found_start < 0).any():
        return None
    return b",".join(map(raw.__getitem__, map(slice, found_start.tolist(), found_end.tolist()))).decode()
