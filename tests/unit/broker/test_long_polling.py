"""PullHoldService: a held pull resumes as soon as a message satisfying it arrives (and says so),
times out False after its suspend timeout, and leaves nothing behind when cancelled."""

from __future__ import annotations

import asyncio

from spark_mq.broker.processors.long_polling import PullHoldService


def test_notify_wakes_the_pulls_it_satisfies_at_once():
    async def main():
        hold = PullHoldService()
        at_0 = asyncio.ensure_future(hold.wait("t", 0, 0, 15.0))
        at_5 = asyncio.ensure_future(hold.wait("t", 0, 5, 15.0))
        other_queue = asyncio.ensure_future(hold.wait("t", 1, 0, 15.0))
        await asyncio.sleep(0)
        assert hold.waiting == 3
        assert hold.notify("t", 0, 1) == 1  # offset 0 now exists; 5 does not
        await asyncio.sleep(0)
        assert at_0.done() and at_0.result() is True  # one turn: woken, far from its 15 s timeout
        assert hold.waiting == 2 and not at_5.done() and not other_queue.done()
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
        timing_out = asyncio.ensure_future(hold.wait("t", 0, 0, 0.05))
        await asyncio.sleep(0)
        assert hold.has_waiters("t", 0)  # held until its timeout, not answered at once
        assert await asyncio.wait_for(timing_out, 5.0) is False
        assert hold.waiting == 0

        held = asyncio.ensure_future(hold.wait("t", 0, 0, 15.0))
        await asyncio.sleep(0)
        assert hold.has_waiters("t", 0)
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
        assert hold.waiting == 0 and not hold.has_waiters("t", 0)
        assert hold.notify("t", 0, 10) == 0

    asyncio.run(main())


def test_recheck_wakes_the_pulls_their_queues_now_satisfy_asking_only_for_held_queues():
    async def main():
        hold = PullHoldService()
        asked: list[tuple[str, int]] = []
        ends = {("t", 0): 3, ("t", 1): 0}

        def max_offset(topic: str, queue_id: int) -> int:
            asked.append((topic, queue_id))
            return ends[(topic, queue_id)]

        assert hold.recheck(max_offset) == 0 and asked == []  # nothing held: no queue looked at
        at_2 = asyncio.ensure_future(hold.wait("t", 0, 2, 15.0))
        at_3 = asyncio.ensure_future(hold.wait("t", 0, 3, 15.0))
        empty_queue = asyncio.ensure_future(hold.wait("t", 1, 0, 15.0))
        await asyncio.sleep(0)
        assert hold.recheck(max_offset) == 1  # queue 0 ends at 3: offset 2 exists, 3 does not
        assert sorted(asked) == [("t", 0), ("t", 1)]
        assert await asyncio.wait_for(at_2, 5.0) is True
        assert not at_3.done() and not empty_queue.done()
        ends[("t", 1)] = 1
        assert hold.recheck(max_offset) == 1
        assert await asyncio.wait_for(empty_queue, 5.0) is True
        hold.wake_all()
        await at_3

    asyncio.run(main())
