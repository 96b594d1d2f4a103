"""The check-back of unresolved half messages (RocketMQ's ``TransactionalMessageCheckService``): what
a check round does with one half message past its timeout.

One older than ``transactionTimeOut`` (or its own ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is renewed, as
RocketMQ does: a copy with ``TRANSACTION_CHECK_TIMES`` + 1 is appended to the half queue (the service
gives the old one an op record), and CHECK_TRANSACTION_STATE about the copy goes to a live producer of
the group. Past ``transactionCheckMax`` checks a half message is discarded instead: kept in
``TRANS_CHECK_MAX_TIME_TOPIC`` for inspection. The round itself, which picks the half messages due and
keeps the books, is ``TransactionalMessageService.check``.

A check goes through a :class:`CheckBackSender`: a 4.x client's remoting connection
(:class:`RemotingCheckBack`); a 5.x client's gRPC Telemetry stream implements the same interface.
A half message without UNIQ_KEY is named by its offset message id (:func:`message_name`).
"""

from __future__ import annotations

from typing import Protocol

from spark_mq.broker.transaction.commit import real_queue
from spark_mq.broker.transaction.half_messages import HALF_QUEUE_ID, HALF_TOPIC
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import CHECK_IMMUNITY_TIME, TRANSACTION_CHECK_TIMES, UNIQ_KEY, encode_properties
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.common.unit.encode import encode_batch
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import CheckTransactionStateRequestHeader
from spark_mq.store.results import PutResult

CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


class CheckBackSender(Protocol):
    """One live producer a check can go to (whatever protocol the client speaks)."""

    @property
    def closed(self) -> bool: ...

    @property
    def peer(self) -> str: ...

    def send_check(self, m: StoredMessage, broker_name: str) -> None:
        """Ask about half message ``m`` (as stored: its renewed copy); raises when the channel is gone."""


class RemotingCheckBack:
    """A 4.x client's remoting connection: CHECK_TRANSACTION_STATE, oneway, as RocketMQ's Broker2Client."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotingCheckBack) and other.conn is self.conn

    def __hash__(self) -> int:
        return hash(self.conn)

    @property
    def closed(self) -> bool:
        return self.conn.closed

    @property
    def peer(self) -> str:
        return self.conn.peer

    def send_check(self, m: StoredMessage, broker_name: str) -> None:
        self.conn.send_oneway(check_request(m, broker_name))


def message_name(m: StoredMessage) -> str:
    """How a half message is named in checks and logs: its UNIQ_KEY, else its offset message id
    (RocketMQ's ``MessageExt.getMsgId()``)."""
    return m.properties.get(UNIQ_KEY) or offset_msg_id(m.store_host, m.physical_offset)


def check_times(m: StoredMessage) -> int:
    """How many checks a half message had so far."""
    times = m.properties.get(TRANSACTION_CHECK_TIMES, "")
    return int(times) if times.isdigit() else 0


def timed_out(m: StoredMessage, now_ms: int, time_out_ms: int) -> bool:
    """Whether a half message is due for a check: older than its own immunity time, else ``time_out_ms``."""
    immunity = m.properties.get(CHECK_IMMUNITY_TIME, "")
    timeout = int(immunity) * 1000 if immunity.isdigit() else time_out_ms
    return now_ms - m.born_timestamp >= timeout


def _renewed_properties(m: StoredMessage) -> dict[str, str]:
    return {**m.properties, TRANSACTION_CHECK_TIMES: str(check_times(m) + 1)}


def renewal(msgs: list[StoredMessage]) -> MessageBatch:
    """The renewed copies of ``msgs`` for the half queue, one check more each."""
    props = [encode_properties(_renewed_properties(m)) for m in msgs]
    batch = MessageBatch.of(HALF_TOPIC, HALF_QUEUE_ID, [m.body for m in msgs], props, born_host=msgs[0].born_host)
    batch.born_timestamps[:] = [m.born_timestamp for m in msgs]
    batch.flags[:] = [m.flag for m in msgs]
    batch.sys_flags[:] = [m.sys_flag for m in msgs]
    batch.reconsume_times[:] = [m.reconsume_times for m in msgs]
    return batch


def renewed_copy(m: StoredMessage, result: PutResult, i: int) -> StoredMessage:
    """Message ``i`` of a stored :func:`renewal` (``result``), as read back."""
    return StoredMessage(HALF_TOPIC, HALF_QUEUE_ID, result.queue_offset + i, int(result.physical_offsets[i]), m.body,
                         _renewed_properties(m), m.flag, m.sys_flag, m.body_crc, m.born_timestamp, m.born_host,
                         result.store_timestamp, result.store_host, m.reconsume_times)


def check_request(m: StoredMessage, broker_name: str) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE about half message ``m``: the message as its producer sent it (real
    topic and queue) in the body."""
    topic, queue_id = real_queue(m)
    real = MessageBatch.of(topic, queue_id, [m.body], [encode_properties(m.properties)],
                           born_timestamp=m.born_timestamp, born_host=m.born_host)
    real.flags[:] = m.flag
    real.sys_flags[:] = m.sys_flag
    body = encode_batch(real, m.physical_offset, m.queue_offset, m.store_timestamp, m.store_host).data
    name = message_name(m)
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=m.queue_offset, commit_log_offset=m.physical_offset, msg_id=name,
        transaction_id=name, offset_msg_id=offset_msg_id(m.store_host, m.physical_offset), topic=topic,
        broker_name=broker_name)
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body)
