"""END_TRANSACTION (RocketMQ's ``EndTransactionProcessor``): a producer's commit or rollback of a
transaction, sent oneway (answered when asked); the decision itself is the service's
(``TransactionalMessageService.end``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.broker.transaction.service import TransactionalMessageService
from spark_mq.common.errors import BatchBodyError, HeaderError, MessageValidationError, StoreNotWritableError
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import EndTransactionRequestHeader

log = logging.getLogger(__name__)


class EndTransactionProcessor:
    """Serves END_TRANSACTION on the broker's event loop; ``refusal()``: why this broker takes no
    decisions (a slave), else None."""

    def __init__(self, service: TransactionalMessageService, refusal: Callable[[], str | None]) -> None:
        self.service = service
        self.refusal = refusal

    def register_on(self, server) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)

    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        refusal = self.refusal()
        if refusal is not None:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        try:
            h = EndTransactionRequestHeader.from_ext_fields(cmd.ext_fields)
        except HeaderError as e:
            log.warning("END_TRANSACTION from %s refused: %s", conn.peer, e)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        try:
            code, remark = self.service.end(h)
        except StoreNotWritableError as e:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        except (MessageValidationError, BatchBodyError) as e:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if code != ResponseCode.SUCCESS:
            log.warning("END_TRANSACTION from %s (group %s) refused: %s", conn.peer, h.producer_group, remark)
        return cmd.make_response(code, remark or None)
