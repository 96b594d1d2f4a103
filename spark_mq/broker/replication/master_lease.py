"""A controller-mode master's lease: it acknowledges writes only while a heartbeat answered SUCCESS by the
leading controller is younger than ``masterLeaseMills``, counted from the heartbeat's SEND time.

Why that is safe: a controller deems a silent broker dead ``controllerHeartBeatTimeoutMills`` after it
RECEIVED its last heartbeat, which is after the broker sent it; the lease ends ``masterLeaseMills``
after that send, and ``masterLeaseMills + brokerHeartbeatInterval <= controllerHeartBeatTimeoutMills``
(checked at start: ``BrokerConfig.master_lease_ms``). So a master cut off from the controllers stops
acknowledging at least a heartbeat interval before any successor can be elected. A controller that just
took over waits one lease before it replaces a master it does not hear (``controller/manager.py``): that
master may hold a lease its predecessor granted.

Which answers renew: one whose ``isLeader`` field is ``true`` (our controllers add it to the
BROKER_HEARTBEAT answer) and whose ``masterEpoch`` is no newer than the epoch the heartbeat reported (a
deposed master is not renewed: ``ReplicasManager``); without those fields (a RocketMQ controller) a
SUCCESS from the controller the broker last found leading. A follower's answer never renews.

``LeaseGate`` is a master broker's use of the lease: sends are refused while it has run out (checked
again when a stored put is answered), the NameServers are told at once (``on_change``: the broker
registers under its replica id, not as the set's master: ``registration.py``), and every change is
logged in one line the Jepsen checks parse (T1, T2: UTC wall clock, ISO 8601 with milliseconds, ``Z``)::

    INFO    master lease: broker=NAME id=ID acknowledging from=T1
    WARNING master lease: broker=NAME id=ID acknowledged from=T1 to=T2 reason=expired (...)
    INFO    master lease: broker=NAME id=ID acknowledged from=T1 to=T2 reason=role ended

T2 is the moment the lease ran out (or the master role ended), not the moment of the log line; no put
is acknowledged outside [T1, T2]. A process killed while acknowledging logs no end: its interval ends
at its death.

Both classes run on the broker's event loop (not thread-safe).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone

log = logging.getLogger(__name__)

WAKE_MARGIN_S = 0.001  # the watcher wakes just past an expiry


def wall_time(t: float) -> str:
    """``t`` (epoch seconds) as the log lines write it: ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class MasterLease:
    """Granted by the leading controller's heartbeat answers; it outlives role changes (``ControllerSeat``)."""

    def __init__(self, lease_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_ms = lease_ms
        self.clock = clock
        self._until = float("-inf")  # the clock's seconds
        self._granted = asyncio.Event()

    def grant(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (the clock's seconds) was answered by the leader."""
        self._until = max(self._until, sent_at + self.lease_ms / 1000)
        self._granted.set()

    def remaining_s(self) -> float:
        return max(0.0, self._until - self.clock())

    def valid(self) -> bool:
        return self.clock() < self._until

    def since_last_grant_ms(self) -> int | None:
        """How long ago the heartbeat behind the lease was sent (ms); None if none was ever answered."""
        if self._until == float("-inf"):
            return None
        return round((self.clock() - self._until) * 1000) + self.lease_ms

    def expired_at(self, wall: Callable[[], float]) -> float:
        """When the lease ran (or runs) out, on the ``wall`` clock."""
        return wall() - (self.clock() - self._until)

    async def next_grant(self) -> None:
        """Until the next grant."""
        self._granted.clear()
        await self._granted.wait()


class LeaseGate:
    """A master broker's acknowledgements under its lease, from ``start`` until ``close``."""

    def __init__(self, lease: MasterLease, broker_name: str, broker_id: int, on_change: Callable[[], None],
                 wall: Callable[[], float] = time.time) -> None:
        """``on_change``: it started or stopped acknowledging (the broker registers again at once)."""
        self.lease = lease
        self.who = f"broker={broker_name} id={broker_id}"
        self.on_change = on_change
        self._wall = wall
        self._since: float | None = None  # wall clock: acknowledging since
        self._open = True

    @property
    def acknowledging(self) -> bool:
        self._check()
        return self._since is not None

    def holds(self) -> bool:
        """Whether the lease holds, without logging or announcing a change (safe from another thread)."""
        return self._open and self.lease.valid()

    def refusal(self) -> str | None:
        """Why a write is not acknowledged now, None while the lease holds."""
        if self.acknowledging:
            return None
        if not self._open:
            return f"{self.who} is leaving its master role: send to the set's new master"
        return (f"master lease expired: {self._reason()} ({self.who}); the controllers may elect another master: "
                f"send to it")

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's lease figures."""
        return {"masterLeaseAcknowledging": "true" if self.acknowledging else "false",
                "masterLeaseRemainingMills": str(int(self.lease.remaining_s() * 1000)),
                "masterLeaseMills": str(self.lease.lease_ms)}

    async def run(self) -> None:
        """Log each change as it happens (a send checks the lease itself): at an expiry, at a grant."""
        while True:
            if self.acknowledging:
                await asyncio.sleep(self.lease.remaining_s() + WAKE_MARGIN_S)
            else:
                await self.lease.next_grant()

    def close(self) -> None:
        """The master role ends (a role change or a stop): nothing is acknowledged from now on."""
        self._check()
        self._open = False
        self._end(self._wall(), "role ended", logging.INFO)

    def _check(self) -> None:
        valid = self.holds()
        if valid and self._since is None:
            self._since = self._wall()
            log.info("master lease: %s acknowledging from=%s", self.who, wall_time(self._since))
            self.on_change()
        elif not valid and self._open and self._since is not None:
            self._end(self.lease.expired_at(self._wall), f"expired ({self._reason()})", logging.WARNING)
            self.on_change()

    def _reason(self) -> str:
        since = self.lease.since_last_grant_ms()
        return (f"no heartbeat answered by the controller leader {'yet' if since is None else f'for {since} ms'}, "
                f"masterLeaseMills={self.lease.lease_ms}")

    def _end(self, at: float, reason: str, level: int) -> None:
        if self._since is None:
            return
        log.log(level, "master lease: %s acknowledged from=%s to=%s reason=%s", self.who, wall_time(self._since),
                wall_time(max(at, self._since)), reason)
        self._since = None
