"""Broker fault avoidance for producers: RocketMQ's ``MQFaultStrategy`` and ``LatencyFaultToleranceImpl``.

The seeds' "retry + avoidance" (重試加規避) design: a send that fails is retried on a queue of
*another* broker, and a broker that failed or answered slowly is left out of queue selection for
a while, so the next sends do not walk into the same fault.

After a send to broker B took ``latency`` ms, B is unavailable for ``not_available_duration``::

    latency  >=     50    100    550   1000   2000   3000   15000  ms
    unavailable      0      0     30     60    120    180     600  s

A failed send counts as a latency of 30,000 ms (``FAILURE_LATENCY_MS``, RocketMQ's
``isolation``), which falls in the last row: the broker is avoided for 600 s, or until a send to it
succeeds quickly again (any later measurement replaces the earlier one).

Queue selection (``FaultStrategy.select``) walks the topic's queues round robin from a per-topic
counter and takes the first queue whose broker is available and is not the broker the previous
attempt of this send failed on. If there is none, it takes a queue of another broker than the
failed one (the one whose avoidance ends soonest), and only if the failed broker is the only one
it goes back to it. With avoidance off it is plain round robin that still skips the failed broker
(RocketMQ's ``selectOneMessageQueue(lastBrokerName)``).

Thread-safety: not thread-safe; a producer uses it from its event loop only.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark_mq.remoting.bodies import MessageQueue

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_LATENCY_MS = 30_000  # a failed send is as bad as this latency
# below the first latency with a duration nobody is avoided: every quick send is answered by one comparison
_FIRST_AVOIDED_MS = next(limit for limit, d in zip(LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS, strict=True) if d)


def not_available_duration(latency_ms: float) -> int:
    """How long (ms) a broker is avoided after a send that took ``latency_ms``."""
    if latency_ms < _FIRST_AVOIDED_MS:
        return 0
    for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass
class FaultItem:
    """The last measurement of one broker: its latency and when it becomes available (clock ms)."""

    broker_name: str
    latency_ms: float
    available_at_ms: float


class LatencyFaultTolerance:
    """Which brokers are being avoided, and until when. ``clock`` returns seconds (monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.items: dict[str, FaultItem] = {}

    def now_ms(self) -> float:
        return self._clock() * 1000.0

    def update(self, broker_name: str, latency_ms: float, not_available_ms: float) -> None:
        """Record a send to ``broker_name``: it is unavailable for ``not_available_ms`` from now."""
        item = self.items.get(broker_name)
        if item is None:
            self.items[broker_name] = FaultItem(broker_name, latency_ms, self.now_ms() + not_available_ms)
        else:  # every send updates its broker's item: in place, not a new object per send
            item.latency_ms, item.available_at_ms = latency_ms, self.now_ms() + not_available_ms

    def is_available(self, broker_name: str) -> bool:
        item = self.items.get(broker_name)
        return item is None or self.now_ms() >= item.available_at_ms

    def available_at(self, broker_name: str) -> float:
        """Clock ms from which ``broker_name`` is available (0 for a broker never measured)."""
        item = self.items.get(broker_name)
        return 0.0 if item is None else item.available_at_ms

    def remove(self, broker_name: str) -> None:
        self.items.pop(broker_name, None)


class FaultStrategy:
    """Queue selection with round robin, the retry's broker exclusion and latency avoidance.

    ``rng`` seeds each topic's round-robin counter (RocketMQ starts it at a random value so that
    producers do not all begin on the same queue); tests pass ``random.Random(0)`` or ``start=0``.
    """

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None, start: int | None = None) -> None:
        self.enabled = enabled
        self.tolerance = LatencyFaultTolerance(clock)
        self._rng = rng or random.Random()
        self._start = start
        self._counters: dict[str, int] = {}

    def next_index(self, topic: str) -> int:
        """The topic's round-robin counter, moved on by one (RocketMQ's ``sendWhichQueue``)."""
        index = self._counters.get(topic)
        if index is None:
            index = self._start if self._start is not None else self._rng.randrange(1 << 16)
        self._counters[topic] = index + 1
        return index

    def select(self, topic: str, queues: Sequence[MessageQueue], last_failed_broker: str | None = None) -> MessageQueue:
        """A queue for the next attempt of a send to ``topic``; ``queues`` must not be empty."""
        if not queues:
            raise ValueError(f"topic {topic} has no writable queue to select from")
        n = len(queues)
        start = self.next_index(topic)
        if not last_failed_broker:  # the usual send: the next queue in turn, unless its broker is avoided
            first = queues[start % n]
            if not self.enabled or self.tolerance.is_available(first.broker_name):
                return first
        ordered = [queues[(start + i) % n] for i in range(n)]
        others = [q for q in ordered if q.broker_name != last_failed_broker] if last_failed_broker else ordered
        if not self.enabled:
            return others[0] if others else ordered[0]
        for q in others:
            if self.tolerance.is_available(q.broker_name):
                return q
        if others:  # every other broker is avoided too: the one available soonest (stable min keeps round robin)
            return min(others, key=lambda q: self.tolerance.available_at(q.broker_name))
        return ordered[0]  # the failed broker is the only one

    def update(self, broker_name: str, latency_ms: float, failed: bool = False) -> None:
        """Record how a send to ``broker_name`` went (no-op with avoidance off)."""
        if self.enabled:
            duration = not_available_duration(FAILURE_LATENCY_MS if failed else latency_ms)
            self.tolerance.update(broker_name, latency_ms, duration)

    def is_available(self, broker_name: str) -> bool:
        return not self.enabled or self.tolerance.is_available(broker_name)
