"""Long polling: a pull that finds nothing new waits until a message arrives or its suspend
timeout passes (RocketMQ's PullRequestHoldService, driven by arrival notifications instead
of a 5 s re-check loop).

A held pull waits on a bare future with a timeout beside it (``asyncio.wait_for`` would add a
waiter future and callbacks: several loop turns between a message's arrival and the pull
answering it); every held pull's timeout stands behind one loop timer (``common/deadlines.py``).
``notify`` says how many pulls it woke, so a sender can let them answer first.
A send's ``notify`` also hands its ``PutResult`` to the pulls held exactly where its messages begin:
such a pull answers with those units (the commitlog bytes the put just wrote) without a read of the
store, which would first dispatch every append so far into the consume queues on the way from a
message's arrival to its delivery. A pull may also give ``wait`` an ``answer`` to run inside ``notify``
itself: the send that woke it then has the pull's answer written before its own, with no loop turn
between the put and the answer (the waiting coroutine only tidies up afterwards).

``hold`` is ``wait`` without a coroutine: what woke the pull (or its timeout) is handed to a callback, run
inside ``notify`` (or the timer's callback). A long-polling consumer's pull is held so: no Task per held
pull, no loop turn to resume it and none to finish it, on the latency workload's every message.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from spark_mq.common.deadlines import Deadlines
from spark_mq.store.results import PutResult

log = logging.getLogger(__name__)


class _Answered:
    """What ``wait`` returns when its ``answer`` answered the pull inside ``notify``."""

    def __repr__(self) -> str:
        return "ANSWERED"


ANSWERED = _Answered()
# False: timed out; the put that woke the pull, or True when none was handed over; ANSWERED: answered in notify
Woken = bool | PutResult | _Answered
# run by ``notify`` with what woke the pull: True when it answered the pull then and there
Answer = Callable[[bool | PutResult], bool]


def _expire(fut: asyncio.Future[Woken] | Held) -> None:
    if not fut.done():
        fut.set_result(False)


class Held:
    """A pull held by ``hold``: ``notify`` (or its timer) sets its result, which runs its ``then`` at once.
    Quacks as the future ``wait`` holds (``done``, ``set_result``)."""

    __slots__ = ("_deadline", "_done", "_entry", "_key", "_service", "_then")

    def __init__(self, service: PullHoldService, key: tuple[str, int], then: Callable[[Woken], None]) -> None:
        self._service = service
        self._key = key
        self._then = then
        self._done = False
        self._entry: tuple[int, Held, Answer | None] | None = None
        self._deadline = -1  # its timeout's token in the service's ``Deadlines``

    def done(self) -> bool:
        return self._done

    def set_result(self, woken: Woken) -> None:
        if self._end():
            try:
                self._then(woken)
            except Exception:  # not the waker's failure (a send's): the pull's, logged
                log.exception("a held pull's continuation failed")

    def cancel(self) -> bool:
        """Stop holding (its connection closed) without running ``then``; False when it was over already."""
        return self._end()

    def _end(self) -> bool:
        if self._done:
            return False
        self._done = True
        service = self._service
        service._deadlines.remove(self._deadline)
        service._remove(self._key, self._entry)
        return True


def _answered(answer: Answer, why: bool | PutResult) -> bool:
    """``answer(why)``; a failure is logged and leaves the pull to answer as usual (not the sender's failure)."""
    try:
        return answer(why)
    except Exception:
        log.exception("answering a held pull from the event that woke it failed: it answers from a read instead")
        return False


class PullHoldService:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[Woken] | Held, Answer | None]]] = {}
        self.deferred = 0  # of the pulls the last ``notify`` woke, how many answer at a later loop turn
        self._deadlines = Deadlines()  # the held pulls' timeouts, behind one loop timer

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float,
                   answer: Answer | None = None) -> Woken:
        """Hold until a message at or past ``offset`` arrives in the queue; False on timeout, the put
        when its first message is the one at ``offset``, else True; ANSWERED when ``answer``, given what
        woke the pull inside ``notify``, said it answered it there."""
        return await self.wait_any([(topic, queue_id, offset)], timeout_s, answer)

    async def wait_any(self, positions: list[tuple[str, int, int]], timeout_s: float,
                       answer: Answer | None = None) -> Woken:
        """Hold until a message arrives in any of the queues, at or past its (topic, queue id, offset);
        False on timeout (a pop of any queue of a topic waits on all of them)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Woken] = loop.create_future()
        entries = [((topic, queue_id), (offset, fut, answer)) for topic, queue_id, offset in positions]
        for key, entry in entries:
            self._waiters.setdefault(key, []).append(entry)
        deadline = self._deadlines.add(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            self._deadlines.remove(deadline)
            for key, entry in entries:
                self._remove(key, entry)

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float, answer: Answer | None,
             then: Callable[[Woken], None]) -> Held:
        """``wait``'s callback form: ``then(woken)``, with what ``wait`` would return, runs once the pull is woken
        (inside ``notify``, after ``answer``) or times out (False), unless it is cancelled first."""
        key = (topic, queue_id)
        held = Held(self, key, then)
        held._entry = entry = (offset, held, answer)
        self._waiters.setdefault(key, []).append(entry)
        held._deadline = self._deadlines.add(timeout_s, _expire, held)
        return held

    def _remove(self, key: tuple[str, int], entry: object) -> None:
        """``entry`` out of the queue's waiters (gone already: nothing), and the queue's list once empty."""
        waiters = self._waiters.get(key)
        if waiters is not None:
            with contextlib.suppress(ValueError):
                waiters.remove(entry)
            if not waiters:
                del self._waiters[key]

    def has_waiters(self, topic: str, queue_id: int) -> bool:
        return (topic, queue_id) in self._waiters

    def notify(self, topic: str, queue_id: int, max_offset: int, put: PutResult | None = None) -> int:
        """Messages up to ``max_offset`` (exclusive) exist now: wake the pulls they satisfy;
        returns how many were woken (each resumes at the event loop's next turn; ``deferred`` of them
        answer then, the others answered in their ``answer`` here). ``put``: the put that stored them in
        this queue, handed to the pulls held at its first queue offset."""
        woken = deferred = 0
        waiters = self._waiters.get((topic, queue_id))
        # a copy: a pull held by ``hold`` leaves the list as it is woken
        for offset, fut, answer in (*waiters,) if waiters else ():
            if offset < max_offset and not fut.done():
                why = put if put is not None and offset == put.queue_offset else True
                answered = answer is not None and _answered(answer, why)
                fut.set_result(ANSWERED if answered else why)
                woken += 1
                deferred += not answered
        self.deferred = deferred
        return woken

    def recheck(self, max_offset: Callable[[str, int], int]) -> int:
        """Wake the held pulls that messages now satisfy, asking ``max_offset(topic, queue_id)`` for the
        end of each queue a pull waits on (RocketMQ's checkHoldRequest): for arrivals that do not say
        which queue they fill, a slave's replicated commitlog bytes. Returns how many were woken."""
        return sum(self.notify(topic, queue_id, max_offset(topic, queue_id)) for topic, queue_id in list(self._waiters))

    def wake_all(self) -> None:
        """Release every held pull (shutdown)."""
        for waiters in list(self._waiters.values()):
            for _, fut, _ in list(waiters):
                if not fut.done():
                    fut.set_result(True)
        self._deadlines.close()
