"""A controller-mode master keeping its SyncStateSet (RocketMQ 5's AutoSwitchHAService
``maybeShrinkSyncStateSet`` / ``maybeExpandInSyncStateSet``): the replicas that have its log.

Every ``CHECK_INTERVAL_S`` it works out the set it wants from its HA connections (each names its
slave: the controller-mode hello) and asks the controller for it when it differs
(ALTER_SYNC_STATE_SET); puts wait for the set the controller agreed (``store/ha/sync_state_set.py``
owns it; this keeper writes its proposals), and only its members can be elected cleanly, so a member
must hold what the master acknowledged:

- a member stays while its oldest unacknowledged byte is at most ``haMaxTimeSlaveNotCatchup`` old,
  and, disconnected, for that long after it was last in sync (a reconnect does not shrink the set);
- a slave joins once it has every byte the master has (lag 0), never merely close.

From the moment it asks until the answer settles it, puts wait for the asked members too
(``BrokerSyncStateSet.propose``): a controller that takes a grown set but whose answer is late or
lost may elect the joining replica, which must then hold what was acknowledged meanwhile. A set asked without an answer
is asked again, as it was, until settled: taken (SUCCESS), certainly not taken (refused at the same
set epoch for its members: ``NOT_TAKEN``), or superseded by the set the controller has (learned by the
``ReplicasManager``'s sync, which tells the ``BrokerSyncStateSet``).

Thread-safety: none; runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from spark_mq.broker.replication.replicas_manager import ReplicasManager
from spark_mq.common.errors import RemotingError
from spark_mq.remoting.codes import ResponseCode
from spark_mq.store.ha.ha_service import HAService
from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
# refusals that passed the controller's epoch fences: it still has the set this master knows, not the one asked
NOT_TAKEN = frozenset({ResponseCode.CONTROLLER_INVALID_REPLICAS, ResponseCode.CONTROLLER_BROKER_NOT_ALIVE})


class SyncStateKeeper:
    """Proposes and settles ``sync_state_set`` from what ``ha``'s connections show; asks the controller
    through ``replicas``."""

    def __init__(self, ha: HAService, sync_state_set: BrokerSyncStateSet, replicas: ReplicasManager,
                 max_not_catchup_s: float) -> None:
        self.ha = ha
        self.sync_state_set = sync_state_set
        self.replicas = replicas
        self.max_not_catchup_s = max_not_catchup_s
        self._started = time.monotonic()
        self._last_in_sync: dict[int, float] = {}  # member id -> when it was last seen within the bound

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            await self.check(time.monotonic())

    async def check(self, now: float) -> None:
        """Ask for the set wanted now, or again for the one asked whose fate is not known yet."""
        asked = self.sync_state_set.proposed or self.wanted(now)
        if asked == self.sync_state_set.members:
            return
        self.sync_state_set.propose(asked)
        try:
            code = await self.replicas.alter_sync_state_set(asked)
        except RemotingError as e:
            log.warning("cannot change the SyncStateSet to %s (retrying; puts wait for its members too): %s",
                        sorted(asked), e)
            return
        if code == ResponseCode.SUCCESS:
            self.sync_state_set.settle(asked)
        elif code in NOT_TAKEN:
            self.sync_state_set.withdraw()

    def wanted(self, now: float) -> frozenset[int]:
        current = self.sync_state_set.members
        lagging: dict[int, tuple[int, float]] = {}  # slave id -> (bytes, seconds) behind, its best connection
        for c in self.ha.connections:
            if c.slave_id is not None:
                lag = c.lag(now)[1:]
                lagging[c.slave_id] = min(lagging.get(c.slave_id, lag), lag)
        members = {self.sync_state_set.master_id}
        for slave, (behind, seconds) in lagging.items():
            if behind == 0 or (slave in current and seconds <= self.max_not_catchup_s):
                members.add(slave)
                self._last_in_sync[slave] = now
        for gone in current - members - lagging.keys():
            if now - self._last_in_sync.get(gone, self._started) <= self.max_not_catchup_s:
                members.add(gone)
        return frozenset(members)
