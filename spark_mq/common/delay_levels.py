"""RocketMQ's delay levels (``messageDelayLevel``) and the schedule topic's consume-queue tag code.

A message sent with a delay level is parked in ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``; the
tag code of its consume-queue entry is not a tag hash but the time it falls due
(``storeTimestamp + delay of the level``), as RocketMQ's ``CommitLog.checkMessageAndReturnSize``
writes it, so the delivery service finds what is due from the consume queue alone. The store
computes it wherever entries are built (dispatch, recovery), from the unit's store timestamp and
the queue it is in.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_mq.common.names import SCHEDULE_TOPIC

if TYPE_CHECKING:  # the levels are read by every process's config (the NameServer's too): no numpy import
    import numpy as np

__all__ = ["DEFAULT_DELAY_LEVELS", "SCHEDULE_TOPIC", "due_tag_codes", "parse_delay_levels"]

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"(\d+)([smhd])\Z")


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m"`` → delays in ms, level 1 first. Raises ValueError naming the bad item."""
    out = []
    for item in text.split():
        m = _LEVEL.match(item)
        if not m:
            raise ValueError(f"delay level {item!r} is not <number><s|m|h|d>")
        out.append(int(m.group(1)) * _UNITS_MS[m.group(2)])
    if not out:
        raise ValueError("no delay levels given")
    return out


def due_tag_codes(delays_ms: tuple[int, ...], queue_id: int, store_timestamps: np.ndarray) -> np.ndarray:
    """The tag codes of schedule-topic entries of queue ``queue_id``: when each unit falls due
    (a queue past the last level counts as the last level, as a clamped level does)."""
    delay = delays_ms[min(queue_id, len(delays_ms) - 1)]
    return store_timestamps.astype("int64", copy=False) + delay
