"""GET_EPOCH_HISTORY (spark_mq's own request, controller mode only): a master's commitlog range and
epoch history, which a slave compares with its own before it replicates (RocketMQ's AutoSwitch HA
handshake, where the master sends its epoch entries; see ``HAClient``).

Why a remoting request and not a frame on the HA connection: the slave already asks its master over
remoting before it connects (its last unit, the master's end), the answer needs nothing of a
connection's state, and the HA stream stays RocketMQ 4.x's byte for byte. A broker not in controller
mode does not serve it (REQUEST_CODE_NOT_SUPPORTED).

Body (JSON): ``{"minOffset": int, "maxOffset": int, "epochs": [[epoch, startOffset], ...]}``.
"""

from __future__ import annotations

import json

from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.server import RemotingServer
from spark_mq.store.ha.divergence import ReplicaLog
from spark_mq.store.ha.epoch_file import EpochEntry, EpochFile
from spark_mq.store.ha.replica_epochs import replica_log
from spark_mq.store.message_store import MessageStore


def encode_history(log: ReplicaLog) -> bytes:
    return json.dumps({"minOffset": log.min_offset, "maxOffset": log.max_offset,
                       "epochs": [[e.epoch, e.start_offset] for e in log.epochs]}).encode()


def decode_history(body: bytes) -> ReplicaLog:
    """``ValueError`` for a body that is not one (``json.JSONDecodeError`` is one)."""
    obj = json.loads(body)
    try:
        return ReplicaLog(int(obj["minOffset"]), int(obj["maxOffset"]),
                          tuple(EpochEntry(int(e), int(s)) for e, s in obj["epochs"]))
    except (KeyError, TypeError) as e:
        raise ValueError(f"not an epoch history: {e}") from None


class EpochProcessor:
    def __init__(self, store: MessageStore, epochs: EpochFile) -> None:
        self.store = store
        self.epochs = epochs

    def register_on(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_EPOCH_HISTORY, self.history)

    async def history(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=encode_history(replica_log(self.store, self.epochs)))
