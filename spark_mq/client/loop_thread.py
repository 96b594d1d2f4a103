"""An event loop on a private daemon thread, for blocking facades over async clients.

``SyncMQClientAPI`` (and later the synchronous producer and consumers) run their async
counterparts here. ``spark_mq.remoting.client.SyncRemotingClient`` keeps its own copy of the
same few lines; it could be rebased on this class.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from spark_mq.remoting.loop import new_event_loop

T = TypeVar("T")


class LoopThread:
    """A running event loop on its own thread; ``run`` blocks the caller until a coroutine ends.

    Thread-safe: any thread but the loop's own may call ``run`` concurrently (the loop's own
    thread would deadlock waiting for itself, so that raises instead).
    """

    def __init__(self, name: str = "spark-mq-client") -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T] | Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop thread: await the coroutine instead")
        if not self.alive:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("the client's loop thread is stopped: the client was closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop the loop and join its thread (idempotent). Run any async cleanup before."""
        if not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
