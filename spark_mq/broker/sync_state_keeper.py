"""A controller-mode master keeping its SyncStateSet (RocketMQ 5's AutoSwitchHAService
``maybeShrinkSyncStateSet`` / ``maybeExpandInSyncStateSet``): the replicas that have its log.

Every ``CHECK_INTERVAL_S`` it works out the set it wants from its HA connections (each names its
slave: the controller-mode hello) and asks the controller for it when it differs
(ALTER_SYNC_STATE_SET); puts wait for the set the controller agreed (``HAService``), and only its
members can be elected cleanly, so a member must hold what the master acknowledged:

- a member stays while its oldest unacknowledged byte is at most ``haMaxTimeSlaveNotCatchup`` old,
  and, disconnected, for that long after it was last in sync (a reconnect does not shrink the set);
- a slave joins once it has every byte the master has (lag 0), never merely close.

Thread-safety: none; runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from spark_mq.broker.replicas_manager import ReplicasManager
from spark_mq.common.errors import RemotingError
from spark_mq.store.ha.ha_service import HAService

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5


class SyncStateKeeper:
    def __init__(self, ha: HAService, replicas: ReplicasManager, max_not_catchup_s: float, master_id: int) -> None:
        self.ha = ha
        self.replicas = replicas
        self.max_not_catchup_s = max_not_catchup_s
        self.master_id = master_id
        self._started = time.monotonic()
        self._last_in_sync: dict[int, float] = {}  # member id -> when it was last seen within the bound

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            wanted = self.wanted(time.monotonic())
            if wanted == self.ha.sync_state_set:
                continue
            try:
                if await self.replicas.alter_sync_state_set(wanted):
                    self.ha.set_sync_state_set(wanted)
            except RemotingError as e:
                log.warning("cannot change the SyncStateSet to %s (retrying): %s", sorted(wanted), e)

    def wanted(self, now: float) -> frozenset[int]:
        current = self.ha.sync_state_set
        lagging: dict[int, tuple[int, float]] = {}  # slave id -> (bytes, seconds) behind, its best connection
        for c in self.ha.connections:
            if c.slave_id is not None:
                lag = (c.lag_bytes(), c.lag_seconds(now))
                lagging[c.slave_id] = min(lagging.get(c.slave_id, lag), lag)
        members = {self.master_id}
        for slave, (behind, seconds) in lagging.items():
            if behind == 0 or (slave in current and seconds <= self.max_not_catchup_s):
                members.add(slave)
                self._last_in_sync[slave] = now
        for gone in current - members - lagging.keys():
            if now - self._last_in_sync.get(gone, self._started) <= self.max_not_catchup_s:
                members.add(gone)
        return frozenset(members)
