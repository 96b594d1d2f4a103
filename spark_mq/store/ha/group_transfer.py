"""Puts of a SYNC_MASTER waiting for a slave (RocketMQ's GroupTransferService): one structure for
every pending put, released together when a slave's report moves the acknowledged offset past them.

Thread-safety: none; every method runs on the broker's event loop (puts and slave reports both do).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class GroupTransfer:
    def __init__(self) -> None:
        self.acked = 0  # the highest commitlog offset a slave has reported having
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap by offset
        self._seq = itertools.count()  # ties: futures do not compare

    @property
    def waiting(self) -> int:
        """Puts waiting for a slave now."""
        return len(self._waiters)

    def future(self, offset: int) -> asyncio.Future[None]:
        """Done once a slave has every byte below ``offset``."""
        fut = asyncio.get_running_loop().create_future()
        if offset <= self.acked:
            fut.set_result(None)
        else:
            heapq.heappush(self._waiters, (offset, next(self._seq), fut))
        return fut

    def ack(self, offset: int) -> None:
        """A slave reported ``offset``: release every put at or below it."""
        if offset <= self.acked:
            return
        self.acked = offset
        while self._waiters and self._waiters[0][0] <= offset:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():  # a put that timed out cancelled its wait
                fut.set_result(None)
