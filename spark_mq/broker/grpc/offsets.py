"""GetOffset, UpdateOffset and QueryOffset (RocketMQ 5's offset calls of its PullConsumer): a group's committed
offset of a queue in the same table as remoting's (``ConsumerOffsetManager``), and a queue's first, end or
by-time offset from the store."""

from __future__ import annotations

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.grpc.status import OK, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.store.message_store import MessageStore


def get_offset(offsets: ConsumerOffsetManager, request: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
    queue = request.message_queue
    offset = offsets.answer(request.group.name, queue.topic.name, queue.id)
    if offset < 0:
        return spb.GetOffsetResponse(status=status(pb.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset "
                                                                        f"of {queue.topic.name} queue {queue.id}"))
    return spb.GetOffsetResponse(status=OK, offset=offset)


def update_offset(offsets: ConsumerOffsetManager, store: MessageStore, request: spb.UpdateOffsetRequest
                  ) -> spb.UpdateOffsetResponse:
    queue = request.message_queue
    end = store.get_max_offset(queue.topic.name, queue.id)
    if not 0 <= request.offset <= end:
        return spb.UpdateOffsetResponse(status=status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is outside "
                                                                          f"{queue.topic.name} queue {queue.id}, "
                                                                          f"which ends at {end}"))
    offsets.commit(request.group.name, queue.topic.name, queue.id, request.offset)
    return spb.UpdateOffsetResponse(status=OK)


def query_offset(store: MessageStore, request: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
    queue = request.message_queue
    topic, queue_id = queue.topic.name, queue.id
    policy = request.query_offset_policy
    if policy == pb.BEGINNING:
        offset = store.get_min_offset(topic, queue_id)
    elif policy == pb.END:
        offset = store.get_max_offset(topic, queue_id)
    elif request.HasField("timestamp"):
        offset = store.get_offset_in_queue_by_time(topic, queue_id, request.timestamp.ToMilliseconds())
    else:
        return spb.QueryOffsetResponse(status=status(pb.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a "
                                                                     "timestamp"))
    return spb.QueryOffsetResponse(status=OK, offset=offset)
