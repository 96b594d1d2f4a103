"""``SyncMQClientAPI``: every ``MQClientAPI`` request as a blocking call, for code that is not async
(the CLI, tests, Spark drivers and executors).

The async API runs on a private :class:`~spark_mq.remoting.loop.LoopThread`; each method
here has the async method's name, signature and docstring (they are generated from it, so the
two never drift apart) and blocks until the response or the error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from spark_mq.client.api import ConsumerIdsChangedCallback, MQClientAPI
from spark_mq.remoting.loop import LoopThread


class SyncMQClientAPI:
    """A blocking ``MQClientAPI``: ``with SyncMQClientAPI() as api: api.get_route_info(ns, topic)``.

    Thread-safe: any number of threads may call concurrently; their requests interleave on the
    one loop thread. Consumer-ids-changed callbacks run on that loop thread: they must not call
    back into this object (that would wait on the thread that is running them).
    """

    def __init__(self, *, timeout: float = 3.0, connect_timeout: float = 3.0) -> None:
        self._thread = LoopThread("spark-mq-client")
        self.api: MQClientAPI = self._thread.run(_make_api(timeout, connect_timeout))

    @property
    def timeout(self) -> float:
        return self.api.timeout

    def on_consumer_ids_changed(self, callback: ConsumerIdsChangedCallback) -> ConsumerIdsChangedCallback:
        """As :meth:`MQClientAPI.on_consumer_ids_changed`; the callback runs on the loop thread."""
        return self.api.on_consumer_ids_changed(callback)

    def close(self) -> None:
        """Close the connections and stop the loop thread (idempotent)."""
        if not self._thread.alive:
            return
        try:
            self._thread.run(self.api.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> SyncMQClientAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make_api(timeout: float, connect_timeout: float) -> MQClientAPI:
    return MQClientAPI(timeout=timeout, connect_timeout=connect_timeout)


def _blocking(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: SyncMQClientAPI, *args: Any, **kwargs: Any) -> Any:
        return self._thread.run(getattr(self.api, name)(*args, **kwargs))

    return call


SYNC_METHODS = tuple(
    name for name, fn in inspect.getmembers(MQClientAPI, inspect.iscoroutinefunction)
    if not name.startswith("_") and name not in vars(SyncMQClientAPI)
)
for _name in SYNC_METHODS:
    setattr(SyncMQClientAPI, _name, _blocking(_name, getattr(MQClientAPI, _name)))
