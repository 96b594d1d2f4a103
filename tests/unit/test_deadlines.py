"""``Deadlines``: many timeouts behind one loop timer fire when due, in order, and never once removed."""

from __future__ import annotations

import asyncio

from spark_mq.common.deadlines import COMPACT_SLACK, Deadlines


def test_due_callbacks_run_in_deadline_order_and_removed_ones_never() -> None:
    async def run() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        deadlines, fired, t0 = Deadlines(), [], loop.time()

        def note(name: str) -> None:
            fired.append((name, loop.time() - t0))

        late = deadlines.add(0.08, note, "late")
        removed = deadlines.add(0.03, note, "removed")
        deadlines.add(0.05, note, "middle")
        deadlines.add(0.02, note, "first")  # earlier than the armed timer: the timer moves
        deadlines.remove(removed)
        await asyncio.sleep(0.15)
        assert len(deadlines) == 0
        deadlines.remove(late)  # run already: nothing
        return fired

    fired = asyncio.run(run())
    assert [name for name, _ in fired] == ["first", "middle", "late"]
    for (name, at), due in zip(fired, (0.02, 0.05, 0.08), strict=True):
        assert at >= due - 0.002, f"{name} ran at {at:.3f}s, before its {due}s"


def test_a_callback_may_add_an_earlier_timeout_than_the_rest() -> None:
    async def run() -> list[str]:
        deadlines, fired = Deadlines(), []

        def first() -> None:
            fired.append("first")
            deadlines.add(0.01, fired.append, "added")  # before "last"'s deadline

        deadlines.add(0.01, first)
        deadlines.add(0.2, fired.append, "last")
        await asyncio.sleep(0.1)
        assert fired == ["first", "added"]
        await asyncio.sleep(0.15)
        return fired

    assert asyncio.run(run()) == ["first", "added", "last"]


def test_removed_timeouts_do_not_pile_up_and_a_failing_callback_spares_the_rest() -> None:
    async def run() -> tuple[int, list[str], list[dict]]:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        deadlines, fired = Deadlines(), []
        deadlines.add(0.02, fired.append, "kept")
        for _ in range(10_000):  # answered long before their timeout, as requests and held pulls are
            deadlines.remove(deadlines.add(30.0, fired.append, "removed"))
        heap_size = len(deadlines._heap)
        deadlines.add(0.01, lambda: 1 / 0)
        deadlines.add(0.01, fired.append, "after the failure")
        await asyncio.sleep(0.05)
        return heap_size, fired, errors

    heap_size, fired, errors = asyncio.run(run())
    assert heap_size <= 2 * 1 + COMPACT_SLACK + 1
    assert sorted(fired) == ["after the failure", "kept"]
    assert [type(e["exception"]) for e in errors] == [ZeroDivisionError]


def test_close_drops_every_timeout_and_the_loop_timer() -> None:
    async def run() -> tuple[list[str], bool]:
        deadlines, fired = Deadlines(), []
        deadlines.add(0.01, fired.append, "dropped")
        deadlines.close()
        timer_gone = deadlines._timer is None
        await asyncio.sleep(0.03)
        deadlines.add(0.01, fired.append, "after close")  # usable again, as a shutdown's late hold finds it
        await asyncio.sleep(0.03)
        return fired, timer_gone

    assert asyncio.run(run()) == (["after close"], True)


def test_a_callback_whose_add_rebuilds_the_heap_leaves_every_timeout_live() -> None:
    async def run() -> list[str]:
        deadlines, fired = Deadlines(), []

        def churn() -> None:  # enough removed timeouts that its next add rebuilds the heap mid-``_fire``
            for _ in range(3 * COMPACT_SLACK):
                deadlines.remove(deadlines.add(30.0, fired.append, "removed"))
            deadlines.add(0.01, fired.append, "added by the callback")

        deadlines.add(0.01, churn)
        deadlines.add(0.01, fired.append, "due with the callback")
        deadlines.add(0.04, fired.append, "later")
        await asyncio.sleep(0.1)
        return fired

    assert sorted(asyncio.run(run())) == ["added by the callback", "due with the callback", "later"]
