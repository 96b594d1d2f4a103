"""LogLimiter against a simple model: per (peer, reason), ``burst`` lines per window, the rest
counted and summed up once the window ends."""

from __future__ import annotations

import logging

import pytest

from spark_mq.common.log_limit import LogLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def limited(caplog):
    caplog.set_level(logging.INFO, logger="test.limit")
    clock = Clock()
    return LogLimiter(logging.getLogger("test.limit"), interval_s=10, burst=3, clock=clock), clock, caplog


def test_burst_per_peer_and_reason_then_one_summary(limited):
    limiter, clock, caplog = limited
    for i in range(50):
        limiter.warning("10.0.0.1", "bad frame", "bad frame %d", i)
        limiter.warning("10.0.0.2", "bad frame", "other peer %d", i)
        limiter.warning("10.0.0.1", "bad request", "other reason %d", i)
    assert [r.getMessage() for r in caplog.records] == [
        f"{what} {i}" for i in range(3) for what in ("bad frame", "other peer", "other reason")]
    caplog.clear()
    limiter.flush()  # the window has not ended: nothing yet
    assert not caplog.records
    clock.now += 10
    limiter.flush()
    assert sorted(r.getMessage() for r in caplog.records) == [
        "10.0.0.1: 47 more 'bad frame' messages suppressed (at most 3 per 10 s)",
        "10.0.0.1: 47 more 'bad request' messages suppressed (at most 3 per 10 s)",
        "10.0.0.2: 47 more 'bad frame' messages suppressed (at most 3 per 10 s)",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    caplog.clear()
    limiter.warning("10.0.0.1", "bad frame", "again")  # a new window
    assert [r.getMessage() for r in caplog.records] == ["again"]


def test_a_line_after_the_window_reports_the_suppressed_ones_first(limited):
    limiter, clock, caplog = limited
    for i in range(5):
        limiter.log(logging.INFO, "h", "idle", "idle %d", i)
    clock.now += 11
    limiter.log(logging.INFO, "h", "idle", "idle late")
    assert [r.getMessage() for r in caplog.records] == [
        "idle 0", "idle 1", "idle 2", "h: 2 more 'idle' messages suppressed (at most 3 per 10 s)", "idle late"]
    assert {r.levelno for r in caplog.records} == {logging.INFO}


def test_quiet_windows_are_forgotten_and_disabled_levels_cost_nothing(limited):
    limiter, clock, caplog = limited
    limiter.log(logging.DEBUG, "h", "noise", "never shown")
    limiter.warning("h", "once", "once")
    clock.now += 10
    limiter.flush()
    assert [r.getMessage() for r in caplog.records] == ["once"]  # no summary: nothing was held back
