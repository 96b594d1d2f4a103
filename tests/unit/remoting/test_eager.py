"""``eager.start``: a coroutine's first step runs in the caller's call; a Task carries on only what waits."""

from __future__ import annotations

import asyncio

import pytest

from spark_mq.remoting import eager


def test_a_coroutine_that_never_waits_is_done_before_start_returns_and_needs_no_task():
    steps: list[str] = []

    async def handler() -> None:
        steps.append("ran")

    async def main() -> None:
        assert eager.start(handler()) is None
        assert steps == ["ran"]

    asyncio.run(main())


def test_what_waits_goes_on_in_a_task_that_resumes_where_it_stopped():
    steps: list[object] = []

    async def handler(fut: asyncio.Future) -> None:
        steps.append("before")
        steps.append(await fut)
        await asyncio.sleep(0)
        steps.append("after")

    async def main() -> None:
        fut = asyncio.get_running_loop().create_future()
        task = eager.start(handler(fut))
        assert steps == ["before"] and task is not None and not task.done()
        fut.set_result("woken")
        await task
        assert steps == ["before", "woken", "after"]

    asyncio.run(main())


def test_a_bare_yield_first_resumes_at_the_next_turn():
    steps: list[str] = []

    async def handler() -> None:
        steps.append("before")
        await asyncio.sleep(0)
        steps.append("after")

    async def main() -> None:
        task = eager.start(handler())
        assert steps == ["before"]
        await task
        assert steps == ["before", "after"]

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_coroutine_where_it_waits():
    steps: list[str] = []

    async def handler(fut: asyncio.Future) -> None:
        try:
            await fut
        finally:
            steps.append("cleaned up")

    async def main() -> None:
        fut = asyncio.get_running_loop().create_future()
        task = eager.start(handler(fut))
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps == ["cleaned up"] and fut.cancelled()

    asyncio.run(main())


def test_an_error_of_the_first_step_reaches_the_caller_and_a_later_one_the_task():
    async def fails_at_once() -> None:
        raise ValueError("first step")

    async def fails_later(fut: asyncio.Future) -> None:
        await fut
        raise KeyError("later")

    async def main() -> None:
        with pytest.raises(ValueError, match="first step"):
            eager.start(fails_at_once())
        fut = asyncio.get_running_loop().create_future()
        task = eager.start(fails_later(fut))
        fut.set_result(None)
        with pytest.raises(KeyError):
            await task

    asyncio.run(main())
