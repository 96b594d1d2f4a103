"""The committed copies of a transaction's half messages: which, in what order, and what they hold.

A commit stores one copy per UNIQ_KEY (a send retried after a lost answer stored a half message
twice) in its real topic and queue, without the half-only properties and with
``TRAN_PREPARED_QUEUE_OFFSET`` naming the half message, one batch put per run of a queue. The order
is a function of the set of live half messages, so a restart after a crash between a commit's
appends recomputes it and finds how far the commit got (``service.py``).
"""

from __future__ import annotations

from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_PREPARED,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    UNIQ_KEY,
)
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.headers import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE

# the properties a committed (or discarded) copy drops: it is an ordinary message again
_HALF_ONLY = (TRANSACTION_PREPARED, REAL_TOPIC, REAL_QUEUE_ID, TRANSACTION_CHECK_TIMES)


def real_queue(m: StoredMessage) -> tuple[str, int]:
    """The topic and queue a half message was sent to."""
    return m.properties.get(REAL_TOPIC, ""), int(m.properties.get(REAL_QUEUE_ID, "0") or 0)


def commit_order(msgs: list[StoredMessage]) -> list[StoredMessage]:
    """The order a transaction's half messages are committed in: one message per UNIQ_KEY (a send
    retried after a lost answer stored it twice), grouped by real queue in order of first appearance.
    A function of the set of live half messages, so a restart recomputes it."""
    seen: set[str] = set()
    by_queue: dict[tuple[str, int], list[StoredMessage]] = {}
    for m in sorted(msgs, key=lambda m: m.queue_offset):
        uniq = m.properties.get(UNIQ_KEY) or f"half:{m.queue_offset}"
        if uniq not in seen:
            seen.add(uniq)
            by_queue.setdefault(real_queue(m), []).append(m)
    return [m for queue in by_queue.values() for m in queue]


def commit_puts(order: list[StoredMessage], most: int) -> list[list[StoredMessage]]:
    """``order`` cut into runs of one real queue, at most ``most`` messages each."""
    puts: list[list[StoredMessage]] = []
    for m in order:
        if not puts or len(puts[-1]) == most or real_queue(puts[-1][0]) != real_queue(m):
            puts.append([])
        puts[-1].append(m)
    return puts


def real_batch(msgs: list[StoredMessage], topic: str, queue_id: int) -> MessageBatch:
    """The committed (or discarded) copies of ``msgs``: ordinary messages of ``topic`` again."""
    # the stored names and values are valid: joined without encode_properties' per-character checks
    props = ["".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in m.properties.items()
                     if k not in _HALF_ONLY).encode()
             + f"{TRANSACTION_PREPARED_QUEUE_OFFSET}{NAME_VALUE_SEPARATOR}{m.queue_offset}{PROPERTY_SEPARATOR}".encode()
             for m in msgs]
    batch = MessageBatch.of(topic, queue_id, [m.body for m in msgs], props, born_host=msgs[0].born_host)
    batch.born_timestamps[:] = [m.born_timestamp for m in msgs]
    batch.flags[:] = [m.flag for m in msgs]
    batch.sys_flags[:] = [(m.sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | TRANSACTION_COMMIT_TYPE for m in msgs]
    batch.reconsume_times[:] = [m.reconsume_times for m in msgs]
    return batch
