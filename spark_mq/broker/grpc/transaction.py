"""EndTransaction (RocketMQ proxy's ``EndTransactionActivity``): a 5.x producer's commit or rollback, and its
answer to a check-back, applied by the transactional message service as the remoting END_TRANSACTION is. The
transaction id (``messages.transaction_id``) says where the half message is."""

from __future__ import annotations

from collections.abc import Callable

from spark_mq.broker.grpc.messages import parse_transaction_id, producer_group
from spark_mq.broker.grpc.status import from_remoting, status
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.broker.grpc.stubs import service_pb2 as spb
from spark_mq.broker.transaction.service import TransactionalMessageService
from spark_mq.common.errors import MessageValidationError, StoreNotWritableError
from spark_mq.remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    EndTransactionRequestHeader,
)

_DECISIONS = {pb.COMMIT: TRANSACTION_COMMIT_TYPE, pb.ROLLBACK: TRANSACTION_ROLLBACK_TYPE}


def end_transaction(service: TransactionalMessageService, request: spb.EndTransactionRequest,
                    slave_refusal: Callable[[], str | None]) -> spb.EndTransactionResponse:
    refusal = slave_refusal()
    if refusal is not None:
        return spb.EndTransactionResponse(status=status(pb.INTERNAL_SERVER_ERROR, refusal))
    try:
        physical_offset, queue_offset = parse_transaction_id(request.transaction_id)
    except (ValueError, MessageValidationError) as e:
        return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, str(e)))
    h = EndTransactionRequestHeader(
        producer_group=producer_group(request.topic.name), tran_state_table_offset=queue_offset,
        commit_log_offset=physical_offset,
        commit_or_rollback=_DECISIONS.get(request.resolution, TRANSACTION_NOT_TYPE),
        from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK, msg_id=request.message_id,
        transaction_id=request.transaction_id)
    try:
        code, remark = service.end(h)
    except StoreNotWritableError as e:
        return spb.EndTransactionResponse(status=status(pb.INTERNAL_SERVER_ERROR, str(e)))
    except MessageValidationError as e:
        return spb.EndTransactionResponse(status=status(pb.BAD_REQUEST, str(e)))
    return spb.EndTransactionResponse(status=from_remoting(code, remark))
