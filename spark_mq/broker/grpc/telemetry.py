"""The Telemetry stream (RocketMQ proxy's ``ClientActivity.telemetry``): each 5.x client keeps one open per
endpoint; it sends its ``Settings`` and gets the broker's back (settings sync), and the broker sends it commands.

- Settings: a producer gets its retry policy, the largest body the broker accepts and no message-type check (our
  topics are untyped); a consumer its group's retry policy (``retryMaxTimes`` + 1 attempts), its own
  subscription back with ``fifo`` set for a group with ``consumeMessageOrderly`` (its receives are orderly pops:
  ``consume.py``), a batch size and a long polling timeout.
- Transaction check-back to 5.x producers: a half message sent over gRPC names the producer group
  ``rmq_grpc_producer_<topic>`` (``messages.producer_group``); :meth:`Telemetry.producers` gives the check-back
  path the live sessions of the producers that publish that topic, each a :class:`TelemetrySession` (a
  ``CheckBackSender``) that writes a check as a RecoverOrphanedTransactionCommand.
- The broker's client registry (``client_registry.py``, the admin listings GET_CONSUMER_LIST_BY_GROUP,
  GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST): a client's session is registered when its Settings
  come (a consumer in its group, a producer under the producer group of each topic it publishes, as its half
  messages are stored), kept fresh by its Heartbeat calls, and dropped at NotifyClientTermination or when the
  stream ends.
- A client's answers to thread-stack and verify commands (the broker sends neither) are logged and dropped;
  anything else it sends is answered with a BAD_REQUEST status on the stream, which stays open.

Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from google.protobuf.duration_pb2 import Duration

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.grpc.messages import GRPC_PRODUCER_GROUP_PREFIX, from_stored, producer_group, transaction_id
from spark_mq.broker.grpc.status import OK, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.transaction.commit import real_queue
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, ConsumerData, SubscriptionData
from spark_mq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

PRODUCER_MAX_ATTEMPTS = 3  # sends tried per message by a 5.x producer
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
REQUEST_TIMEOUT_S = 3
# how a 5.x consumer shows in the admin listings: a PushConsumer is pushed messages, a SimpleConsumer pulls them
CONSUME_TYPES = {pb.PUSH_CONSUMER: "CONSUME_PASSIVELY", pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY"}
BACKOFF = pb.ExponentialBackoff(initial=Duration(nanos=10_000_000), max=Duration(seconds=1), multiplier=2.0)


class TelemetrySession:
    """One client's open Telemetry stream: what its Settings said, and the commands waiting to be written.

    A ``CheckBackSender``: the transaction check-back path asks a 5.x producer through it; a ``ClientConn``: the
    client registry keys the client by it (``peer``: ``host:port``)."""

    def __init__(self, client_id: str, peer: str) -> None:
        self.client_id = client_id
        self.peer = peer
        self.closed = False
        self.settings = pb.Settings()
        self.outbox: asyncio.Queue[spb.TelemetryCommand] = asyncio.Queue()

    @property
    def topics(self) -> set[str]:
        """The topics a producer publishes (from its Settings)."""
        if self.settings.WhichOneof("pub_sub") != "publishing":
            return set()
        return {t.name for t in self.settings.publishing.topics}

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """A remoting notice (group change, offset reset): a 5.x client reads over pop and needs none."""

    def send_check(self, m: StoredMessage, broker_name: str) -> None:
        """A check-back of half message ``m`` (``CheckBackSender``), as RocketMQ 5's RecoverOrphanedTransactionCommand:
        the message as its producer sent it (real topic and queue) and its transaction id."""
        if self.closed:
            raise ConnectionError(f"the Telemetry stream of client {self.client_id} ({self.peer}) is closed")
        topic, queue_id = real_queue(m)
        txn = transaction_id(m.store_host, m.physical_offset, m.queue_offset)
        recover = spb.RecoverOrphanedTransactionCommand(message=from_stored(m, topic, queue_id), transaction_id=txn)
        self.outbox.put_nowait(spb.TelemetryCommand(recover_orphaned_transaction_command=recover))


class Telemetry:
    """Every open Telemetry stream by client id, and the settings the broker answers with."""

    def __init__(self, groups: SubscriptionGroupManager, clients: ClientRegistry, max_body_size: int) -> None:
        self.groups = groups
        self.clients = clients
        self.max_body_size = max_body_size
        self.sessions: dict[str, TelemetrySession] = {}

    def producers(self, group: str) -> list[TelemetrySession]:
        """The live sessions of the 5.x producers a check-back of producer group ``group`` may go to."""
        if not group.startswith(GRPC_PRODUCER_GROUP_PREFIX):
            return []
        topic = group[len(GRPC_PRODUCER_GROUP_PREFIX):]
        return [s for s in self.sessions.values() if not s.closed and topic in s.topics]

    def terminated(self, client_id: str) -> None:
        """NotifyClientTermination: the client's session ends (its stream may still be closing)."""
        session = self.sessions.pop(client_id, None)
        if session is not None:
            self._end(session)

    def heartbeat(self, client_id: str) -> None:
        """A Heartbeat call: the client's registration stays fresh (the registry drops silent clients)."""
        session = self.sessions.get(client_id)
        if session is not None and not session.closed:
            self._register(session)

    def _register(self, session: TelemetrySession) -> None:
        """The client in the registry, as its Settings describe it."""
        s = session.settings
        language = pb.Language.Name(s.user_agent.language)
        if s.WhichOneof("pub_sub") == "subscription":
            subs = [SubscriptionData(e.topic.name, e.expression.expression or SUB_ALL,
                                     expression_type=EXPRESSION_SQL92 if e.expression.type == pb.SQL
                                     else EXPRESSION_TAG) for e in s.subscription.subscriptions]
            data = ConsumerData(s.subscription.group.name, CONSUME_TYPES.get(s.client_type, "CONSUME_ACTIVELY"),
                                subscription_data_set=subs)
            if self.clients.register_consumer(data, session.client_id, session, language):
                log.info("5.x consumer %s (%s) joined group %s", session.client_id, session.peer, data.group_name)
        for topic in session.topics:
            self.clients.register_producer(producer_group(topic), session.client_id, session, language)

    def _end(self, session: TelemetrySession) -> None:
        session.closed = True
        self.clients.notify_group_changes(self.clients.drop_connection(session))

    async def stream(self, requests: AsyncIterator[spb.TelemetryCommand], client_id: str, peer: str
                     ) -> AsyncIterator[spb.TelemetryCommand]:
        """Serve one stream until the client closes it: its commands read, the broker's written."""
        session = TelemetrySession(client_id, peer)
        old = self.sessions.get(client_id)
        if old is not None:  # a client rebuilds its stream: the new one replaces it
            old.closed = True
        self.sessions[client_id] = session
        reader = asyncio.get_running_loop().create_task(self._read(requests, session), name=f"telemetry-{peer}")
        out: asyncio.Future[spb.TelemetryCommand] | None = None
        try:
            while True:
                out = asyncio.ensure_future(session.outbox.get())
                await asyncio.wait((out, reader), return_when=asyncio.FIRST_COMPLETED)
                if not out.done():
                    break
                yield out.result()
        finally:  # the client closed its side, or the call ended under us (cancelled)
            if out is not None:
                out.cancel()
            reader.cancel()
            self._end(session)
            if self.sessions.get(client_id) is session:
                del self.sessions[client_id]

    async def _read(self, requests: AsyncIterator[spb.TelemetryCommand], session: TelemetrySession) -> None:
        async for cmd in requests:
            kind = cmd.WhichOneof("command")
            if kind == "settings":
                session.settings = cmd.settings
                self._register(session)
                session.outbox.put_nowait(spb.TelemetryCommand(status=OK, settings=self._settings(cmd.settings)))
            elif kind in ("thread_stack_trace", "verify_message_result"):
                log.info("telemetry: %s from client %s (%s) dropped: this broker asks for none", kind,
                         session.client_id, session.peer)
            else:
                session.outbox.put_nowait(spb.TelemetryCommand(status=status(
                    pb.BAD_REQUEST, f"telemetry command {kind} is not one a client sends")))

    def _settings(self, sent: pb.Settings) -> pb.Settings:
        """The settings the broker answers a client's ``sent`` with."""
        out = pb.Settings(client_type=sent.client_type, request_timeout=Duration(seconds=REQUEST_TIMEOUT_S))
        if sent.HasField("access_point"):
            out.access_point.CopyFrom(sent.access_point)
        if sent.WhichOneof("pub_sub") == "subscription":
            group = self.groups.find(sent.subscription.group.name)
            out.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=group.retry_max_times + 1,
                                                       exponential_backoff=BACKOFF))
            out.subscription.CopyFrom(sent.subscription)
            out.subscription.fifo = group.consume_message_orderly
            out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            out.subscription.long_polling_timeout.CopyFrom(Duration(seconds=LONG_POLLING_TIMEOUT_S))
        else:
            out.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=PRODUCER_MAX_ATTEMPTS,
                                                       exponential_backoff=BACKOFF))
            out.publishing.CopyFrom(pb.Publishing(topics=sent.publishing.topics, max_body_size=self.max_body_size,
                                                  validate_message_type=False))
        return out
