"""A send's batch sorted into runs by what the broker does with them, from one read of its properties.

The send path joins a batch's property strings once (:class:`JoinedProperties`) and asks each
feature about them; the common case, a batch of plain messages, costs the join and one C-level
search per feature, and goes to the store as it came. The runs:

- half: a prepared transaction, the whole send (``transaction/half_messages.py``), decided before a
  topic is created; it is never delayed nor timed (RocketMQ delays plain and committed messages only);
- delay level: parked in the schedule topic's queue of its level (``scheduled/delay_service.py``);
- timer: due later, parked in the timer wheel's topic (``scheduled/timer.py``); a delay level wins
  over the timer properties, as in RocketMQ;
- normal: stored in the topic and queue it was sent to.

The runs are stored in the order of their messages, one put each (:func:`put_all`).
"""

from __future__ import annotations

import time

from spark_mq.broker.scheduled.delay_service import DELAY_NEEDLE, park_delayed
from spark_mq.broker.scheduled.timer import TIMER_NEEDLE, TimerLimits, park_timed
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import SCHEDULE_TOPIC, TIMER_TOPIC
from spark_mq.common.properties import JoinedProperties
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import PutResult

# the run a message of a send that is not a prepared transaction goes to: a delay level's is its
# schedule queue (>= 0, as ``park_delayed`` gives them)
NORMAL, TIMER = -1, -2


def stored_runs(batch: MessageBatch, max_level: int, timer: TimerLimits, now_ms: int | None = None,
                props: JoinedProperties | None = None) -> list[MessageBatch]:
    """``batch`` (not prepared) as the batches to store, in order: its runs of delayed, timed and normal
    messages, each in its topic and queue. ``[batch]`` when none is delayed or timed. ``now_ms``: when
    timer delays count from (default: now, read only when a message names a timer property); ``props``: the
    batch's joined properties when the caller made them already. Raises MessageValidationError for a
    bad DELAY or timer value (nothing is stored)."""
    props = JoinedProperties(batch.properties) if props is None else props
    if DELAY_NEEDLE not in props.joined and TIMER_NEEDLE not in props.joined:  # the common case: two C-level searches
        return [batch]
    delayed = park_delayed(batch, props, max_level)
    run, properties = (np.full(len(batch), NORMAL, dtype=np.int64), batch.properties) if delayed is None else delayed
    if batch.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC) and props.mentions(TIMER_NEEDLE):
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        properties = list(properties) if delayed is None else properties  # park_timed appends in place
        for start, stop in _runs_of(run == NORMAL):  # each as a send of its own, errors included
            run[start:stop][park_timed(batch, props, start, stop, timer, now_ms, properties)] = TIMER
    if delayed is None and (run == NORMAL).all():
        return [batch]
    return _cut(batch, properties, run)


def _runs_of(mask: np.ndarray) -> list[tuple[int, int]]:
    """The ``[start, stop)`` runs where ``mask`` holds."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def _cut(batch: MessageBatch, properties: list[bytes], run: np.ndarray) -> list[MessageBatch]:
    """``batch`` with ``properties`` cut where the run of its messages changes, each part in its run's
    topic and queue."""
    cuts = (np.flatnonzero(np.diff(run)) + 1).tolist()
    out = []
    for start, stop in zip([0, *cuts], [*cuts, len(batch)], strict=True):
        part = batch.slice(start, stop)
        part.properties = properties[start:stop]
        if run[start] >= 0:
            part.topic, part.queue_id = SCHEDULE_TOPIC, int(run[start])
        elif run[start] == TIMER:
            part.topic, part.queue_id = TIMER_TOPIC, 0
        out.append(part)
    return out


def put_all(store: MessageStore, batches: list[MessageBatch]) -> PutResult:
    """Store ``batches`` in order; one result for them all (its queue offset is the first batch's)."""
    results = [store.put_messages(b, wait_flush=False) for b in batches]
    if len(results) == 1:
        return results[0]
    first = results[0]
    return PutResult(first.status, first.queue_offset, np.concatenate([r.physical_offsets for r in results]),
                     np.concatenate([r.sizes for r in results]), results[-1].store_timestamp, first.store_host)
