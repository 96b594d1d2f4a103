"""``TransactionProducer``: RocketMQ's TransactionMQProducer.

``send_message_in_transaction(msg, arg)`` sends ``msg`` as a half message (``TRAN_MSG=true``,
``PGROUP``: invisible to consumers), runs the local transaction
(``executor(msg, arg) -> LocalTransactionState``) once the broker stored it, and tells the broker
the outcome (END_TRANSACTION, oneway): COMMIT_MESSAGE delivers the message, ROLLBACK_MESSAGE drops
it, UNKNOW (or an executor that raises) leaves it to the broker's check-back. The broker then
asks a live producer of the group (CHECK_TRANSACTION_STATE, on the producer's own connection);
``checker(message) -> LocalTransactionState`` answers from the application's records (it must not
re-run the transaction). Executor and checker may be plain functions (run on a worker thread, so
they may block) or coroutine functions.

A transactional message cannot be batched, sent oneway or delayed (as RocketMQ).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.client.results import SendResult, SendStatus
from spark_mq.common.errors import ConfigError, MessageValidationError, RemotingError
from spark_mq.common.message import Message
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.properties import DELAY, PRODUCER_GROUP, TRANSACTION_PREPARED
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import MessageQueue
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    """RocketMQ's LocalTransactionState (UNKNOW is its spelling)."""

    COMMIT_MESSAGE = TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = TRANSACTION_ROLLBACK_TYPE
    UNKNOW = TRANSACTION_NOT_TYPE


Executor = Callable[[Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"]
Checker = Callable[[StoredMessage], "LocalTransactionState | Awaitable[LocalTransactionState]"]


@dataclasses.dataclass(frozen=True)
class TransactionSendResult:
    """The half message's send result and the local transaction's state (what was sent to the broker)."""

    send_result: SendResult
    local_state: LocalTransactionState

    @property
    def transaction_id(self) -> str | None:
        return self.send_result.transaction_id or self.send_result.msg_id


async def _state_of(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    """Call an executor or checker: a coroutine function on the loop, a plain one on a worker thread."""
    if inspect.iscoroutinefunction(fn):
        outcome = await fn(*args)
    else:
        outcome = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(outcome):
            outcome = await outcome
    if not isinstance(outcome, LocalTransactionState):
        raise TypeError(f"expected a LocalTransactionState, got {outcome!r}")
    return outcome


class TransactionProducer(Producer):
    """A producer of transactional messages for group ``group`` (also sends ordinary messages)."""

    def __init__(self, group: str, config: ClientConfig, executor: Executor, checker: Checker,
                 **options: Any) -> None:
        if not callable(executor) or not callable(checker):
            raise ConfigError("a TransactionProducer needs an executor (runs the local transaction) and a "
                              "checker (answers the broker's check-back): give both as callables")
        super().__init__(group, config, **options)
        self.executor = executor
        self.checker = checker
        self._checks: set[asyncio.Task] = set()

    async def start(self) -> TransactionProducer:
        self.instance.api.on_check_transaction_state(self.group, self._on_check)
        await super().start()
        return self

    async def shutdown(self) -> None:
        self.instance.api.on_check_transaction_state(self.group, None)
        await super().shutdown()

    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, end it at the broker.

        Raises (nothing committed, the executor not run) if the half message is not stored.
        """
        self._check_started()
        if DELAY in msg.properties:
            raise MessageValidationError("a transactional message cannot have a delay level (DELAY): send it "
                                         "without one")
        half = dataclasses.replace(msg, properties={**msg.properties, TRANSACTION_PREPARED: "true",
                                                    PRODUCER_GROUP: self.group})
        prepared = self._prepare(half)
        prepared = dataclasses.replace(prepared, sys_flag=prepared.sys_flag | TRANSACTION_PREPARED_TYPE)
        broker_addr: list[str] = []

        async def attempt(mq, addr: str, left: float) -> SendResult:
            broker_addr[:] = [addr]
            result = await self._send_one(prepared, mq, addr, left)
            assert result is not None
            return result

        result = await self._send_retrying(msg.topic, attempt)
        state = LocalTransactionState.ROLLBACK_MESSAGE  # a half message not stored OK is rolled back
        if result.status == SendStatus.SEND_OK:
            try:
                state = await _state_of(self.executor, msg, arg)
            except Exception:
                log.exception("local transaction of %s failed: its outcome is left to the broker's check-back",
                              result.msg_id)
                state = LocalTransactionState.UNKNOW
        result = dataclasses.replace(result, transaction_id=result.msg_id)
        await self._end(broker_addr[0], result, state)
        return TransactionSendResult(result, state)

    async def _end(self, addr: str, result: SendResult, state: LocalTransactionState) -> None:
        """END_TRANSACTION; a lost one is not an error (the broker checks back)."""
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset,
            commit_log_offset=parse_offset_msg_id(result.offset_msg_id)[1], commit_or_rollback=state.value,
            from_transaction_check=False, msg_id=result.msg_id or "", transaction_id=result.transaction_id)
        try:
            await self.instance.api.end_transaction(addr, header, timeout=self.send_timeout_s)
        except RemotingError as e:
            log.warning("END_TRANSACTION of %s to %s not sent (%s): the broker will check back", result.msg_id,
                        addr, e)

    def _on_check(self, header: CheckTransactionStateRequestHeader, msg: StoredMessage, conn: Connection) -> None:
        """A check-back: answered in its own task (a slow checker holds no other request up)."""
        task = asyncio.get_running_loop().create_task(self._answer_check(header, msg, conn),
                                                      name="transaction-check")
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, header: CheckTransactionStateRequestHeader, msg: StoredMessage,
                            conn: Connection) -> None:
        try:
            state = await _state_of(self.checker, msg)
        except Exception:
            log.exception("transaction checker failed for %s: answered UNKNOW", header.transaction_id)
            state = LocalTransactionState.UNKNOW
        end = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset, commit_or_rollback=state.value, from_transaction_check=True,
            msg_id=header.msg_id or "", transaction_id=header.transaction_id)
        try:  # on the connection the check came on, as RocketMQ's client answers
            conn.send_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext_fields(), oneway=True))
        except RemotingError as e:
            log.info("answer to the transaction check of %s not sent (%s): the broker asks again",
                     header.transaction_id, e)


class SyncTransactionProducer(BlockingFacade[TransactionProducer]):
    """A blocking ``TransactionProducer`` (executor and checker run on worker threads)."""

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, executor: Executor, checker: Checker,
                 **options: Any) -> None:
        super().__init__(lambda: TransactionProducer(group, config, executor, checker, **options),
                         f"spark-mq-tx-producer-{group}")

    @property
    def producer(self) -> TransactionProducer:
        return self._target

    def start(self) -> SyncTransactionProducer:
        """Blocking :meth:`TransactionProducer.start`; returns this facade."""
        self._run(self._target.start())
        return self

    def __enter__(self) -> SyncTransactionProducer:
        return self.start()

    def shutdown(self) -> None:
        """Blocking :meth:`TransactionProducer.shutdown`."""
        self._close_with(self._target.shutdown)

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Blocking :meth:`TransactionProducer.send_message_in_transaction`."""
        return self._run(self._target.send_message_in_transaction(msg=msg, arg=arg))

    def send(self, msg: Message) -> SendResult:
        """Blocking :meth:`Producer.send` (an ordinary message)."""
        return self._run(self._target.send(msg=msg))

    def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Blocking :meth:`Producer.publish_queues`: a producer heartbeats (so that the broker can check
        back with it) to the brokers of the topics it knows."""
        return self._run(self._target.publish_queues(topic=topic, refresh=refresh))
