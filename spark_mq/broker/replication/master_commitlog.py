"""What a slave asks its master about the master's commitlog before replicating from it (see
``HAClient``): the unit at an offset (VIEW_MESSAGE_BY_ID) and the commitlog's end
(GET_BROKER_RUNTIME_INFO's ``commitLogMaxOffset``). Both are RocketMQ requests a RocketMQ master
answers too, so the HA protocol itself stays RocketMQ's. In controller mode also its epoch history
(spark_mq's GET_EPOCH_HISTORY, see ``epoch_processor``).

Thread-safety: runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from spark_mq.broker.processors.epoch import decode_history
from spark_mq.common.errors import RemotingError
from spark_mq.remoting.bodies import KVTable
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import ViewMessageRequestHeader
from spark_mq.store.ha.divergence import ReplicaLog

REQUEST_TIMEOUT_S = 3.0


class MasterCommitLog:
    def __init__(self, client: RemotingClient, master_addr: Callable[[], str]) -> None:
        self.client = client
        self.master_addr = master_addr

    async def unit(self, offset: int) -> bytes | None:
        """The master's unit at commitlog ``offset``, None if it has none there. Raises ``RemotingError``
        when the master cannot be asked."""
        fields = ViewMessageRequestHeader(offset=offset).to_ext_fields()
        resp = await self.client.invoke(self.master_addr(), RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, fields), REQUEST_TIMEOUT_S)
        return resp.body if resp.code == ResponseCode.SUCCESS else None

    async def end(self) -> int:
        """The master's commitlog end; -1 when its answer does not say. Raises ``RemotingError`` when
        the master cannot be asked (or its answer is not a KVTable)."""
        resp = await self.client.invoke(self.master_addr(), RemotingCommand.request(
            RequestCode.GET_BROKER_RUNTIME_INFO), REQUEST_TIMEOUT_S)
        value = KVTable.from_json(resp.body or b"{}").table.get("commitLogMaxOffset", "") \
            if resp.code == ResponseCode.SUCCESS else ""
        return int(value) if value.isdigit() else -1

    async def history(self) -> ReplicaLog:
        """The master's commitlog range and epoch history. Raises ``RemotingError`` when the master cannot
        be asked or does not answer one (it is not in controller mode)."""
        resp = await self.client.invoke(self.master_addr(), RemotingCommand.request(
            RequestCode.GET_EPOCH_HISTORY), REQUEST_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"master {self.master_addr()} gave no epoch history ({resp.code} {resp.remark}): "
                                "is it in controller mode (enableControllerMode=true)?")
        try:
            return decode_history(resp.body or b"")
        except ValueError as e:
            raise RemotingError(f"master {self.master_addr()} answered a bad epoch history: {e}") from None
