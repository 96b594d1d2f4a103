"""The controller's push of an election to the brokers (RocketMQ's ControllerManager.notifyBrokerRoleChanged
and its NotifyService), so the elected replica takes over at once rather than at its next poll.

After each election that names a master, the leader sends NOTIFY_BROKER_ROLE_CHANGED oneway to the
listen address of every replica of the set it holds alive: the new master's id, address and epoch in
the header, the SyncStateSet in the body, RocketMQ's wire format. The controller dials the brokers
(as RocketMQ does) on a client of its own rather than answering on their heartbeat connections. Nothing
waits for it and nothing depends on it: a notify lost, late or refused changes nothing the brokers'
``syncBrokerMetadataPeriod`` poll would not learn, and a broker ignores one older than what it knows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from spark_mq.common.errors import RemotingError
from spark_mq.controller.replicas_info import BrokerSetState
from spark_mq.remoting.bodies import SyncStateSet
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import NotifyBrokerRoleChangedRequestHeader
from spark_mq.remoting.loop import stop_tasks

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_S = 3.0  # to dial a broker (RocketMQ's 3000 ms); a broker that does not answer learns it by its poll


class RoleChangeNotifier:
    """Runs on the controller's event loop; ``alive(broker name, broker id)`` picks the brokers to tell; ``client``
    (the controller's, signing with its account: a notify is an admin request; closed here) dials them."""

    def __init__(self, alive: Callable[[str, int], bool], client: RemotingClient) -> None:
        self._alive = alive
        self._client = client
        self._tasks: set[asyncio.Task] = set()

    def notify(self, state: BrokerSetState) -> None:
        """Tell the set's live replicas who its master is now (without waiting for the sends)."""
        if state.master_id is None:
            return
        header = NotifyBrokerRoleChangedRequestHeader(
            master_address=state.master_address, master_epoch=state.master_epoch,
            sync_state_set_epoch=state.sync_state_set_epoch, master_broker_id=state.master_id).to_ext_fields()
        body = SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).to_json()
        for broker_id, address in sorted(state.replicas.items()):
            if self._alive(state.broker_name, broker_id):
                # a command per broker: each its own opaque
                cmd = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body, oneway=True)
                task = asyncio.ensure_future(self._send(state.broker_name, broker_id, address, cmd))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, broker_name: str, broker_id: int, address: str, cmd: RemotingCommand) -> None:
        try:
            await self._client.invoke_oneway(address, cmd, NOTIFY_TIMEOUT_S)
        except RemotingError as e:
            log.warning("%s: could not notify replica %d (%s) of its new master (its poll will learn it): %s",
                        broker_name, broker_id, address, e)
            return
        log.info("%s: notified replica %d (%s): master %s, master epoch %s", broker_name, broker_id, address,
                 cmd.ext_fields.get("masterBrokerId"), cmd.ext_fields.get("masterEpoch"))

    async def close(self) -> None:
        await stop_tasks(list(self._tasks))
        await self._client.close()
