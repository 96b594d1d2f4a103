"""PullHoldService: a held pull resumes as soon as a message satisfying it arrives (and says so),
times out False after its suspend timeout, and leaves nothing behind when cancelled."""

from __future__ import annotations

import asyncio
import time

from spark_mq.broker.long_polling import PullHoldService


def test_notify_wakes_the_pulls_it_satisfies_at_once():
    async def main():
        hold = PullHoldService()
        at_0 = asyncio.ensure_future(hold.wait("t", 0, 0, 15.0))
        at_5 = asyncio.ensure_future(hold.wait("t", 0, 5, 15.0))
        other_queue = asyncio.ensure_future(hold.wait("t", 1, 0, 15.0))
        await asyncio.sleep(0)
        assert hold.waiting == 3
        started = time.monotonic()
        assert hold.notify("t", 0, 1) == 1  # offset 0 now exists; 5 does not
        assert await asyncio.wait_for(at_0, 5.0) is True
        # generous bound on a loaded machine, still far below the 15 s suspend timeout
        assert time.monotonic() - started < 1.0
        await asyncio.sleep(0.05)
        assert not at_5.done() and not other_queue.done()
        assert hold.notify("t", 0, 6) == 1
        assert await asyncio.wait_for(at_5, 5.0) is True
        assert hold.notify("t", 0, 6) == 0  # nobody left to wake
        hold.wake_all()
        assert await asyncio.wait_for(other_queue, 5.0) is True
        assert hold.waiting == 0 and not hold.has_waiters("t", 1)

    asyncio.run(main())


def test_a_held_pull_times_out_false_and_a_cancelled_one_is_forgotten():
    async def main():
        hold = PullHoldService()
        started = time.monotonic()
        assert await hold.wait("t", 0, 0, 0.05) is False
        assert time.monotonic() - started >= 0.04
        assert hold.waiting == 0

        held = asyncio.ensure_future(hold.wait("t", 0, 0, 15.0))
        await asyncio.sleep(0)
        assert hold.has_waiters("t", 0)
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
        assert hold.waiting == 0 and not hold.has_waiters("t", 0)
        assert hold.notify("t", 0, 10) == 0

    asyncio.run(main())
