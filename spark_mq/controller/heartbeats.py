"""Which brokers are alive, by their BROKER_HEARTBEATs (RocketMQ's DefaultBrokerHeartbeatManager).

Every controller process keeps its own table (brokers heartbeat to each controller), in memory: it is
evidence, not a decision, so it is never persisted. A broker is alive while its last heartbeat is
younger than its timeout (its own ``heartbeatTimeoutMills``, else the controller's default) and the
connection it came on is open: a crashed broker's closed socket ends it at once, a frozen one's
silence after the timeout. The progress a heartbeat reports (epoch, commitlog offset) only moves
forward, so a late heartbeat never makes a replica look less up to date than it was.

A controller that just took over (or restarted) has not heard from every broker yet: a replica its
records name that it never heard from is presumed alive for one default timeout (``presume_alive``), so
its first seconds as leader neither depose a live master nor hide it from a registering slave.

A master it does not hear may still hold a master lease the previous leader granted (its heartbeats
reach that leader, not this one): ``may_hold_lease`` says so for one lease after the takeover (the
lease the broker last reported, else the default timeout), unless its connection closed (a dead
process, replaced at once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from spark_mq.controller.elect_policy import NO_PRIORITY, ReplicaProgress

log = logging.getLogger(__name__)


@dataclass
class BrokerLiveInfo:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    last_seen: float  # the clock's seconds
    timeout_s: float
    progress: ReplicaProgress
    channel: object  # the connection it heartbeats on


class BrokerLiveTable:
    """Last heartbeat per (broker name, broker id); methods run on the controller's event loop."""

    def __init__(self, default_timeout_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.default_timeout_s = default_timeout_ms / 1000
        self._clock = clock
        self._table: dict[tuple[str, int], BrokerLiveInfo] = {}
        self._heard: set[tuple[str, int]] = set()  # every broker this process ever heard from
        self._closed: set[tuple[str, int]] = set()  # brokers whose connection closed, not heard from since
        self._lease_s: dict[tuple[str, int], float] = {}  # the master lease each broker last reported
        self._presumed: frozenset[tuple[str, int]] = frozenset()
        self._presumed_until = float("-inf")

    def on_heartbeat(self, cluster_name: str, broker_name: str, broker_id: int, address: str, channel: object, *,
                     epoch: int | None, max_offset: int | None, timeout_ms: int | None,
                     election_priority: int | None, lease_ms: int | None = None) -> None:
        key = (broker_name, broker_id)
        self._closed.discard(key)
        if lease_ms is not None and lease_ms > 0:
            self._lease_s[key] = lease_ms / 1000
        timeout_s = timeout_ms / 1000 if timeout_ms and timeout_ms > 0 else self.default_timeout_s
        priority = NO_PRIORITY if election_priority is None else election_priority
        reported = ReplicaProgress(-1 if epoch is None else epoch, -1 if max_offset is None else max_offset, priority)
        prev = self._table.get(key)
        self._heard.add(key)
        if prev is None:
            log.info("broker %s id %d (%s) is alive", broker_name, broker_id, address)
            progress = reported
        else:
            old = prev.progress
            ahead = (reported.epoch, reported.max_offset) > (old.epoch, old.max_offset)
            progress = reported if ahead else ReplicaProgress(old.epoch, old.max_offset, priority)
        self._table[key] = BrokerLiveInfo(cluster_name, broker_name, broker_id, address, self._clock(), timeout_s,
                                          progress, channel)

    def on_channel_closed(self, channel: object) -> list[BrokerLiveInfo]:
        """Forget the brokers that heartbeat on ``channel``; returns them."""
        gone = [info for info in self._table.values() if info.channel is channel]
        for info in gone:
            del self._table[(info.broker_name, info.broker_id)]
            self._closed.add((info.broker_name, info.broker_id))
            log.warning("broker %s id %d (%s) is gone: its connection closed", info.broker_name, info.broker_id,
                        info.address)
        return gone

    def expire(self) -> list[BrokerLiveInfo]:
        """Forget the brokers silent past their timeout; returns them."""
        now = self._clock()
        gone = [info for info in self._table.values() if now - info.last_seen > info.timeout_s]
        for info in gone:
            del self._table[(info.broker_name, info.broker_id)]
            log.warning("broker %s id %d (%s) is dead: no heartbeat for %.1f s", info.broker_name, info.broker_id,
                        info.address, now - info.last_seen)
        return gone

    def presume_alive(self, replicas: Iterable[tuple[str, int]]) -> None:
        """For one default timeout from now, count these (broker name, id) as alive until heard from."""
        self._presumed = frozenset(replicas)
        self._presumed_until = self._clock() + self.default_timeout_s

    def lease_s(self, broker_name: str, broker_id: int) -> float:
        """The longest master lease this broker may hold: as it reported, else the default timeout (a lease
        is always shorter than its broker's heartbeat timeout)."""
        return self._lease_s.get((broker_name, broker_id), self.default_timeout_s)

    def may_hold_lease(self, broker_name: str, broker_id: int, took_over_at: float) -> bool:
        """Whether a master this controller does not hear may still acknowledge writes under a lease granted
        before ``took_over_at`` (the clock's seconds): for one lease from then, unless its connection closed."""
        if (broker_name, broker_id) in self._closed:
            return False
        return self._clock() < took_over_at + self.lease_s(broker_name, broker_id)

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        key = (broker_name, broker_id)
        info = self._table.get(key)
        if info is None:
            return key in self._presumed and key not in self._heard and self._clock() < self._presumed_until
        return self._clock() - info.last_seen <= info.timeout_s

    def progress(self, broker_name: str, broker_id: int) -> ReplicaProgress:
        info = self._table.get((broker_name, broker_id))
        return info.progress if info is not None else ReplicaProgress()
