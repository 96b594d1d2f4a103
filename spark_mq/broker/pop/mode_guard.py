"""Pop and classic pull of one group do not mix on one queue (RocketMQ's rule): a pull moves the offset the
pops share, and pops hold checkpoints a puller knows nothing of. A queue belongs to the mode that last used
it; the other is refused, naming the group, the queue and how long to wait, until the queue has been left
alone for ``popModeSwitchMillis`` (and, for a pull, until no popped message of the group is in flight
there). So a group can switch: stop one mode, wait, start the other.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

from collections.abc import Callable

POP, PULL = "pop", "pull"

InFlight = Callable[[str, str, int], int]
"""``in_flight(group, topic, queue_id)``: the group's unacknowledged popped messages in the queue."""


class PopPullGuard:
    def __init__(self, switch_ms: int, in_flight: InFlight) -> None:
        self.switch_ms = switch_ms
        self.in_flight = in_flight
        self._last: dict[tuple[str, str, int], tuple[str, int]] = {}  # queue -> (mode, last use ms)

    def _refusal(self, mode: str, group: str, topic: str, queue_id: int, now_ms: int) -> str | None:
        key = (group, topic, queue_id)
        last = self._last.get(key)
        other = PULL if mode == POP else POP
        busy = last is not None and last[0] == other and now_ms - last[1] < self.switch_ms
        pending = self.in_flight(group, topic, queue_id) if mode == PULL else 0
        if not busy and not pending:
            self._last[key] = (mode, now_ms)
            return None
        if pending:
            wait_s, why = 0.0, f"{pending} popped messages are unacknowledged there"
        else:
            idle_ms = now_ms - last[1]  # type: ignore[index]
            wait_s, why = (self.switch_ms - idle_ms) / 1000, f"it was {other}ed {idle_ms / 1000:.1f} s ago"
        return (f"group {group} cannot {mode} queue {queue_id} of topic {topic}: the group consumes that queue by "
                f"{other} ({why}); one group does not mix pop and pull on a queue: stop the {other} consumers "
                f"and {mode} again after {wait_s:.1f} s (popModeSwitchMillis), or use another group")

    def pop_refusal(self, group: str, topic: str, queue_id: int, now_ms: int) -> str | None:
        """Why the group may not pop the queue now (it pulls it), else None (and the queue is the pops')."""
        return self._refusal(POP, group, topic, queue_id, now_ms)

    def pull_refusal(self, group: str, topic: str, queue_id: int, now_ms: int) -> str | None:
        """Why the group may not pull the queue now (it pops it), else None (and the queue is the pulls')."""
        return self._refusal(PULL, group, topic, queue_id, now_ms)
