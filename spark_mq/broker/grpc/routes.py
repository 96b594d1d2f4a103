"""QueryRoute and QueryAssignment (RocketMQ proxy's ``RouteActivity``) of the broker-local endpoint: the topic's
queues on this broker, from its topic configs, with this endpoint's address, and those of the topic's other broker
sets with their masters' gRPC addresses (``peers.py``); each with the queue's permission and the message types a
topic accepts (any: our topics are untyped, so RocketMQ 5's ``message.type`` attribute is not enforced).

A 5.x client sends to and receives from the endpoints a route names: a send or a receive for another set goes to
that set's master directly.
"""

from __future__ import annotations

from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.common.perm import PERM_READ, PERM_WRITE
from spark_mq.remoting.bodies import TopicConfig

ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
POP_QUEUE_ID = -1  # an assignment of every queue of a broker: the broker hands out messages (pop)


def broker(name: str, host: str, port: int) -> pb.Broker:
    """A set's master as a route names it: its name and its gRPC address."""
    scheme = pb.IPv4 if host.replace(".", "").isdigit() else pb.DOMAIN_NAME
    return pb.Broker(name=name, id=0, endpoints=pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host,
                                                                                              port=port)]))


def permission(perm: int) -> int:
    """A topic's perm bits as RocketMQ 5's Permission."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    return pb.READ if readable else pb.WRITE if writable else pb.NONE


def message_queues(topic: TopicConfig, broker: pb.Broker) -> list[pb.MessageQueue]:
    """The queues of ``topic`` on ``broker``: ids below the larger of its read and write queue counts, each readable
    below readQueueNums and writable below writeQueueNums (as RocketMQ's ``TopicRouteData`` to queue views)."""
    out = []
    resource = pb.Resource(name=topic.topic_name)
    for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums)):
        perm = topic.perm
        if queue_id >= topic.read_queue_nums:
            perm &= ~PERM_READ
        if queue_id >= topic.write_queue_nums:
            perm &= ~PERM_WRITE
        out.append(pb.MessageQueue(topic=resource, id=queue_id, permission=permission(perm), broker=broker,
                                   accept_message_types=ACCEPTED_TYPES))
    return out


def assignment(topic: TopicConfig, broker: pb.Broker) -> list[pb.Assignment]:
    """The assignment of a consumer group's topic: this broker as a whole (queue -1), which hands out messages of
    every queue to any member, as RocketMQ 5's pop-based consumers expect; none when the topic is not readable
    there."""
    if not topic.perm & PERM_READ or topic.read_queue_nums == 0:
        return []
    queue = pb.MessageQueue(topic=pb.Resource(name=topic.topic_name), id=POP_QUEUE_ID,
                            permission=permission(topic.perm), broker=broker, accept_message_types=ACCEPTED_TYPES)
    return [pb.Assignment(message_queue=queue)]
