"""Timer messages on the way in (RocketMQ 5's ``HookUtils.transformTimerMessage``): a message with
``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (in that precedence) due in the future is
parked in ``rmq_sys_wheel_timer`` queue 0, its real topic and queue kept in ``REAL_TOPIC``/``REAL_QID`` and
its due time (epoch ms) in ``TIMER_OUT_MS``; the timer service (``timer_service.py``) delivers it.

A due time already passed is stored in the real topic at once. One further ahead than
``timerMaxDelaySec``, a value that is not an integer, or any timer message while ``timerWheelEnable``
is off, is refused (MESSAGE_ILLEGAL, the whole send, nothing stored) with what was wrong. A delay
level wins over the timer properties, as in RocketMQ (``to_schedule`` runs first).

Unlike RocketMQ, which rounds a due time *down* to the precision (so a message may come up to
``timerPrecisionMs`` early), the wheel rounds up: never early, at most one precision late.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_mq.broker.scheduled.real_topic import joined_properties, parked_runs
from spark_mq.common.config import BrokerConfig
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import SCHEDULE_TOPIC, TIMER_TOPIC
from spark_mq.common.properties import (
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    scan_properties,
)

TIMER_NEEDLE = b"TIMER_DE"  # the common prefix of the three properties: most sends skip the scan
# lowest precedence first: a later one overwrites (RocketMQ checks DELAY_SEC, then DELAY_MS, then DELIVER_MS)
_SOURCES = ((TIMER_DELIVER_MS, 1, False), (TIMER_DELAY_MS, 1, True), (TIMER_DELAY_SEC, 1000, True))


@dataclass(frozen=True)
class TimerLimits:
    enabled: bool
    precision_ms: int
    max_delay_ms: int

    @classmethod
    def of(cls, config: BrokerConfig) -> TimerLimits:
        return cls(config.timer_wheel_enable, config.timer_precision_ms, config.timer_max_delay_sec * 1000)


def _ints(raw: bytes, starts: np.ndarray, ends: np.ndarray, name: str) -> np.ndarray:
    """The integers written at ``raw[starts[i]:ends[i]]``; MessageValidationError naming a bad one."""
    values = [raw[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    try:
        return np.array(list(map(int, values)), dtype=np.int64)
    except (ValueError, OverflowError):
        bad = next(v for v in values if not v.strip().lstrip(b"+-").isdigit() or len(v) > 18)
        raise MessageValidationError(f"timer message illegal: {name}={bad.decode('utf-8', 'replace')!r} is not an "
                                     f"integer") from None


def due_times(properties: list[bytes], now_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(has a timer property, due time in epoch ms) per message."""
    buf, starts, ends = joined_properties(properties)
    scan = scan_properties(buf, starts, ends)
    raw = buf.tobytes()
    has = np.zeros(len(properties), dtype=bool)
    due = np.zeros(len(properties), dtype=np.int64)
    for name, scale, relative in _SOURCES:
        s, e = scan.find(name)
        rows = np.flatnonzero(s >= 0)
        if rows.size:
            due[rows] = _ints(raw, s[rows], e[rows], name) * scale + (now_ms if relative else 0)
            has[rows] = True
    return has, due


def to_timer(batch: MessageBatch, limits: TimerLimits, now_ms: int) -> list[MessageBatch]:
    """``batch`` as the batches to store, in order: runs of messages due later moved to the timer topic
    (real topic/queue and due time in the properties), runs of the others unchanged. ``[batch]`` when
    none has a timer property (one C-level scan)."""
    if batch.topic in (SCHEDULE_TOPIC, TIMER_TOPIC) or TIMER_NEEDLE not in b"".join(batch.properties):
        return [batch]
    has, due = due_times(batch.properties, now_ms)
    if not has.any():
        return [batch]
    if not limits.enabled:
        raise MessageValidationError("accurate timer message is not enabled, timerWheelEnable is false: send "
                                     "without TIMER_* properties, or turn timerWheelEnable on")
    ahead = np.where(has, due - now_ms, 0)
    if (far := np.flatnonzero(ahead > limits.max_delay_ms)).size:
        raise MessageValidationError(
            f"timer message illegal, the delay time should not be bigger than the max delay {limits.max_delay_ms}ms "
            f"(timerMaxDelaySec): message {int(far[0])} of the send is due {int(ahead[far[0]])} ms from now")
    parked = has & (ahead > 0)
    if not parked.any():
        return [batch]
    real = f"{REAL_TOPIC}\x01{batch.topic}\x02{REAL_QUEUE_ID}\x01{batch.queue_id}\x02{TIMER_OUT_MS}\x01".encode()
    props = [p + real + b"%d\x02" % d if park else p
             for p, park, d in zip(batch.properties, parked.tolist(), due.tolist(), strict=True)]
    return parked_runs(batch, props, np.where(parked, 0, -1), TIMER_TOPIC)
