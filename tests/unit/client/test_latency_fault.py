"""Fault avoidance (RocketMQ's MQFaultStrategy): the latency tables, round robin, and queue
selection that avoids unavailable brokers and the broker a retry's previous attempt failed on."""

from __future__ import annotations

import pytest
from unit_helpers import FakeClock

from spark_mq.client.latency_fault import (
    FAILURE_LATENCY_MS,
    LATENCY_MAX_MS,
    NOT_AVAILABLE_DURATION_MS,
    FaultStrategy,
    LatencyFaultTolerance,
    not_available_duration,
)
from spark_mq.client.producer import key_hash, select_by_hash
from spark_mq.common.message import Message
from spark_mq.remoting.bodies import MessageQueue

TOPIC = "T"


def queues(*brokers: str, per_broker: int = 2) -> list[MessageQueue]:
    return [MessageQueue(TOPIC, b, i) for b in brokers for i in range(per_broker)]


def strategy(clock: FakeClock, enabled: bool = True) -> FaultStrategy:
    return FaultStrategy(enabled, clock, start=0)


@pytest.mark.parametrize(("latency", "duration"), [
    (0, 0), (49, 0), (50, 0), (99, 0), (100, 0), (549, 0), (550, 30_000), (999, 30_000), (1000, 60_000),
    (1999, 60_000), (2000, 120_000), (2999, 120_000), (3000, 180_000), (14_999, 180_000), (15_000, 600_000),
    (10**9, 600_000),
])
def test_latency_to_unavailability(latency, duration):
    assert not_available_duration(latency) == duration


def test_tables_are_rocketmqs_and_a_failure_is_the_worst_row():
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION_MS == (0, 0, 30000, 60000, 120000, 180000, 600000)
    assert not_available_duration(FAILURE_LATENCY_MS) == 600_000


def test_tolerance_window_follows_the_clock():
    clock = FakeClock(100.0)
    t = LatencyFaultTolerance(clock)
    assert t.is_available("a")
    t.update("a", 700, not_available_duration(700))
    assert not t.is_available("a")
    clock.advance(29.999)
    assert not t.is_available("a")
    clock.advance(0.001)
    assert t.is_available("a")
    t.update("a", 20, 0)  # a later fast send clears it at once
    assert t.is_available("a")
    t.update("b", 1, 5000)
    t.remove("b")
    assert t.is_available("b")


def test_round_robin_over_all_queues():
    s = strategy(FakeClock())
    qs = queues("a", "b")
    picked = [s.select(TOPIC, qs) for _ in range(8)]
    assert picked == qs + qs
    # counters are per topic
    assert s.select("other", qs) == qs[0]


def test_round_robin_starts_at_a_random_queue_by_default():
    starts = {FaultStrategy(clock=FakeClock()).select(TOPIC, queues("a", "b", per_broker=4)) for _ in range(50)}
    assert len(starts) > 1


def test_unavailable_broker_is_skipped_while_another_is_available():
    clock = FakeClock()
    s = strategy(clock)
    qs = queues("a", "b")
    s.update("a", 1200)  # slow: avoided for 60 s
    assert [s.select(TOPIC, qs).broker_name for _ in range(6)] == ["b"] * 6
    clock.advance(60)
    assert {s.select(TOPIC, qs).broker_name for _ in range(4)} == {"a", "b"}


def test_failure_avoids_broker_for_600s_and_fast_success_is_not_avoided():
    clock = FakeClock()
    s = strategy(clock)
    qs = queues("a", "b", "c")
    s.update("a", 5, failed=True)
    s.update("b", 30)
    picks = {s.select(TOPIC, qs).broker_name for _ in range(12)}
    assert picks == {"b", "c"}
    clock.advance(599.9)
    assert "a" not in {s.select(TOPIC, qs).broker_name for _ in range(12)}
    clock.advance(0.1)
    assert "a" in {s.select(TOPIC, qs).broker_name for _ in range(12)}


def test_retry_never_goes_back_to_the_failed_broker_when_another_exists():
    clock = FakeClock()
    s = strategy(clock)
    qs = queues("a", "b")
    for _ in range(8):
        assert s.select(TOPIC, qs, last_failed_broker="a").broker_name == "b"
    # even when the other broker is being avoided too, and avoidance is off
    s.update("b", 4000)
    assert s.select(TOPIC, qs, last_failed_broker="a").broker_name == "b"
    off = strategy(clock, enabled=False)
    assert all(off.select(TOPIC, qs, last_failed_broker="b").broker_name == "a" for _ in range(6))


def test_all_brokers_avoided_picks_the_one_available_soonest():
    clock = FakeClock()
    s = strategy(clock)
    qs = queues("a", "b", "c")
    s.update("a", 5, failed=True)  # 600 s
    s.update("b", 3500)  # 180 s
    s.update("c", 1500)  # 60 s
    assert {s.select(TOPIC, qs).broker_name for _ in range(6)} == {"c"}
    assert {s.select(TOPIC, qs, last_failed_broker="c").broker_name for _ in range(6)} == {"b"}


def test_only_the_failed_broker_left_is_used_again():
    clock = FakeClock()
    s = strategy(clock)
    qs = queues("a")
    s.update("a", 1, failed=True)
    assert [s.select(TOPIC, qs, last_failed_broker="a") for _ in range(4)] == qs + qs


def test_avoidance_off_ignores_latency():
    clock = FakeClock()
    s = strategy(clock, enabled=False)
    s.update("a", 1, failed=True)
    assert s.is_available("a")
    assert [s.select(TOPIC, queues("a", "b")).broker_name for _ in range(4)] == ["a", "a", "b", "b"]


def test_select_needs_queues():
    with pytest.raises(ValueError, match="no writable queue"):
        strategy(FakeClock()).select(TOPIC, [])


def test_hash_selector_is_javas_and_stable():
    qs = queues("a", "b", per_broker=4)
    msg = Message(TOPIC, b"x")
    # "order-1".hashCode() == -1207111310 in Java; abs(h % 8) == 6
    assert key_hash("order-1") == -1207111310
    assert select_by_hash(qs, msg, "order-1") == qs[6]
    assert all(select_by_hash(qs, msg, f"k{i}") == select_by_hash(qs, msg, f"k{i}") for i in range(50))
    assert len({select_by_hash(qs, msg, f"k{i}") for i in range(200)}) == 8
    assert key_hash(7) == 7 and key_hash(-(1 << 40)) == -256  # Integer / Long hashCode
    with pytest.raises(TypeError):
        key_hash(1.5)
