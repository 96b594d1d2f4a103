"""``apache.rocketmq.v2.MessagingService`` served by one broker: each call checked against the ACL (``auth.py``),
then handed to the module of its concern (routes, send, transaction, telemetry, offsets; consumption over pop).

A call a client cannot be served gets a RocketMQ 5 ``Status`` in its answer (the client raises it), never an
exception that would take the endpoint down. ReceiveMessage, AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue are served over the broker's pop (``consume.py``). PullMessage, RecallMessage and
SyncLiteSubscription are not served (gRPC UNIMPLEMENTED, the stub's default).

Thread-safety: every call runs on the broker's event loop (grpc.aio).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from spark_mq.acl.gate import AclGate
from spark_mq.acl.plain_acl import Perm
from spark_mq.acl.resources import Need
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.grpc import auth, consume, offsets, routes
from spark_mq.broker.grpc.peers import GrpcPeers
from spark_mq.broker.grpc.send import send_message
from spark_mq.broker.grpc.status import OK, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.grpc.stubs.service_pb2_grpc import MessagingServiceServicer
from spark_mq.broker.grpc.telemetry import Telemetry
from spark_mq.broker.grpc.transaction import end_transaction
from spark_mq.broker.pop.revive import ReviveService
from spark_mq.broker.pop.service import PopService
from spark_mq.broker.processors.send import SendProcessor
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.broker.transaction.service import TransactionalMessageService
from spark_mq.common.message import pack_host
from spark_mq.remoting.bodies import TopicConfig
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

CLIENT_ID = "x-mq-client-id"

@dataclass(frozen=True)
class BrokerParts:
    """What the endpoint serves from: the broker's parts (built by ``BrokerController.start``)."""

    broker_name: str
    host: str  # the address routes name (brokerIP1)
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    sender: SendProcessor
    transactions: TransactionalMessageService
    gate: AclGate | None
    slave_refusal: Callable[[], str | None]
    pops: PopService
    revive: ReviveService


def peer_host(context: grpc.aio.ServicerContext) -> tuple[str, int]:
    """The caller's host and port from grpc's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5``."""
    peer = context.peer() or ""
    _, _, address = peer.partition(":")
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class MessagingService(MessagingServiceServicer):
    """The RPCs; ``port`` is the endpoint's own, set once it is bound (routes name it)."""

    def __init__(self, parts: BrokerParts, telemetry: Telemetry, peers: GrpcPeers) -> None:
        self.parts = parts
        self.telemetry = telemetry
        self.peers = peers
        self.port = 0

    def _refusal(self, context: grpc.aio.ServicerContext, *needs: Need) -> pb.Status | None:
        return auth.refusal(self.parts.gate, context.invocation_metadata() or (), peer_host(context)[0], needs)

    async def _sets(self, name: str) -> list[tuple[TopicConfig, pb.Broker]] | pb.Status:
        """The topic's config on every broker set serving gRPC with the set's master (this broker's first), or the
        TOPIC_NOT_FOUND status saying what to do."""
        here = self.parts.topics.get(name)
        sets = [] if here is None else [(here, routes.broker(self.parts.broker_name, self.parts.host, self.port))]
        for peer in await self.peers.other_sets(name):
            q = peer.queues
            sets.append((TopicConfig(name, q.read_queue_nums, q.write_queue_nums, q.perm),
                         routes.broker(q.broker_name, peer.host, peer.port)))
        if not sets:
            return status(pb.TOPIC_NOT_FOUND, f"topic {name} exists on no broker serving gRPC (this one is "
                                              f"{self.parts.broker_name}): create it first (spark-mq admin topic "
                                              f"create)")
        return sets

    async def QueryRoute(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        refused = self._refusal(context)
        if refused is not None:
            return spb.QueryRouteResponse(status=refused)
        sets = await self._sets(request.topic.name)
        if isinstance(sets, pb.Status):
            return spb.QueryRouteResponse(status=sets)
        return spb.QueryRouteResponse(status=OK, message_queues=[q for topic, broker in sets
                                                                 for q in routes.message_queues(topic, broker)])

    async def Heartbeat(self, request: spb.HeartbeatRequest, context) -> spb.HeartbeatResponse:
        needs = (auth.group(request.group.name),) if request.HasField("group") and request.group.name else ()
        refused = self._refusal(context, *needs)
        if refused is None:
            self.telemetry.heartbeat(_metadata(context).get(CLIENT_ID, ""))
        return spb.HeartbeatResponse(status=refused or OK)

    async def SendMessage(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        refused = self._refusal(context, *{auth.topic(m.topic.name, Perm.PUB) for m in request.messages})
        if refused is not None:
            return spb.SendMessageResponse(status=refused)
        host, port = peer_host(context)
        try:
            born = pack_host(host, port)
        except OSError:  # not IPv4 (we store IPv4 hosts only)
            born = pack_host("127.0.0.1", port)
        channel = self.telemetry.sessions.get(_metadata(context).get(CLIENT_ID, ""))
        return await send_message(self.parts.sender, request, born, self.parts.slave_refusal, channel)

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context) -> spb.QueryAssignmentResponse:
        refused = self._refusal(context, auth.topic(request.topic.name, Perm.SUB), auth.group(request.group.name))
        if refused is not None:
            return spb.QueryAssignmentResponse(status=refused)
        sets = await self._sets(request.topic.name)
        if isinstance(sets, pb.Status):
            return spb.QueryAssignmentResponse(status=sets)
        return spb.QueryAssignmentResponse(status=OK, assignments=[a for topic, broker in sets
                                                                   for a in routes.assignment(topic, broker)])

    async def EndTransaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        refused = self._refusal(context, auth.topic(request.topic.name, Perm.PUB))
        if refused is not None:
            return spb.EndTransactionResponse(status=refused)
        return end_transaction(self.parts.transactions, request, self.parts.slave_refusal)

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest, context
                                      ) -> spb.NotifyClientTerminationResponse:
        refused = self._refusal(context)
        if refused is not None:
            return spb.NotifyClientTerminationResponse(status=refused)
        self.telemetry.terminated(_metadata(context).get(CLIENT_ID, ""))
        return spb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand], context
                        ) -> AsyncIterator[spb.TelemetryCommand]:
        refused = self._refusal(context)
        if refused is not None:
            yield spb.TelemetryCommand(status=refused)
            return
        client_id = _metadata(context).get(CLIENT_ID, "")
        if not client_id:
            yield spb.TelemetryCommand(status=status(pb.CLIENT_ID_REQUIRED, f"no {CLIENT_ID} in the call's metadata"))
            return
        host, port = peer_host(context)
        async for command in self.telemetry.stream(request_iterator, client_id, f"{host}:{port}"):
            yield command

    async def GetOffset(self, request: spb.GetOffsetRequest, context) -> spb.GetOffsetResponse:
        refused = self._refusal(context, auth.group(request.group.name),
                                auth.topic(request.message_queue.topic.name, Perm.SUB))
        return spb.GetOffsetResponse(status=refused) if refused else offsets.get_offset(self.parts.offsets, request)

    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context) -> spb.UpdateOffsetResponse:
        refused = self._refusal(context, auth.group(request.group.name),
                                auth.topic(request.message_queue.topic.name, Perm.SUB))
        if refused is not None:
            return spb.UpdateOffsetResponse(status=refused)
        return offsets.update_offset(self.parts.offsets, self.parts.store, request)

    async def QueryOffset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        refused = self._refusal(context, auth.topic(request.message_queue.topic.name, Perm.SUB))
        return spb.QueryOffsetResponse(status=refused) if refused else offsets.query_offset(self.parts.store, request)

    # -- consumption: over pop ----------------------------------------------------------------------
    def _consume_refusal(self, context, group: str, topic: str) -> pb.Status | None:
        return self._refusal(context, auth.group(group), auth.topic(topic, Perm.SUB))

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context
                             ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        refused = self._consume_refusal(context, request.group.name, request.message_queue.topic.name)
        if refused is not None:
            yield spb.ReceiveMessageResponse(status=refused)
            return
        async for response in consume.receive(self.parts.pops, request, peer_host(context)[0]):
            yield response

    async def AckMessage(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        refused = self._consume_refusal(context, request.group.name, request.topic.name)
        if refused is not None:
            return spb.AckMessageResponse(status=refused)
        return await consume.ack(self.parts.pops, request)

    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest, context
                                      ) -> spb.ChangeInvisibleDurationResponse:
        refused = self._consume_refusal(context, request.group.name, request.topic.name)
        if refused is not None:
            return spb.ChangeInvisibleDurationResponse(status=refused)
        return await consume.change_invisible(self.parts.pops, request)

    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest, context
                                              ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        refused = self._consume_refusal(context, request.group.name, request.topic.name)
        if refused is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refused)
        return await consume.forward_to_dlq(self.parts.revive, request)
