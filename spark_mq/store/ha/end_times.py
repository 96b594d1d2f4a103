"""When a master's commitlog reached each end: how old the oldest byte a slave lacks is.

A slave's lag in seconds is the age of the oldest byte it has not acknowledged, not the time
since it last had the whole commitlog (which grows without bound under a steady load while the
slave trails by a few bytes). So the master notes ``(time, commitlog end)`` after every put (the
end read first) and whenever it looks for bytes to send (after every transfer, and every poll
interval: bytes stored by other paths), keeps the notes past the slave's acknowledged offset, and
the first note past that offset dates its oldest missing byte (written at or before that time:
the figure understates the lag by no more than the time from a put's write to its note, and never
a stalled slave's, whose notes stay; bytes past every note, stored by another path since the last
look, are dated at that look: older than they are by at most a poll interval).

At most ``MAX_NOTES`` notes are kept: past that the newest note is replaced, so the oldest ones
(which date what a slow slave lacks) survive; the bytes between the last two notes then look
younger than they are.

Thread-safety: ``record`` and ``acknowledged`` run on the event loop; ``age`` may also be called
from a metrics scrape thread (it copies the notes in one C-level step).
"""

from __future__ import annotations

from collections import deque

MAX_NOTES = 1024


class EndTimes:
    def __init__(self, now: float) -> None:
        self._notes: deque[tuple[float, int]] = deque()  # (time, end), ends increasing
        self._looked_at = now  # the last ``record``: bytes past every note appeared after it

    def record(self, now: float, end: int) -> None:
        """The commitlog ends at ``end`` at ``now`` (monotonic seconds)."""
        self._looked_at = now
        if self._notes and self._notes[-1][1] >= end:
            return
        if len(self._notes) >= MAX_NOTES:
            self._notes.pop()
        self._notes.append((now, end))

    def acknowledged(self, offset: int) -> None:
        """The slave has every byte below ``offset``: the notes it passed are no longer needed."""
        while self._notes and self._notes[0][1] <= offset:
            self._notes.popleft()

    def age(self, offset: int, now: float) -> float:
        """Seconds since the commitlog first went past ``offset`` (as noted): the age of the byte there."""
        for at, end in list(self._notes):
            if end > offset:
                return max(0.0, now - at)
        return max(0.0, now - self._looked_at)
