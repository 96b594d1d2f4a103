"""Event loop choice: uvloop when it is installed (faster sockets), asyncio's own otherwise; and
``LoopThread``, such a loop running on a private thread for blocking facades over async code."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of new event loops, uvloop's if importable."""
    try:
        # lazy import: an optional dependency, looked for once when a loop is made
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


class LoopThread:
    """A running event loop on its own daemon thread; ``run`` blocks the caller until a coroutine ends.

    The base of the blocking facades over async clients (``SyncRemotingClient``,
    ``SyncMQClientAPI``). Thread-safe: any thread but the loop's own may call ``run``
    concurrently (the loop's own thread would deadlock waiting for itself, so that raises).
    """

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T] | Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        why = None
        if threading.current_thread() is self._thread:
            why = "run called from the loop's own thread; await the coroutine"
        elif not self.alive:
            why = "the loop thread is stopped (the client was closed)"
        if why is not None:
            if asyncio.iscoroutine(coro):
                coro.close()  # never awaited: close it, so no "never awaited" warning hides the error
            raise RuntimeError(f"{self._thread.name}: {why}")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and join its thread; run any async cleanup before. Idempotent.

        The loop is closed only once its thread has ended: if the join times out (a callback
        is blocking the loop) it is left to the daemon thread, and a later ``stop`` closes it.
        """
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s did not stop within %gs; its event loop is left open", self._thread.name, timeout)
                return
        if not self.loop.is_closed():
            self.loop.close()


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Until ``event`` is set or ``timeout`` passes. Not ``asyncio.wait_for``: before Python 3.12 it
    can swallow a cancellation that races the event, and the task would then never stop."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


async def stop_tasks(tasks: list[asyncio.Task], timeout: float = 5.0) -> None:
    """Cancel ``tasks`` and wait for them, bounded: a task that swallowed its cancellation is
    logged and left, so a shutdown never hangs on it."""
    for task in tasks:
        task.cancel()
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            log.warning("task %s did not stop within %.0f s", task.get_name(), timeout)


async def every(interval_s: float, duty: Callable[[], object], what: str) -> None:
    """Run ``duty`` (a function, or one returning an awaitable to await) every ``interval_s`` until
    cancelled; one that fails is logged as ``what`` and run again next interval."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            result = duty()
            if inspect.isawaitable(result):
                await result
        except Exception:  # a failing duty must not stop the next: the process keeps serving
            log.exception("%s failed", what)
