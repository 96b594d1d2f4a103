"""POP_MESSAGE, PEEK_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION and
POLLING_INFO: the remoting face of the broker's ``PopService`` (headers in, ``PopError`` out as its code
and remark). A pop that found nothing is answered PULL_NOT_FOUND, or POLLING_TIMEOUT after a long poll, as
RocketMQ answers it; a held pop gives its connection's in-flight slot back like a held pull.
"""

from __future__ import annotations

import time

from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.pop.service import PopError, PopFilter, PopResult, PopService
from spark_mq.common.errors import BodyError
from spark_mq.remoting.bodies import BatchAckMessageRequestBody
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PollingInfoResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)


def _found(cmd: RemotingCommand, result: PopResult, polled: bool) -> RemotingCommand:
    header = PopMessageResponseHeader(pop_time=result.pop_time, invisible_time=result.invisible_ms,
                                      revive_qid=result.revive_qid, rest_num=result.rest_num,
                                      start_offset_info=result.start_offset_info or None,
                                      msg_offset_info=result.msg_offset_info or None,
                                      order_count_info=result.order_count_info or None)
    if result.queues:
        code = ResponseCode.SUCCESS
    else:
        code = ResponseCode.POLLING_TIMEOUT if polled else ResponseCode.PULL_NOT_FOUND
    return cmd.make_response(code, ext_fields=header.to_ext_fields(), body=result.body)


class PopProcessor:
    def __init__(self, pops: PopService, metrics: BrokerMetrics) -> None:
        self.pops = pops
        self.metrics = metrics

    def register_on(self, server) -> None:
        server.register(RequestCode.POP_MESSAGE, self.pop)
        server.register(RequestCode.PEEK_MESSAGE, self.peek)
        server.register(RequestCode.ACK_MESSAGE, self.ack)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible)
        server.register(RequestCode.NOTIFICATION, self.notification)
        server.register(RequestCode.POLLING_INFO, self.polling_info)

    async def pop(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = PopMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        held = h.poll_time > 0 and conn.try_hold()  # past the connection's maximum of held requests: answered now
        try:
            result = await self.pops.pop(h.consumer_group, h.topic, h.queue_id, h.max_msg_nums, h.invisible_time,
                                         PopFilter(h.exp_type, h.exp), h.init_mode, h.poll_time if held else 0,
                                         h.order, conn.peer)
        except PopError as e:
            return cmd.make_response(e.code, str(e))
        finally:
            if held:
                await conn.end_hold()
        if result.queues:  # counted as pulls are: the topic's and the group's figures include pops
            self.metrics.delivered(h.topic, h.consumer_group, result.count, len(result.body), time.monotonic())
        return _found(cmd, result, held)

    async def peek(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = PeekMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            return _found(cmd, self.pops.peek(h.consumer_group, h.topic, h.queue_id, h.max_msg_nums), False)
        except PopError as e:
            return cmd.make_response(e.code, str(e))

    async def ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = AckMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            await self.pops.ack(h.consumer_group, h.topic, h.extra_info, h.offset)
        except PopError as e:
            return cmd.make_response(e.code, str(e))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def batch_ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Every ack of the body is tried; the answer is SUCCESS when each acknowledged something, else the
        first refusal (the others are done all the same)."""
        try:
            body = BatchAckMessageRequestBody.from_json(cmd.body)
        except BodyError as e:
            return cmd.make_response(ResponseCode.INVALID_PARAMETER, str(e))
        first: PopError | None = None
        try:
            self.pops.ack_batch(body.acks)
        except PopError as e:
            first = e
        try:
            await self.pops.records_replicated("the batch ack")
        except PopError as e:
            first = first or e
        if first is not None:
            return cmd.make_response(first.code, str(first))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def change_invisible(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            r = await self.pops.change_invisible(h.consumer_group, h.topic, h.extra_info, h.invisible_time, h.offset)
        except PopError as e:
            return cmd.make_response(e.code, str(e))
        header = ChangeInvisibleTimeResponseHeader(pop_time=r.pop_time, invisible_time=r.invisible_ms,
                                                   revive_qid=r.revive_qid)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())

    async def notification(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = NotificationRequestHeader.from_ext_fields(cmd.ext_fields)
        held = h.poll_time > 0 and conn.try_hold()
        try:
            has = await self.pops.notification(h.consumer_group, h.topic, h.queue_id, h.poll_time if held else 0)
        except PopError as e:
            return cmd.make_response(e.code, str(e))
        finally:
            if held:
                await conn.end_hold()
        header = NotificationResponseHeader(has_msg=has)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())

    async def polling_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = PollingInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            self.pops.queues_of(h.consumer_group, h.topic, h.queue_id)
        except PopError as e:
            return cmd.make_response(e.code, str(e))
        n = self.pops.polling_num(h.consumer_group, h.topic, h.queue_id)
        return cmd.make_response(ResponseCode.SUCCESS,
                                 ext_fields=PollingInfoResponseHeader(polling_num=n).to_ext_fields())


