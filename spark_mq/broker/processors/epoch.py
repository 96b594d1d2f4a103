"""GET_EPOCH_HISTORY (spark_mq's own request, controller mode only): a master's commitlog range and
epoch history, which a slave compares with its own before it replicates (RocketMQ's AutoSwitch HA
handshake, where the master sends its epoch entries; see ``HAClient``).

Why a remoting request and not a frame on the HA connection: the slave already asks its master over
remoting before it connects (its last unit, the master's end), the answer needs nothing of a
connection's state, and the HA stream stays RocketMQ 4.x's byte for byte. A broker not in controller
mode does not serve it (REQUEST_CODE_NOT_SUPPORTED).

Body: :class:`~spark_mq.remoting.bodies.EpochHistory` (``{"epochs":[[epoch,startOffset],...],"maxOffset":..,
"minOffset":..}``); admin tools read it too (the console's history of elections).
"""

from __future__ import annotations

from spark_mq.common.errors import BodyError
from spark_mq.remoting.bodies import EpochHistory
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.server import RemotingServer
from spark_mq.store.ha.divergence import ReplicaLog
from spark_mq.store.ha.epoch_file import EpochEntry, EpochFile
from spark_mq.store.ha.replica_epochs import replica_log
from spark_mq.store.message_store import MessageStore


def encode_history(log: ReplicaLog) -> bytes:
    return EpochHistory(log.min_offset, log.max_offset, [(e.epoch, e.start_offset) for e in log.epochs]).to_json()


def decode_history(body: bytes) -> ReplicaLog:
    """``ValueError`` for a body that is not one."""
    try:
        history = EpochHistory.from_json(body)
    except BodyError as e:
        raise ValueError(f"not an epoch history: {e}") from None
    return ReplicaLog(history.min_offset, history.max_offset, tuple(EpochEntry(e, s) for e, s in history.epochs))


class EpochProcessor:
    def __init__(self, store: MessageStore, epochs: EpochFile) -> None:
        self.store = store
        self.epochs = epochs

    def register_on(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_EPOCH_HISTORY, self.history)

    async def history(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=encode_history(replica_log(self.store, self.epochs)))
