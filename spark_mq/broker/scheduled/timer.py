"""Timer messages on the way in (RocketMQ 5's ``HookUtils.transformTimerMessage``): a message with
``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (in that precedence) due in the future is
parked in ``rmq_sys_wheel_timer`` queue 0, its real topic and queue kept in ``REAL_TOPIC``/``REAL_QID`` and
its due time (epoch ms) in ``TIMER_OUT_MS`` (:func:`park_timed`, asked by the send path's ``send_runs``);
the timer service (``timer_service.py``) delivers it.

A due time already passed is stored in the real topic at once. One further ahead than
``timerMaxDelaySec``, a value that is not an integer, or any timer message while ``timerWheelEnable``
is off, is refused (MESSAGE_ILLEGAL, the whole send, nothing stored) with what was wrong. A delay
level wins over the timer properties, as in RocketMQ (``park_delayed`` is asked first).

Unlike RocketMQ, which rounds a due time *down* to the precision (so a message may come up to
``timerPrecisionMs`` early), the wheel rounds up: never early, at most one precision late.
"""

from __future__ import annotations

from spark_mq.common.config import BrokerConfig
from spark_mq.common.config_dataclass import config_dataclass
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import (
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    JoinedProperties,
)

TIMER_NEEDLE = b"TIMER_DE"  # the common prefix of the three properties: most sends skip the scan
# lowest precedence first: a later one overwrites (RocketMQ checks DELAY_SEC, then DELAY_MS, then DELIVER_MS)
_SOURCES = ((TIMER_DELIVER_MS, 1, False), (TIMER_DELAY_MS, 1, True), (TIMER_DELAY_SEC, 1000, True))


@config_dataclass
class TimerLimits:
    """The broker keys that decide how a timer message is taken (made once per broker, as its config)."""

    enabled: bool
    precision_ms: int
    max_delay_ms: int

    @classmethod
    def of(cls, config: BrokerConfig) -> TimerLimits:
        return cls(config.timer_wheel_enable, config.timer_precision_ms, config.timer_max_delay_sec * 1000)


def _ints(values: list[bytes], name: str) -> np.ndarray:
    """The integers written in ``values``; MessageValidationError naming a bad one."""
    try:
        return np.array(list(map(int, values)), dtype=np.int64)
    except (ValueError, OverflowError):
        bad = next(v for v in values if not v.strip().lstrip(b"+-").isdigit() or len(v) > 18)
        raise MessageValidationError(f"timer message illegal: {name}={bad.decode('utf-8', 'replace')!r} is not an "
                                     f"integer") from None


def due_times(props: JoinedProperties, start: int, stop: int, now_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(has a timer property, due time in epoch ms) per message of ``[start, stop)``."""
    has = np.zeros(stop - start, dtype=bool)
    due = np.zeros(stop - start, dtype=np.int64)
    for name, scale, relative in _SOURCES:
        rows, values = props.values(name, start, stop)
        if rows.size:
            due[rows - start] = _ints(values, name) * scale + (now_ms if relative else 0)
            has[rows - start] = True
    return has, due


def park_timed(batch: MessageBatch, props: JoinedProperties, start: int, stop: int, limits: TimerLimits, now_ms: int,
               properties: list[bytes]) -> np.ndarray:
    """What the send path does with the timer runs of a send: which messages of ``[start, stop)`` (a run
    no delay level took) are due later and so parked in the timer topic; their real topic/queue and due
    time are appended to their strings in ``properties``. Raises MessageValidationError (nothing is
    stored) for a bad value, a timer message while the wheel is off, or one due too far ahead."""
    has, due = due_times(props, start, stop, now_ms)
    if not has.any():
        return has
    if not limits.enabled:
        raise MessageValidationError("accurate timer message is not enabled, timerWheelEnable is false: send "
                                     "without TIMER_* properties, or turn timerWheelEnable on")
    ahead = np.where(has, due - now_ms, 0)
    if (far := np.flatnonzero(ahead > limits.max_delay_ms)).size:  # counted from the run's start, as before
        raise MessageValidationError(
            f"timer message illegal, the delay time should not be bigger than the max delay {limits.max_delay_ms}ms "
            f"(timerMaxDelaySec): message {int(far[0])} of the send is due {int(ahead[far[0]])} ms from now")
    parked = has & (ahead > 0)
    real = f"{REAL_TOPIC}\x01{batch.topic}\x02{REAL_QUEUE_ID}\x01{batch.queue_id}\x02{TIMER_OUT_MS}\x01".encode()
    for row, d in zip((np.flatnonzero(parked) + start).tolist(), due[parked].tolist(), strict=True):
        properties[row] += real + b"%d\x02" % d
    return parked
