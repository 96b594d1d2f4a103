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

Requests the broker sends us (NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET,
CHECK_TRANSACTION_STATE) go to the callbacks registered with :meth:`MQClientAPI.on_consumer_ids_changed`,
:meth:`~MQClientAPI.on_reset_offset` and :meth:`~MQClientAPI.on_check_transaction_state`.

The requests are grouped by job, one module each, and this class joins them (so callers keep one
object): the message path — send, pull, consumer groups, transactions — is here;
:mod:`~spark_mq.client.namesrv_requests` asks NameServers, :mod:`~spark_mq.client.offset_requests`
brokers' offsets, :mod:`~spark_mq.client.pop_requests` pops and acks, :mod:`~spark_mq.client.admin_requests`
lookups and admin; how a request is sent and its answer checked is :mod:`~spark_mq.client.requester`'s.

Thread-safety: all coroutines run on one event loop and may interleave freely; use
:class:`~spark_mq.client.sync_api.SyncMQClientAPI` from threads.
"""

from __future__ import annotations

import functools
import inspect
import logging
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import numpy as np

from spark_mq.client.admin_requests import AdminRequests
from spark_mq.client.namesrv_requests import NamesrvRequests
from spark_mq.client.offset_requests import OffsetRequests
from spark_mq.client.pop_requests import PopRequests
from spark_mq.client.results import (
    PULL_STATUS_BY_CODE,
    SEND_STATUS_BY_CODE,
    PullResult,
    SendResult,
    pull_result_of,
)
from spark_mq.common.errors import BodyError, HeaderError
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.properties import PRODUCER_GROUP, UNIQ_KEY, WAIT_STORE_MSG_OK, decode_properties, scan_properties
from spark_mq.common.unit.decode import StoredMessage, decode_message
from spark_mq.remoting.bodies import (
    CheckClientRequestBody,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    ResetOffsetBody,
    UnlockBatchRequestBody,
)
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)
from spark_mq.remoting.message_batch_codec import encode_batch_body
from spark_mq.remoting.signature import Credentials

log = logging.getLogger(__name__)

DEFAULT_TOPIC_QUEUE_NUMS = 4
MSG_REGION = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION, in a send response's extFields

ConsumerIdsChangedCallback = Callable[[str, str], "Awaitable[None] | None"]
# (group, topic, the new offsets of the queues of one broker)
ResetOffsetCallback = Callable[[str, str, dict[MessageQueue, int]], "Awaitable[None] | None"]
# (the check's header, the half message with its real topic, the connection it came on)
CheckTransactionCallback = Callable[[CheckTransactionStateRequestHeader, StoredMessage, Connection],
                                    "Awaitable[None] | None"]


class MQClientAPI(NamesrvRequests, OffsetRequests, AdminRequests, PopRequests):
    """Typed RocketMQ requests to NameServers and brokers over one ``RemotingClient``.

    ``async with MQClientAPI() as api:`` opens nothing until the first request and closes every
    connection on exit. A ``remoting`` client passed in is shared and left open on ``close``;
    server-initiated requests on it go to the MQClientAPI constructed on it last. ``credentials`` sign
    every request of the remoting client it creates (one passed in signs with its own).
    """

    def __init__(self, remoting: RemotingClient | None = None, *, timeout: float = 3.0,
                 connect_timeout: float = 3.0, ssl_context: ssl.SSLContext | None = None,
                 credentials: Credentials | None = None) -> None:
        """``ssl_context`` (``ClientConfig.ssl_context``): TLS, for the remoting client made here."""
        self.remoting = remoting if remoting is not None else RemotingClient(
            connect_timeout, ssl_context=ssl_context, credentials=credentials)
        self._owns_remoting = remoting is None
        self.timeout = timeout
        self._ids_changed: list[ConsumerIdsChangedCallback] = []
        self._transaction_checkers: dict[str, CheckTransactionCallback] = {}
        self._reset_offset: ResetOffsetCallback | None = None
        self.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._serve_notify_consumer_ids_changed)
        self.remoting.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._serve_reset_offset)
        self.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, self._serve_check_transaction_state)

    async def __aenter__(self) -> MQClientAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (only when this API created its remoting client)."""
        if self._owns_remoting:
            await self.remoting.close()

    # -- requests the servers send us ---------------------------------------------------------

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

    def on_reset_offset(self, callback: ResetOffsetCallback) -> None:
        """Call ``callback(group, topic, offsets)`` (plain or async) on every RESET_CONSUMER_CLIENT_OFFSET
        a broker sends (an admin reset the group's offsets there); it runs on the event loop."""
        self._reset_offset = callback

    async def _serve_reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        try:
            header = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
            offsets = ResetOffsetBody.from_json(cmd.body).offset_table
        except (HeaderError, BodyError) as e:
            log.warning("ignoring RESET_CONSUMER_CLIENT_OFFSET from %s: %s", conn.peer, e)
            return None
        log.info("broker %s reset the offsets of group %s on topic %s", conn.peer, header.group, header.topic)
        if self._reset_offset is not None:
            try:
                outcome = self._reset_offset(header.group, header.topic, offsets)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("offset reset of group %s on topic %s failed", header.group, header.topic)
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

    # -- broker: send -------------------------------------------------------------------------

    async def send_message(self, addr: str, header: SendMessageRequestHeader | SendMessageRequestHeaderV2,
                           body: bytes, *, timeout: float | None = None) -> SendResult:
        """SEND_MESSAGE (10), header fields under their long names."""
        v1 = header.to_v1() if isinstance(header, SendMessageRequestHeaderV2) else header
        response = await self._invoke(addr, RequestCode.SEND_MESSAGE, v1, body, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, v1.topic, v1.bname, _uniq_key(v1.properties))

    async def send_message_v2(self, addr: str, header: SendMessageRequestHeader | SendMessageRequestHeaderV2,
                              body: bytes, *, timeout: float | None = None, msg_id: str | None = None) -> SendResult:
        """SEND_MESSAGE_V2 (310), header fields under their one-letter names. ``msg_id``: the UNIQ_KEY in
        the header's properties, given by a caller that made it (saves reading the properties back)."""
        v2 = header.to_v2() if isinstance(header, SendMessageRequestHeader) else header
        response = await self._invoke(addr, RequestCode.SEND_MESSAGE_V2, v2, body, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, v2.topic, v2.bname, _uniq_key(v2.properties) if msg_id is None else msg_id)

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
        body = encode_batch_body(batch)
        return await self.send_batch_body(
            addr, batch.topic, batch.queue_id, body, producer_group, born_timestamp=int(batch.born_timestamps[0]),
            properties=properties, broker_name=broker_name, default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums, timeout=timeout,
            msg_id=_batch_uniq_keys(batch) if msg_id is None else msg_id)

    async def send_batch_body(self, addr: str, topic: str, queue_id: int, body: bytes, producer_group: str, *,
                              born_timestamp: int | None = None, properties: str | None = None,
                              broker_name: str | None = None, default_topic: str = AUTO_CREATE_TOPIC,
                              default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS, timeout: float | None = None,
                              msg_id: str | None = None) -> SendResult:
        """``send_batch`` of a body already encoded (``encode_batch_body``'s bytes): a producer's small
        batch is encoded once, as it is prepared, with no ``MessageBatch`` columns. ``born_timestamp``
        defaults to now; ``msg_id`` is the result's (the messages' UNIQ_KEYs joined by commas)."""
        ext = send_fields(producer_group, topic, broker_name, True, default_topic, default_topic_queue_nums)
        cmd = RemotingCommand(code=int(RequestCode.SEND_BATCH_MESSAGE), body=body, ext_fields={
            **ext, SEND_QUEUE_ID: str(queue_id),
            SEND_BORN_TIMESTAMP: str(int(time.time() * 1000) if born_timestamp is None else born_timestamp),
            SEND_PROPERTIES: f"{WAIT_STORE_MSG_OK}\x01true\x02" if properties is None else properties})
        response = await self._invoke_command(addr, cmd, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, topic, broker_name, msg_id)

    async def send_message_v2_fields(self, addr: str, ext_fields: dict[str, str], body: bytes, topic: str,
                                     broker_name: str | None, msg_id: str | None, *,
                                     timeout: float | None = None) -> SendResult:
        """``send_message_v2`` of a header given as its wire fields: a producer's, made from ``send_fields``'
        template (``msg_id``: the message's UNIQ_KEY)."""
        cmd = RemotingCommand(code=int(RequestCode.SEND_MESSAGE_V2), ext_fields=ext_fields, body=body)
        response = await self._invoke_command(addr, cmd, timeout, SEND_STATUS_BY_CODE)
        return self._send_result(response, topic, broker_name, msg_id)

    def _send_result(self, response: RemotingCommand, topic: str, broker_name: str | None,
                     msg_id: str | None) -> SendResult:
        out = SendMessageResponseHeader.from_ext_fields(response.ext_fields)
        return SendResult(SEND_STATUS_BY_CODE[response.code], msg_id, out.msg_id, topic, broker_name, out.queue_id,
                          out.queue_offset, out.transaction_id, response.ext_fields.get(MSG_REGION))

    # -- broker: pull and consumer groups -----------------------------------------------------

    async def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout: float | None = None,
                           answered: Callable[[PullResult], Any] | None = None,
                           ext_fields: dict[str, str] | None = None) -> Any:
        """PULL_MESSAGE. The default timeout outlasts the broker's long-poll suspension. The answer is
        judged as the connection reads it (``Connection.request``'s ``answered``); ``answered``, if given,
        runs there on the ``PullResult`` and its value is returned instead. ``ext_fields``: the header's
        wire fields, from a caller that has them (a consumer's pulls are made from a per-queue template)."""
        if timeout is None:
            timeout = self.timeout + (header.suspend_timeout_millis / 1000 if header.has_suspend else 0)
        cmd = RemotingCommand(code=int(RequestCode.PULL_MESSAGE),
                              ext_fields=header.to_ext_fields() if ext_fields is None else ext_fields)

        def result(response: RemotingCommand) -> Any:
            if response.code not in PULL_STATUS_BY_CODE:
                raise self.error(response, addr, RequestCode.PULL_MESSAGE, signed=self.remoting.credentials is not None)
            pulled = pull_result_of(response, response.body)
            return pulled if answered is None else answered(pulled)

        return await self.remoting.invoke(addr, cmd, timeout, result)

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


@functools.lru_cache(maxsize=1024)
def send_fields(producer_group: str, topic: str, broker_name: str | None, batch: bool,
                default_topic: str = AUTO_CREATE_TOPIC,
                default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> dict[str, str]:
    """The wire fields of a SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE header, made (and checked) once per producer,
    topic and broker: a paced producer sends every few hundred microseconds, and only the queue, the birth
    time, the properties and the flags change. Callers copy it and set those (in place: the order stays the
    header's)."""
    return SendMessageRequestHeaderV2(
        producer_group=producer_group, topic=topic, default_topic=default_topic,
        default_topic_queue_nums=default_topic_queue_nums, queue_id=0, sys_flag=0, born_timestamp=0, flag=0,
        properties="", reconsume_times=0, unit_mode=False, batch=batch, bname=broker_name).to_ext_fields()


# SendMessageRequestHeaderV2's wire names of what changes from send to send
SEND_QUEUE_ID, SEND_SYS_FLAG, SEND_BORN_TIMESTAMP, SEND_FLAG, SEND_PROPERTIES = "e", "f", "g", "h", "i"
