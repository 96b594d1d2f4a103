"""Blocking facades over async client objects (consumers, producers): the object lives on a private
:class:`~spark_mq.remoting.loop.LoopThread` and every public method of it becomes a blocking
method of the facade, with the same name, signature and docstring.

``make_blocking(Facade, Target)`` generates them: a coroutine method is run on the loop and
awaited; a plain method is called on the loop thread too (so it never races the loop's own
coroutines) and its value returned.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from spark_mq.remoting.loop import LoopThread

T = TypeVar("T")
F = TypeVar("F", bound="SyncFacade")


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


class SyncFacade:
    """Base of the blocking facades: ``self._target`` built by ``factory`` on a private loop thread.

    Thread-safe: any thread but the loop's may call the generated methods concurrently; they
    interleave on the loop thread as the target's coroutines would.
    """

    _shutdown_method = "shutdown"

    def __init__(self, factory: Callable[[], Any], thread_name: str) -> None:
        self._thread = LoopThread(thread_name)
        self._target = self._thread.run(_call(factory))  # loop-bound parts are made on the loop

    def _run_shutdown(self) -> None:
        """Run the target's shutdown coroutine, then stop the loop thread (idempotent)."""
        if not self._thread.alive:
            return
        try:
            self._thread.run(getattr(self._target, self._shutdown_method)())
        finally:
            self._thread.stop()

    def __enter__(self: F) -> F:
        return self

    def __exit__(self, *exc: object) -> None:
        self._run_shutdown()


def _blocking(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        def call(self: SyncFacade, *args: Any, **kwargs: Any) -> Any:
            return self._thread.run(getattr(self._target, name)(*args, **kwargs))
    else:
        @functools.wraps(method)
        def call(self: SyncFacade, *args: Any, **kwargs: Any) -> Any:
            return self._thread.run(_call(getattr(self._target, name), *args, **kwargs))
    return call


def make_blocking(facade: type[F], target: type, *, skip: tuple[str, ...] = ()) -> type[F]:
    """Give ``facade`` a blocking twin of every public method of ``target`` it does not define
    itself; the target's ``shutdown`` also stops the loop thread."""
    for name, method in inspect.getmembers(target, inspect.isfunction):
        if name.startswith("_") or name in skip or name in vars(facade):
            continue
        if name == facade._shutdown_method:
            setattr(facade, name, functools.wraps(method)(lambda self: self._run_shutdown()))
        else:
            setattr(facade, name, _blocking(name, method))
    return facade
