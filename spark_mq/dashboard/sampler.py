"""The console's own history of the cluster: every ``interval_s`` it asks each broker for its put and get
totals (GET_BROKER_RUNTIME_INFO) and each group for its lag (GET_CONSUME_STATS), and keeps the last
``window_s`` of figures, so the overview charts messages in/out per second over the last hour and a
group's page charts its lag, without a metrics server.

It signs with the account it is given (``--access-key``), else with the last account an operator
logged in with; with ACL on and neither, it samples nothing and says why.

Thread-safety: coroutines of the server's one event loop; pages read the figures between samples.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.dashboard.auth import Account
from spark_mq.dashboard.clients import ClusterClients

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 10.0
WINDOW_S = 3600.0  # the charts' span: the last hour
LAG_CONCURRENCY = 16  # groups asked for their lag at once: a sample of 100 groups is ~7 rounds, not 100


@dataclass(frozen=True)
class Point:
    t: float  # seconds since the epoch
    value: float


@dataclass
class BrokerRate:
    """A broker's last two totals, and the rates between them (messages per second)."""

    put_total: int
    get_total: int
    at: float
    put_rate: float | None = None
    get_rate: float | None = None


def _rate(now: int, before: int, dt: float) -> float | None:
    """Per second between two totals; None across a reset (the brokers' totals start again each day)."""
    return (now - before) / dt if now >= before and dt > 0 else None


@dataclass
class Sampler:
    clients: ClusterClients
    account: Account  # what it signs with; replaced by the last login when no account was given
    interval_s: float = SAMPLE_INTERVAL_S
    window_s: float = WINDOW_S
    lag_concurrency: int = LAG_CONCURRENCY
    clock: Callable[[], float] = time.time
    messages_in: deque[Point] = field(init=False)
    messages_out: deque[Point] = field(init=False)
    brokers: dict[str, BrokerRate] = field(default_factory=dict)  # by broker address
    group_lag: dict[str, deque[Point]] = field(default_factory=dict)
    groups: dict[str, set[str]] = field(default_factory=dict)  # the last sample's groups, with their topics
    error: str | None = None  # why the last sample failed (shown on the overview)

    def __post_init__(self) -> None:
        self.messages_in = self._series()
        self.messages_out = self._series()

    def _series(self) -> deque[Point]:
        return deque(maxlen=max(int(self.window_s / self.interval_s), 2))

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until ``stop`` is set."""
        while not stop.is_set():
            await self.sample()
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass

    async def sample(self) -> None:
        """One sample of every broker and group; a failure is kept in ``error``, the next sample tries again."""
        admin = self.clients.admin(self.account)
        try:
            statuses = await admin.brokers()
            now = self.clock()
            self._take_rates(now, statuses)
            self.groups = await admin.groups() if self.account.admin else {}
            bound = asyncio.Semaphore(self.lag_concurrency)

            async def lag(group: str) -> int:
                async with bound:
                    return (await admin.group_progress(group)).total_lag

            names = sorted(self.groups)
            for group, total in zip(names, await asyncio.gather(*map(lag, names)), strict=True):
                self.group_lag.setdefault(group, self._series()).append(Point(now, total))
            self.error = None
        except (RemotingError, MQClientError) as e:
            if str(e) != self.error:  # once per new failure, not once per sample
                log.info("console sampler: %s", e)
            self.error = str(e)

    def _take_rates(self, now: float, statuses: list) -> None:
        put = get = 0.0
        rated = False
        for s in statuses:
            if s.error is not None or s.msg_put_total is None or s.msg_get_total is None:
                continue
            before = self.brokers.get(s.addr)
            rate = BrokerRate(s.msg_put_total, s.msg_get_total, now)
            if before is not None:
                rate.put_rate = _rate(s.msg_put_total, before.put_total, now - before.at)
                rate.get_rate = _rate(s.msg_get_total, before.get_total, now - before.at)
                if rate.put_rate is not None and rate.get_rate is not None:
                    put, get, rated = put + rate.put_rate, get + rate.get_rate, True
            self.brokers[s.addr] = rate
        if rated:
            self.messages_in.append(Point(now, put))
            self.messages_out.append(Point(now, get))
