"""Messages by key: the index's hash hits checked against the units themselves.

The index (``IndexService``) keeps a hash of ``topic#key`` per unit, not the key, and its times
in whole seconds. A hit is kept only if the unit carries the key (in KEYS or as UNIQ_KEY), was
stored in the time range asked, and still belongs to its topic queue (a deleted topic's units
stay in the commitlog until retention removes the file, and a topic created again under the same
name must not see them).

Thread-safety: reads only; callers have dispatched every stored message into the index first.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_mq.common.properties import UNIQ_KEY
from spark_mq.common.unit.decode import decode_message
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.consume_queue_store import QueueKey
from spark_mq.store.index_service import IndexService

INDEX_TIME_SLACK_MS = 999  # index entries keep whole seconds since their file's begin time


def unit_at(commitlog: CommitLog, phys: int) -> bytes | None:
    """The unit at commitlog offset ``phys``, or None if absent or deleted."""
    if phys < commitlog.min_offset():
        return None
    return commitlog.read_unit(phys)


def units_with_key(index: IndexService, commitlog: CommitLog, queues: Mapping[QueueKey, ConsumeQueue], topic: str,
                   key: str, max_num: int, begin: int, end: int) -> list[bytes]:
    """Units of ``topic`` carrying ``key``, stored within ``[begin, end]`` ms, newest first."""
    out = []
    # a stored time reads back up to 999 ms early: widen the lookup, the exact check against the unit follows
    for phys in index.query(topic, key, max_num * 2, begin - INDEX_TIME_SLACK_MS, end):
        unit = unit_at(commitlog, phys)
        if unit is None:
            continue
        msg = decode_message(unit)
        cq = queues.get((msg.topic, msg.queue_id))
        if cq is None or not cq.holds(msg.queue_offset, phys):
            continue  # its topic was deleted (and maybe created again): not a message of today's topic
        if msg.topic == topic and (key in msg.keys or msg.properties.get(UNIQ_KEY) == key):
            if begin <= msg.store_timestamp <= end:
                out.append(unit)
                if len(out) >= max_num:
                    break
    return out
