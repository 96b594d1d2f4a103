"""GroupTransfer: one structure releases every SYNC_MASTER put a slave's report covers, and only those."""

from __future__ import annotations

import asyncio

from spark_mq.store.ha.group_transfer import GroupTransfer


def test_a_report_releases_every_put_at_or_below_it_and_no_other():
    async def run():
        gt = GroupTransfer()
        futs = {off: gt.future(off) for off in (300, 100, 200, 400)}
        assert gt.waiting == 4
        gt.ack(250)
        assert {o for o, f in futs.items() if f.done()} == {100, 200}
        gt.ack(200)  # an older report moves nothing back
        assert gt.acked == 250 and gt.waiting == 2
        gt.ack(400)
        assert all(f.done() for f in futs.values()) and gt.waiting == 0
        assert gt.future(399).done()  # already acknowledged: no wait

    asyncio.run(run())


def test_a_put_that_stopped_waiting_is_skipped():
    async def run():
        gt = GroupTransfer()
        gone, kept = gt.future(10), gt.future(20)
        gone.cancel()  # its send timed out: FLUSH_SLAVE_TIMEOUT
        gt.ack(20)
        assert kept.done() and gone.cancelled()

    asyncio.run(run())
