"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (RocketMQ proxy's
``ReceiveMessageActivity``, ``AckMessageActivity``, ``ChangeInvisibleDurationActivity``): RocketMQ 5's
SimpleConsumer and PushConsumer read through the broker's pop (``broker/pop/service.py``), as the proxy does.

A receive pops up to ``batch_size`` messages (queue -1: every readable queue of the topic) invisible for the
requested duration (60 s when none is asked, as the proxy's default), waiting up to the long polling timeout. A
group new to a queue starts at its first message, as a RocketMQ broker with ``initPopOffsetByCheckMsgInMem`` starts
a queue whose first message is still kept (the proxy asks ``ConsumeInitMode.MAX``, which that setting overrides
for such a queue; ``MAX`` applied lazily per queue would skip what a queue got before the group's first pop reached
it). The stream is a status (OK, or MESSAGE_NOT_FOUND when nothing came), the messages, each with its receipt
handle (the pop's ``extraInfo``) and delivery attempt, then the delivery time. A forward to the DLQ moves the message to
``%DLQ%<group>`` and acknowledges it (``ReviveService.forward_to_dlq``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from spark_mq.broker.grpc.messages import from_stored
from spark_mq.broker.grpc.status import OK, from_remoting, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.pop.revive import ReviveService
from spark_mq.broker.pop.service import INIT_MODE_MIN, MAX_POP_NUMS, PopError, PopFilter, PopService
from spark_mq.common.unit.decode import decode_message

log = logging.getLogger(__name__)

DEFAULT_INVISIBLE_MS = 60_000  # the proxy's defaultInvisibleTimeMills
POLL_MARGIN_MS = 1_000  # answered this long before the client's own deadline (long polling + request timeout)
_FILTER_TYPES = {pb.FILTER_TYPE_UNSPECIFIED: None, pb.TAG: "TAG", pb.SQL: "SQL92"}


def _ms(duration: Duration, default: int) -> int:
    return duration.ToMilliseconds() if duration.ByteSize() else default


def _popped(popped, topic: str) -> pb.Message:
    m = decode_message(popped.unit)
    out = from_stored(m, topic, popped.queue_id)
    out.system_properties.receipt_handle = popped.receipt
    # an orderly pop counts its attempts itself; a redelivered message carries its reconsume times (the revive
    # service's copy in the pop retry topic)
    out.system_properties.delivery_attempt = max(popped.attempt, m.reconsume_times + 1)
    return out


async def receive(pops: PopService, request: spb.ReceiveMessageRequest, peer: str
                  ) -> AsyncIterator[spb.ReceiveMessageResponse]:
    """Pop for the request; orderly (a queue's next message not handed out while one is in flight) for a group with
    ``consumeMessageOrderly``, as RocketMQ's proxy pops for a FIFO subscription."""
    topic, group = request.message_queue.topic.name, request.group.name
    orderly = pops.groups.find(group).consume_message_orderly
    flt = PopFilter(_FILTER_TYPES.get(request.filter_expression.type), request.filter_expression.expression or "*")
    poll_ms = max(_ms(request.long_polling_timeout, 0) - POLL_MARGIN_MS, 0)
    try:
        result = await pops.pop(group, topic, request.message_queue.id, min(max(request.batch_size, 1), MAX_POP_NUMS),
                                _ms(request.invisible_duration, DEFAULT_INVISIBLE_MS), flt, INIT_MODE_MIN, poll_ms,
                                order=orderly, peer=peer)
    except PopError as e:
        yield spb.ReceiveMessageResponse(status=from_remoting(e.code, str(e)))
        return
    log.debug("ReceiveMessage of group %s, topic %s from %s: %d message(s)", group, topic, peer, len(result.messages))
    if not result.messages:
        yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        return
    yield spb.ReceiveMessageResponse(status=OK)
    for popped in result.messages:
        yield spb.ReceiveMessageResponse(message=_popped(popped, topic))
    delivered = Timestamp()
    delivered.GetCurrentTime()
    yield spb.ReceiveMessageResponse(delivery_timestamp=delivered)  # the client's delivery latency counts from it


async def ack(pops: PopService, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
    entries = []
    for entry in request.entries:
        try:
            await pops.ack(request.group.name, request.topic.name, entry.receipt_handle)
            answer = OK
        except PopError as e:
            answer = from_remoting(e.code, str(e))
        entries.append(spb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                 status=answer))
    failed = next((e.status for e in entries if e.status.code != pb.OK), None)
    return spb.AckMessageResponse(status=failed or OK, entries=entries)


async def change_invisible(pops: PopService, request: spb.ChangeInvisibleDurationRequest
                           ) -> spb.ChangeInvisibleDurationResponse:
    try:
        receipt = await pops.change_invisible(request.group.name, request.topic.name, request.receipt_handle,
                                              request.invisible_duration.ToMilliseconds())
    except PopError as e:
        return spb.ChangeInvisibleDurationResponse(status=from_remoting(e.code, str(e)))
    return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=receipt.encode())


async def forward_to_dlq(revive: ReviveService, request: spb.ForwardMessageToDeadLetterQueueRequest
                         ) -> spb.ForwardMessageToDeadLetterQueueResponse:
    try:
        await revive.forward_to_dlq(request.group.name, request.topic.name, request.receipt_handle)
    except PopError as e:
        return spb.ForwardMessageToDeadLetterQueueResponse(status=from_remoting(e.code, str(e)))
    return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
