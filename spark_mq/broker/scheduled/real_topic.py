"""Parked messages back to their real topic once due, for the delay-level schedule (``delay_service.py``)
and the timer wheel (``timer_service.py``); the send path parks them (``processors/send_runs.py``).

A parked unit keeps its real topic and queue in the properties ``REAL_TOPIC``/``REAL_QID``. Delivery
stores a copy in that topic in runs of equal (topic, queue, born host) -- a few puts per pass, not one
Python object per message -- with the named properties cut out of every property string in one
vectorised pass. Body (as stored: a compressed body stays compressed), flag, sys flag, born
time/host, reconsume times and every other property (keys, tags, UNIQ_KEY) are kept.

Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import REAL_QUEUE_ID, REAL_TOPIC, scan_properties
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.common.unit.layout import HOST_SIZE
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

Stored = Callable[[str, int, int], None]  # (topic, queue id, next queue offset): wakes held pulls


def slices(raw: bytes, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """``raw[starts[i]:ends[i]]`` for every i, by C-level maps (empty where a start is -1)."""
    return list(map(raw.__getitem__, map(slice, np.maximum(starts, 0).tolist(), np.maximum(ends, 0).tolist())))


def without_properties(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, names: tuple[str, ...]
                       ) -> tuple[bytes, np.ndarray]:
    """The property strings ``buf[starts[i]:ends[i]]`` with every pair named in ``names`` cut out, back
    to back: (bytes, lengths). One pass of numpy calls: a byte is kept if it lies in a property string
    (+1 at each start, -1 at each end) and in no cut pair (-1 at its name, +1 after its separator)."""
    scan = scan_properties(buf, starts, ends)
    hits = []
    for name in names:
        key = np.frombuffer(name.encode(), dtype=np.uint8)
        cand = np.flatnonzero((scan.name_end - scan.name_start) == key.size)
        if cand.size:
            hits.append(cand[(buf[scan.name_start[cand, None] + np.arange(key.size)] == key).all(axis=1)])
    cand = np.concatenate(hits) if hits else np.zeros(0, dtype=np.int64)
    marks = np.zeros(buf.size + 1, dtype=np.int64)
    np.add.at(marks, starts, 1)
    np.add.at(marks, ends, -1)
    lengths = ends - starts
    if cand.size:
        # the pair and its separator (when it has one before its message's end)
        stop = np.minimum(scan.value_end[cand] + 1, ends[scan.row[cand]])
        np.add.at(marks, scan.name_start[cand], -1)
        np.add.at(marks, stop, 1)
        removed = stop - scan.name_start[cand]
        lengths = lengths - np.bincount(scan.row[cand], weights=removed, minlength=starts.size).astype(np.int64)
    return buf[np.cumsum(marks[:-1]) == 1].tobytes(), lengths


def store_in_real_topics(store: MessageStore, units: StoredBatch, cut: tuple[str, ...], on_stored: Stored,
                         what: str) -> None:
    """Store ``units`` in their real topics (``cut`` removed from their properties), in runs of equal
    (topic, queue, born host). Units without a valid real topic/queue are dropped and logged (``what``
    names the service in the line)."""
    u, raw = units.units, units.buf
    buf = np.frombuffer(raw, dtype=np.uint8)
    scan = scan_properties(buf, u.props_start, u.props_end)
    topics = slices(raw, *scan.find(REAL_TOPIC))
    qids = slices(raw, *scan.find(REAL_QUEUE_ID))
    props, lengths = without_properties(buf, u.props_start, u.props_end, cut)
    ends = np.cumsum(lengths)
    prop_list = slices(props, ends - lengths, ends)
    bodies = slices(raw, u.body_start, u.body_end)
    keys = list(zip(topics, qids, units.born_hosts, strict=True))
    codes = dict.fromkeys(keys)
    for i, k in enumerate(codes):
        codes[k] = i
    cuts = (np.flatnonzero(np.diff(np.fromiter(map(codes.__getitem__, keys), dtype=np.int64))) + 1).tolist()
    for start, stop in zip([0, *cuts], [*cuts, len(keys)], strict=True):
        _put_run(store, keys[start], bodies[start:stop], prop_list[start:stop], units, start, stop, on_stored, what)


def _put_run(store: MessageStore, key: tuple[bytes, bytes, bytes], bodies: list[bytes], props: list[bytes],
             units: StoredBatch, start: int, stop: int, on_stored: Stored, what: str) -> None:
    topic_raw, qid_raw, host = key
    try:
        topic, queue_id = topic_raw.decode(), int(qid_raw)
        if not topic:
            raise ValueError("no topic")
    except (UnicodeDecodeError, ValueError):
        log.warning("%s: %d units without a valid %s/%s (%r, %r) dropped", what, stop - start, REAL_TOPIC,
                    REAL_QUEUE_ID, topic_raw, qid_raw)
        return
    batch = MessageBatch(topic, queue_id, bodies, props, units.flags[start:stop].astype(np.int32),
                         units.born_timestamps[start:stop], units.sys_flags[start:stop].astype(np.int32),
                         units.reconsume_times[start:stop].astype(np.int32),
                         host.ljust(HOST_SIZE, b"\x00"))  # numpy's S8 drops trailing zero bytes
    try:
        result = store.put_messages(batch, wait_flush=False)
    except MessageValidationError as e:
        log.error("%s: %d messages to %s dropped: %s", what, len(bodies), topic, e)
        return
    on_stored(topic, queue_id, result.queue_offset + result.count)
