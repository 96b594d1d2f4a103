"""LoopThread: runs coroutines for blocking callers, refuses its own thread, stops cleanly."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from spark_mq.remoting.loop import LoopThread


async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


async def fail() -> None:
    raise ValueError("on purpose")


def test_run_returns_results_and_raises_errors_then_stop_closes_the_loop():
    lt = LoopThread("test-loop")
    assert lt.run(add(1, 2)) == 3
    with pytest.raises(ValueError, match="on purpose"):
        lt.run(fail())
    lt.stop()
    assert not lt.alive and lt.loop.is_closed()
    lt.stop()  # idempotent
    with pytest.raises(RuntimeError, match="stopped"):
        lt.run(add(1, 2))


def test_run_from_the_loop_thread_raises_instead_of_deadlocking():
    lt = LoopThread("test-loop")
    try:
        async def nested() -> None:
            lt.run(add(1, 2))

        with pytest.raises(RuntimeError, match="own thread"):
            lt.run(nested())
    finally:
        lt.stop()


def test_stop_with_a_blocked_loop_leaves_it_open_and_a_later_stop_closes_it():
    lt = LoopThread("test-loop")
    release = threading.Event()
    lt.loop.call_soon_threadsafe(release.wait, 5)  # blocks the loop thread
    lt.stop(timeout=0.05)  # used to raise "Cannot close a running event loop"
    assert not lt.loop.is_closed()
    release.set()
    deadline = time.monotonic() + 5
    while lt._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    lt.stop()
    assert lt.loop.is_closed()
