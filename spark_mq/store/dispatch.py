"""Dispatch: building consume queue and index entries for units appended to the commitlog.

An append only records what it wrote (an ``AppendRecord``: topic queue, offsets, sizes and
the property strings it already has in hand). The ``Dispatcher`` turns every pending record
into entries in one vectorised pass: the tag code is ``TAGS.hashCode()`` (0 without tags) and
the index keys are ``topic#key`` for every space-separated key in KEYS and for UNIQ_KEY.

Passes run on demand and in large batches, since each pass has a fixed cost of a few hundred
microseconds of numpy calls: every read calls ``catch_up_queues()`` (reads by queue offset) or
``catch_up()`` (key queries, checkpoints) first, so a message is visible to gets and key queries
as soon as its put returns; a put that finds the backlog past a bound dispatches it itself; and
a background thread, like RocketMQ's ReputMessageService, catches up once appends pause. (With
the GIL a background thread cannot run beside a busy appender, and tiny passes from it would
only steal the appender's time.) Recovery feeds the same ``build_entries`` from decoded units.

A pass of only a few messages (what a long-polling consumer's read forces for every message at
a modest rate) takes a scalar path instead: the vectorised one costs ~0.5 ms whatever the
count (a Horner step per key byte), which at a few thousand single-message puts a second alone
saturated the broker. Both paths give identical entries. A small pass writes consume queue
entries only; its index entries (whose insert has a fixed cost of its own) wait in commitlog
order for ``catch_up()``, the next large pass or a backlog of ``INDEX_BACKLOG_KEYS``. The
dispatched offset (the checkpoint's safe offset) stays below every unit not yet indexed, so
crash recovery rebuilds what was still waiting.

A full disk (a consume queue or index file that cannot be created: ``DiskFullError``) pauses
dispatch rather than losing or skipping entries: the records of the failed pass stay at the
head, ``stalled`` says why, and the pass is tried again at most every ``STALL_RETRY_S`` (reads
meanwhile see what was dispatched; the store refuses writes). Retrying is safe: a consume
queue skips entries it already has and an index batch goes in whole or not at all.

Thread-safety: ``enqueue`` is called under the store's put lock; ``catch_up`` and
``catch_up_queues`` may be called from any thread and serialise themselves.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

from spark_mq.common.byte_ranges import split_ranges
from spark_mq.common.delay_levels import SCHEDULE_TOPIC, due_tag_codes
from spark_mq.common.errors import DiskFullError
from spark_mq.common.java_hash import (
    PREFIX_SUM_MAX_BYTES,
    PrefixSumHasher,
    java_hash,
    java_hash_utf8,
    java_hashes,
)
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.properties import (
    KEY_SEPARATOR,
    KEYS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TAGS,
    UNIQ_KEY,
    PackedProperties,
    PropertyScan,
    scan_properties,
)
from spark_mq.common.unit import native
from spark_mq.common.unit.encode import KEYS_ROOM, DispatchInfo
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.index_file import positive_hash, positive_hashes
from spark_mq.store.index_service import IndexService

log = logging.getLogger(__name__)

_SPACE = ord(KEY_SEPARATOR)
MAX_PASS_MESSAGES = 65_536  # bounds the memory of one dispatch pass
IDLE_BEFORE_DISPATCH_S = 0.010  # the background pass waits for appends to pause this long
SCALAR_PASS_MESSAGES = 32  # up to this many messages a pure-Python pass beats the vectorised one
INDEX_BACKLOG_KEYS = 2048  # index keys of small passes written together (~1 ms) once this many wait
STALL_RETRY_S = 1.0  # a pass that hit a full disk is tried again after this long
_TAGS, _KEYS, _UNIQ_KEY = TAGS.encode(), KEYS.encode(), UNIQ_KEY.encode()
_NV, _PS, _KEY_SEP = NAME_VALUE_SEPARATOR.encode(), PROPERTY_SEPARATOR.encode(), KEY_SEPARATOR.encode()

QueueFor = Callable[[str, int], ConsumeQueue]


@dataclass(slots=True)
class AppendRecord:
    """What one append wrote: consecutive queue offsets from ``queue_offset``. Its property strings
    are either ``properties`` (a put has them in hand) or the last ``property_lengths`` bytes of each
    unit of ``data`` (units read back from the commitlog: a slave's). Not frozen, though never
    changed: one is built per put, and a frozen dataclass's ``__init__`` costs ~3x as much."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offsets: np.ndarray
    sizes: np.ndarray
    data: bytes | None  # the units back to back, or None when ``properties`` are given
    property_lengths: np.ndarray
    store_timestamp: int
    properties: list[bytes] | None = None
    info: DispatchInfo | None = None  # the encoder's, when it gave one: the strings need no scan then

    def property_strings(self) -> list[bytes]:
        """Every message's property string (sliced out of ``data`` when not given)."""
        if self.properties is not None:
            return self.properties
        assert self.data is not None
        ends = np.cumsum(self.sizes)
        return list(map(self.data.__getitem__, map(slice, (ends - self.property_lengths).tolist(), ends.tolist())))

    @property
    def end_offset(self) -> int:
        return self.physical_offsets.item(-1) + self.sizes.item(-1)  # Python ints: no numpy scalars made


def dispatch_info(
    buf: np.ndarray,
    props_start: np.ndarray,
    props_end: np.ndarray,
    topic_prefix_hashes: int | np.ndarray,
    with_keys: bool = True,
) -> DispatchInfo:
    """Tag codes and (unless ``with_keys`` is false) index keys of messages whose property
    strings are ranges of ``buf``.

    ``topic_prefix_hashes`` is ``hash(topic + "#")``, one for all or one per message.
    """
    return _dispatch_info(buf, scan_properties(buf, props_start, props_end), topic_prefix_hashes, with_keys)


def packed_dispatch_info(packed: PackedProperties, topic_prefix_hashes: int | np.ndarray) -> DispatchInfo:
    """``dispatch_info`` of property strings packed from a put's batches (no units to scan)."""
    return _dispatch_info(packed.data, packed, topic_prefix_hashes, True)


def joined_dispatch_info(strings: list[bytes], lengths: np.ndarray, topic_prefix_hashes: int | np.ndarray
                         ) -> DispatchInfo:
    """``dispatch_info`` of a put's property strings (``lengths`` known): one pass of the native
    library when it is built and every hashed value is ASCII, else packed and scanned with numpy
    (the same values: the tests compare them)."""
    if native.DISPATCH_INFO is not None and strings:
        info = _native_dispatch_info(strings, lengths, topic_prefix_hashes)
        if info is not None:
            return info
    return packed_dispatch_info(PackedProperties.join(strings, lengths), topic_prefix_hashes)


def _native_dispatch_info(strings: list[bytes], lengths: np.ndarray, topic_prefix_hashes: int | np.ndarray
                          ) -> DispatchInfo | None:
    """``joined_dispatch_info`` by the native library; None when it leaves the strings to numpy
    (a hashed value that is not ASCII: Java hashes its UTF-16 units)."""
    data = b"".join(strings)
    rows = len(strings)
    prefixes = np.asarray(topic_prefix_hashes, dtype=np.int64)
    lengths_bytes = np.ascontiguousarray(lengths, dtype=np.int64).tobytes()
    tags = bytearray(8 * rows)
    keys = -2
    # room for KEYS_ROOM keys a message first (counting the spaces of a pass's strings costs ~0.02 us a
    # message); then for the most there can be: UNIQ_KEY and the KEYS tokens, one more than its spaces
    for retry in (False, True):
        capacity = 2 * rows + data.count(b" ") if retry else KEYS_ROOM * rows
        key_rows, key_hashes = bytearray(8 * capacity), bytearray(4 * capacity)
        keys = native.DISPATCH_INFO(
            data, len(data), lengths_bytes, rows, prefixes.tobytes(), int(prefixes.ndim),
            *(ctypes.byref(ctypes.c_char.from_buffer(out)) for out in (tags, key_rows, key_hashes)), capacity,
        )
        if keys != -2:
            break
    if keys < 0:
        return None
    return DispatchInfo(np.frombuffer(tags, dtype=np.int64), np.frombuffer(key_rows, dtype=np.int64, count=keys),
                        np.frombuffer(key_hashes, dtype=np.int32, count=keys))


def _dispatch_info(
    buf: np.ndarray, found: PropertyScan | PackedProperties, topic_prefix_hashes: int | np.ndarray, with_keys: bool
) -> DispatchInfo:
    """``dispatch_info`` with the properties located in ``buf`` (``found.find`` gives value ranges of it)."""
    hashes = _range_hashes(buf, isinstance(found, PackedProperties))
    tag_s, tag_e = found.find(TAGS)
    has_tag = np.flatnonzero(tag_s >= 0)
    tag_codes = np.zeros(found.rows, dtype=np.int64)
    if has_tag.size:
        tag_codes[has_tag] = hashes(tag_s[has_tag], tag_e[has_tag], 0).astype(np.int64)
    if not with_keys:
        none = np.zeros(0, dtype=np.int64)
        return DispatchInfo(tag_codes, none, none.astype(np.int32))

    uniq_s, uniq_e = found.find(UNIQ_KEY)
    keys_s, keys_e = found.find(KEYS)
    k_rows, k_start, k_end = split_ranges(buf, keys_s, keys_e, _SPACE)
    has_uniq = np.flatnonzero((uniq_s >= 0) & (uniq_e > uniq_s))
    rows = np.concatenate((has_uniq, k_rows))
    starts = np.concatenate((uniq_s[has_uniq], k_start))
    ends = np.concatenate((uniq_e[has_uniq], k_end))
    order = np.argsort(rows, kind="stable")  # index keys in message order
    rows, starts, ends = rows[order], starts[order], ends[order]
    prefix = topic_prefix_hashes if np.isscalar(topic_prefix_hashes) else np.asarray(topic_prefix_hashes)[rows]
    key_hashes = positive_hashes(hashes(starts, ends, prefix)) if rows.size else np.zeros(0, np.int32)
    return DispatchInfo(tag_codes, rows, key_hashes)


def _range_hashes(buf: np.ndarray, packed: bool) -> Callable[[np.ndarray, np.ndarray, int | np.ndarray], np.ndarray]:
    """``java_hashes`` of ranges of ``buf``: by one prefix sum over it when it is packed property
    bytes (nearly all of them hashed: tags, keys, UNIQ_KEY), ASCII and not too large for the sum's tables;
    by masked matrices of the ranges' bytes otherwise (whole units, where the ranges are a small part)."""
    if packed and buf.size <= PREFIX_SUM_MAX_BYTES and int(buf.max(initial=0)) < 0x80:
        return PrefixSumHasher(buf).hashes
    return lambda starts, ends, prefix: java_hashes(buf, starts, ends, prefix)


def scalar_dispatch_info(records: list[AppendRecord], prefix_of: Callable[[str], int]) -> DispatchInfo:
    """``dispatch_info`` of a few records, in plain Python (same rules: the last duplicate
    property wins, index keys per message are UNIQ_KEY then the KEYS tokens in order);
    ``prefix_of(topic)`` is the signed hash of ``topic + "#"``."""
    tag_codes: list[int] = []
    key_rows: list[int] = []
    key_hashes: list[int] = []
    row = 0
    for r in records:
        prefix = prefix_of(r.topic)
        for string in r.property_strings():
            props: dict[bytes, bytes] = {}
            for item in string.split(_PS):
                name, sep, value = item.partition(_NV)
                if sep and name:
                    props[name] = value
            tags = props.get(_TAGS)
            tag_codes.append(0 if tags is None else java_hash_utf8(tags))
            keys = []
            uniq = props.get(_UNIQ_KEY)
            if uniq:
                keys.append(uniq)
            raw_keys = props.get(_KEYS)
            if raw_keys:
                keys += [k for k in raw_keys.split(_KEY_SEP) if k]
            for key in keys:
                key_rows.append(row)
                key_hashes.append(positive_hash(java_hash_utf8(key, prefix)))
            row += 1
    return DispatchInfo(np.array(tag_codes, dtype=np.int64), np.array(key_rows, dtype=np.int64),
                        np.array(key_hashes, dtype=np.int32))


def joined_infos(infos: list[DispatchInfo], bounds: list[int]) -> DispatchInfo:
    """One pass's dispatch info from its records' (record ``i``'s rows start at ``bounds[i]``)."""
    if len(infos) == 1:
        return DispatchInfo(infos[0].tag_codes, infos[0].key_rows, infos[0].key_hashes.astype(np.int32))
    key_rows = np.concatenate([i.key_rows for i in infos])
    key_rows += np.repeat(np.array(bounds[:-1], dtype=np.int64), [i.key_rows.size for i in infos])
    return DispatchInfo(np.concatenate([i.tag_codes for i in infos]), key_rows,
                        np.concatenate([i.key_hashes for i in infos], dtype=np.int32))


@lazy_dataclass(frozen=True)
class QueueRun(LazyDataclass):
    """Rows ``rows`` of a dispatch pass belong to one topic queue, from ``queue_offset``."""

    topic: str
    queue_id: int
    queue_offset: int
    rows: slice | np.ndarray


def queue_runs(records: list[AppendRecord], counts: list[int], bounds: list[int]) -> list[QueueRun]:
    """The rows of a pass's ``records`` (``counts`` messages each, from row ``bounds[i]``) as one run
    per topic queue: a record continuing an earlier one's queue offsets joins its run. Why: a pass
    holds the puts of a few queues in turn, and one consume-queue write per queue costs far less
    than one per put (a few numpy calls each). Runs are in order of their first row, so a queue's
    runs (split only where its offsets jump) are written in offset order."""
    run_of: dict[tuple[str, int], int] = {}
    firsts: list[AppendRecord] = []
    next_offset: list[int] = []
    sizes: list[int] = []
    ids: list[int] = []
    for r, count in zip(records, counts, strict=True):
        key = (r.topic, r.queue_id)
        run = run_of.get(key)
        if run is None or next_offset[run] != r.queue_offset:
            run = run_of[key] = len(firsts)
            firsts.append(r)
            next_offset.append(r.queue_offset)
            sizes.append(0)
        next_offset[run] += count
        sizes[run] += count
        ids.append(run)
    if len(firsts) == len(records):  # no record joined another: each is a slice of the pass
        return [QueueRun(r.topic, r.queue_id, r.queue_offset, slice(bounds[i], bounds[i + 1]))
                for i, r in enumerate(records)]
    rows = np.argsort(np.repeat(np.array(ids, dtype=np.int64), counts), kind="stable")  # each run's rows together
    ends = np.cumsum(sizes).tolist()
    return [QueueRun(r.topic, r.queue_id, r.queue_offset, rows[end - size:end])
            for r, size, end in zip(firsts, sizes, ends, strict=True)]


def build_entries(
    runs: list[QueueRun],
    phys: np.ndarray,
    sizes: np.ndarray,
    store_ts: np.ndarray,
    info: DispatchInfo,
    queue_for: QueueFor,
    index: IndexService | None,
    index_done: int = -1,
    delays_ms: tuple[int, ...] | None = None,
) -> None:
    """Write consume queue entries per run and index entries for every key (those of units
    at or below ``index_done`` are already indexed and skipped). With ``delays_ms`` (the delay
    levels), a schedule-topic entry's tag code is its due time."""
    for run in runs:
        tags = info.tag_codes[run.rows]
        if run.topic == SCHEDULE_TOPIC and delays_ms is not None:
            tags = due_tag_codes(delays_ms, run.queue_id, store_ts[run.rows])
        queue_for(run.topic, run.queue_id).put_batch(run.queue_offset, phys[run.rows], sizes[run.rows], tags)
    if index is not None and info.key_rows.size:
        key_phys = phys[info.key_rows]
        todo = key_phys > index_done
        if todo.all():
            index.put_batch(info.key_hashes, key_phys, store_ts[info.key_rows])
        elif todo.any():
            index.put_batch(info.key_hashes[todo], key_phys[todo], store_ts[info.key_rows][todo])


class Dispatcher:
    def __init__(self, queue_for: QueueFor, index: IndexService | None, dispatched: int,
                 delays_ms: tuple[int, ...] | None = None) -> None:
        self._delays_ms = delays_ms
        self._queue_for = queue_for
        self._index = index
        self._pending: deque[AppendRecord] = deque()
        self._held: list[AppendRecord] = []  # the records of the pass in flight (retried after a full disk)
        self._held_count = 0  # messages in them
        self.stalled: str | None = None  # why dispatch is paused (a full disk), None while it runs
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._key_prefixes: dict[str, int] = {}
        self._enqueued = 0  # messages, written by enqueue only
        self._done = 0  # messages, written by the dispatch pass only
        self._last_enqueue = 0.0
        # index entries of small passes, in commitlog order: (key hashes, phys, store times)
        self._index_backlog: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._index_backlog_keys = 0
        self._queued_offset = dispatched  # consume queues are built up to here
        self._queued_timestamp = 0
        self.dispatched_offset = dispatched  # consume queues and index are built up to here
        self.last_store_timestamp = 0

    def rebuilt(self, offset: int, timestamp: int) -> None:
        """Recovery built every entry below ``offset`` itself (late, a full disk had stopped it);
        nothing may be pending."""
        with self._lock:
            assert not (self._pending or self._held or self._index_backlog)
            self._queued_offset = self.dispatched_offset = offset
            self._queued_timestamp = self.last_store_timestamp = timestamp

    def enqueue(self, record: AppendRecord) -> None:
        self._pending.append(record)
        self._enqueued += int(record.sizes.size)
        self._last_enqueue = time.monotonic()

    def catch_up_when_idle(self) -> None:
        """Background duty: dispatch the backlog once appends have paused for a moment."""
        if ((self._pending or self._held or self._index_backlog)
                and time.monotonic() - self._last_enqueue >= IDLE_BEFORE_DISPATCH_S):
            self.catch_up()

    @property
    def backlog(self) -> int:
        """Messages appended but not yet in their consume queue."""
        return self._enqueued - self._done

    def key_prefix(self, topic: str) -> int:
        """The hash of ``topic + "#"``, where every index key hash of ``topic`` starts (cached)."""
        h = self._key_prefixes.get(topic)
        if h is None:
            h = self._key_prefixes[topic] = java_hash(topic + "#")
        return h

    def catch_up(self) -> int:
        """Build consume queue and index entries for every pending append; returns the
        dispatched commitlog offset (everything below it is in both)."""
        with self._lock:  # even with nothing pending, wait out a dispatch in flight on another thread
            self._run(flush_index=True)
            return self.dispatched_offset

    def catch_up_queues(self) -> None:
        """Build consume queue entries for every pending append: what reads by queue offset need.

        Index entries of small passes may wait (``catch_up`` or a backlog past
        ``INDEX_BACKLOG_KEYS`` writes them): one index insert costs ~0.1 ms whatever its size, the
        largest part of dispatching a single message for a long-polling consumer."""
        with self._lock:  # wait out a dispatch in flight: a put that returned must be readable
            self._run(flush_index=self._index_backlog_keys >= INDEX_BACKLOG_KEYS)

    def _run(self, flush_index: bool) -> None:
        """Drain (and flush the index backlog if asked, or to retry it); a full disk stalls."""
        if not self._may_run():
            return
        try:
            self._drain()
            if flush_index or self.stalled is not None:
                self._flush_index()
        except DiskFullError as e:
            self._stall(e)
            return
        if self.stalled is not None:
            log.warning("dispatch resumed: consume queue and index files could be created again")
            self.stalled = None

    def _may_run(self) -> bool:
        """False while stalled on a full disk and the next retry is not due (under the lock)."""
        return self.stalled is None or time.monotonic() >= self._retry_at

    def _stall(self, e: DiskFullError) -> None:
        if self.stalled is None:
            log.error("dispatch paused, %d messages wait for their consume queue or index entries: %s",
                      self.backlog, e)
        self.stalled = str(e)
        self._retry_at = time.monotonic() + STALL_RETRY_S

    def _drain(self) -> None:
        while self._held or self._pending:
            if not self._held:  # the next pass, held until it succeeds
                records: list[AppendRecord] = []
                count = 0
                while self._pending and count < MAX_PASS_MESSAGES:
                    records.append(self._pending.popleft())
                    count += int(records[-1].sizes.size)
                self._held, self._held_count = records, count
            self._dispatch(self._held)  # on DiskFullError the records stay held for the retry
            self._done += self._held_count
            self._held = []

    def _flush_index(self) -> None:
        """Write the index backlog in one insert; then everything queued is dispatched."""
        if self._index_backlog:
            assert self._index is not None
            backlog = self._index_backlog
            if len(backlog) == 1:
                hashes, phys, ts = backlog[0]
            else:
                hashes, phys, ts = (np.concatenate(col) for col in zip(*backlog, strict=True))
            self._index.put_batch(hashes, phys, ts)  # whole or not at all: the backlog stays on DiskFullError
            self._index_backlog = []
            self._index_backlog_keys = 0
        self.dispatched_offset = self._queued_offset
        self.last_store_timestamp = self._queued_timestamp

    def _dispatch(self, records: list[AppendRecord]) -> None:
        counts = [int(r.sizes.size) for r in records]
        bounds = [0]
        for c in counts:
            bounds.append(bounds[-1] + c)
        if len(records) == 1:
            phys, sizes = records[0].physical_offsets, records[0].sizes
        else:
            phys = np.concatenate([r.physical_offsets for r in records])
            sizes = np.concatenate([r.sizes for r in records])
        small = bounds[-1] <= SCALAR_PASS_MESSAGES
        infos = [r.info for r in records]
        if not small:
            self._flush_index()  # index entries go in commitlog order
        if all(i is not None for i in infos):  # the encoder's (a put's, by the native library)
            info = joined_infos(infos, bounds)
        elif small:
            info = scalar_dispatch_info(records, self.key_prefix)
        else:
            prop_lengths = np.concatenate([r.property_lengths for r in records])
            prefixes = [self.key_prefix(r.topic) for r in records]
            prefix = prefixes[0] if len(set(prefixes)) == 1 else np.repeat(np.array(prefixes, np.int64), counts)
            units = [r.data for r in records if r.data is not None]
            if len(units) == len(records):  # units read back (a slave's): their property strings packed
                buf = np.frombuffer(b"".join(units), dtype=np.uint8)
                unit_ends = np.cumsum(sizes)  # properties are the last bytes of every unit
                info = packed_dispatch_info(PackedProperties.pack(buf, unit_ends - prop_lengths, unit_ends), prefix)
            else:  # a put's (or puts after a slave's, once promoted): join the strings, no units to scan
                strings = list(chain.from_iterable(r.property_strings() for r in records))
                info = joined_dispatch_info(strings, prop_lengths, prefix)
        ts = np.repeat(np.fromiter((r.store_timestamp for r in records), dtype=np.int64), counts)
        runs = queue_runs(records, counts, bounds)
        defer = small and self._index is not None and info.key_rows.size > 0
        build_entries(runs, phys, sizes, ts, info, self._queue_for, None if defer else self._index,
                      delays_ms=self._delays_ms)
        if defer:
            self._index_backlog.append((info.key_hashes, phys[info.key_rows], ts[info.key_rows]))
            self._index_backlog_keys += int(info.key_rows.size)
        self._queued_offset = records[-1].end_offset
        self._queued_timestamp = records[-1].store_timestamp
        if not self._index_backlog:
            self.dispatched_offset = self._queued_offset
            self.last_store_timestamp = self._queued_timestamp
