"""A coroutine run up to its first suspension at once, in the caller's turn; a Task only for the rest.

Python 3.12's eager tasks, for 3.11: most request handlers (a send, a pull that finds messages) never
wait, and a Task per request costs them a loop turn (``call_soon`` of its first step) plus the Task
itself. ``start`` steps the coroutine synchronously; one that finishes is done without a Task, one that
awaits something is wrapped in a Task that resumes it where it stopped, waiting on what it awaited.
What differs from ``create_task``: the first step runs before the caller goes on, outside any Task
(``asyncio.current_task()`` is the caller's; no handler of ours asks).

Thread-safety: event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


def start(coro: Coroutine[Any, Any, None]) -> asyncio.Task | None:
    """Run ``coro`` until it first suspends; None if it finished so, else the Task that now runs the rest.
    An exception it raises in that first step propagates to the caller, as from a plain call."""
    try:
        awaited = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_rest(coro, awaited))


async def _rest(coro: Coroutine[Any, Any, None], awaited: Any) -> None:
    await _Resumed(coro, awaited)


class _Resumed:
    """Awaitable that hands the Task what ``coro`` yielded in its first step, then drives ``coro`` on."""

    __slots__ = ("_awaited", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, None], awaited: Any) -> None:
        self._coro = coro
        self._awaited = awaited

    def __await__(self) -> Generator[Any, Any, None]:
        coro = self._coro
        awaited = self._awaited
        self._coro = self._awaited = None
        try:
            if awaited is None:  # a bare yield (``asyncio.sleep(0)``): the turn it asked for has passed
                awaited = coro.send(None)
            while True:
                try:
                    sent = yield awaited
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as e:  # the Task's cancellation, thrown into what awaits
                    awaited = coro.throw(e)
                else:
                    awaited = coro.send(sent)
        except StopIteration:
            return
