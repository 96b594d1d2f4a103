"""RocketMQ 5's ``Status`` of a gRPC answer, and the remoting response codes it stands for (RocketMQ proxy's
``ResponseBuilder``)."""

from __future__ import annotations

from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.remoting.codes import ResponseCode

OK = pb.Status(code=pb.OK, message="OK")
# remoting response code -> gRPC status code
_FROM_REMOTING = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
    ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: pb.INVALID_RECEIPT_HANDLE,  # a pop's message no longer in flight (proxy's answer)
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
}


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


def from_remoting(code: int, remark: str) -> pb.Status:
    """The status of an outcome the remoting path answers with ``code``."""
    grpc_code = _FROM_REMOTING.get(code, pb.INTERNAL_SERVER_ERROR)
    return OK if grpc_code == pb.OK else status(grpc_code, remark or f"remoting code {code}")
