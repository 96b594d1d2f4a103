"""SendMessage (RocketMQ proxy's ``SendMessageActivity``): a 5.x client's messages converted once
(``messages.to_batch``) and stored through the remoting send path (``SendProcessor.store_send``), so every check,
the routing of delay/timer/half messages, flushing and replication waits are the same.

The queue is the broker's choice, as the proxy's: a FIFO send's by its message group's hash (one group, one queue,
its order kept), any other's at random. A delay message (``delivery_timestamp``) becomes a timer message
(TIMER_DELIVER_MS), a transactional one a half message of producer group ``rmq_grpc_producer_<topic>``.
"""

from __future__ import annotations

from collections.abc import Callable

from spark_mq.broker.grpc.messages import fifo_key, producer_group, to_batch, transaction_id
from spark_mq.broker.grpc.status import OK, from_remoting, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.processors.send import SendProcessor
from spark_mq.broker.transaction.check_back import CheckBackSender
from spark_mq.common.errors import InvalidNameError, MessageValidationError
from spark_mq.common.names import validate_topic
from spark_mq.common.properties import JoinedProperties


def _refused(code: int, message: str) -> spb.SendMessageResponse:
    return spb.SendMessageResponse(status=status(code, message))


async def send_message(sender: SendProcessor, request: spb.SendMessageRequest, born_host: bytes,
                       slave_refusal: Callable[[], str | None], channel: CheckBackSender | None
                       ) -> spb.SendMessageResponse:
    """Store the request's messages (one topic); one entry per message, in order. ``channel``: the client's
    Telemetry stream, where a check-back of its transactional messages may go."""
    messages = list(request.messages)
    if not messages:
        return _refused(pb.BAD_REQUEST, "a SendMessageRequest without messages")
    topic = messages[0].topic.name
    if any(m.topic.name != topic for m in messages):
        return _refused(pb.BAD_REQUEST, "one send names several topics: send each topic apart")
    refusal = slave_refusal()
    if refusal is not None:
        return _refused(pb.INTERNAL_SERVER_ERROR, refusal)
    try:
        validate_topic(topic)
        batch = to_batch(messages, born_host)
        queue_key = fifo_key(messages)
    except InvalidNameError as e:
        return _refused(pb.ILLEGAL_TOPIC, str(e))
    except MessageValidationError as e:
        return _refused(pb.BAD_REQUEST, str(e))
    prepared = messages[0].system_properties.message_type == pb.TRANSACTION
    outcome = await sender.store_send(batch, JoinedProperties(batch.properties), prepared, producer_group(topic),
                                      queue_key=queue_key, sender=channel)
    answer = from_remoting(outcome.code, outcome.remark)
    result = outcome.result
    if result is None:
        return spb.SendMessageResponse(status=answer)
    entries = []
    for i, m in enumerate(messages):
        txn = transaction_id(result.store_host, int(result.physical_offsets[i]), result.queue_offset + i) \
            if prepared else ""
        entries.append(spb.SendResultEntry(status=answer, message_id=m.system_properties.message_id,
                                           transaction_id=txn, offset=result.queue_offset + i))
    return spb.SendMessageResponse(status=answer if answer.code != pb.OK else OK, entries=entries)
