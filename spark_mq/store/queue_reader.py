"""Reading a consume queue's messages (RocketMQ's ``getMessage``): the entries from an offset,
filtered by tag code or by a unit filter, their units read from the commitlog back to back.

Filtering by tag code looks at the entries only (up to ``MAX_FILTER_SCAN`` per get). A unit
filter (SQL92) must read the units to judge them, so that scan is bounded by bytes as well
(``UNIT_FILTER_SCAN_BYTES``), and judged in chunks until enough match (``_judge``). Units no
check has seen yet are checked before they are served (``CheckedUnits.served``).

Thread-safety: ``get`` may run on any thread at once with puts and other gets; it reads the
consume queue and mapped commitlog files only (a file retention deletes meanwhile answers
OFFSET_FOUND_NULL).
"""

from __future__ import annotations

from collections.abc import Callable

from spark_mq.common.byte_ranges import gather_ranges
from spark_mq.common.lazy_numpy import np
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import QUARANTINED_TAG, ConsumeQueue
from spark_mq.store.results import GetResult, GetStatus
from spark_mq.store.unit_checks import CheckedUnits

MAX_FILTER_SCAN = 16_000  # consume queue entries scanned per get when filtering by tag
# commitlog bytes read per get when a unit filter (SQL92) judges units by their contents: the units
# must be read to be judged, so the scan is bounded by bytes as well as by entries
UNIT_FILTER_SCAN_BYTES = 8 * 1024 * 1024
MIN_JUDGED_UNITS = 256  # units a unit filter judges at once at least (each call has a fixed cost)
DEFAULT_MAX_GET_BYTES = 4 * 1024 * 1024
# an unfiltered get of at most this many entries (a consumer's default pull) is read with struct and plain lists
# (``_get_few``): numpy's fixed costs are most of such a get (1 KiB units, CPU µs a get, few vs numpy path: 1
# entry 8 vs 16, 16: 16 vs 36, 32: 19 vs 31; units a read must check: 32: 86 vs 130), and a restarted broker's
# first pull then imports no numpy
FEW_ENTRIES = 32


UnitFilter = Callable[[bytes, "np.ndarray"], "np.ndarray"]  # quoted: numpy is imported on first use
"""``unit_filter(data, sizes)``: which of the units back to back in ``data`` a reader wants (a
boolean mask), judged on their contents (a SQL92 subscription's properties)."""


def _judge(read_units: Callable[[np.ndarray, np.ndarray], bytes], window: np.ndarray, phys: np.ndarray,
           sizes: np.ndarray, wanted: int, unit_filter: UnitFilter) -> tuple[np.ndarray, bytes, np.ndarray]:
    """The first units of ``window`` (entry indexes into ``phys``/``sizes``) read and judged, in chunks, until
    ``wanted`` match or the window ends: (the entries judged, their bytes back to back, which match).

    Why chunks: a pull asks for ``wanted`` matches, and the window may hold many times that; reading and
    judging all of it, to return the first ``wanted``, made each pull do the work of the next ones again.
    A chunk holds what is still missing at the rate of matches seen so far, a quarter more."""
    datas, keeps, done, matched = [], [], 0, 0
    chunk = max(wanted, MIN_JUDGED_UNITS)
    while done < window.size and matched < wanted:
        part = window[done:done + chunk]
        data = read_units(phys[part], sizes[part])
        keep = unit_filter(data, sizes[part])
        datas.append(data)
        keeps.append(keep)
        done += part.size
        matched += int(np.count_nonzero(keep))
        chunk = max(chunk, (wanted - matched) * done * 5 // (4 * max(matched, 1)))
    return window[:done], datas[0] if len(datas) == 1 else b"".join(datas), np.concatenate(keeps)


class QueueReader:
    """Thread-safety: ``get`` runs on any thread, concurrently with puts, dispatch and other gets;
    the caller dispatches first, so the consume queue holds every unit stored so far."""

    def __init__(self, commitlog: CommitLog, checks: CheckedUnits) -> None:
        self.commitlog = commitlog
        self.checks = checks

    def get(self, cq: ConsumeQueue | None, queue_id: int, offset: int, max_count: int, tag_codes: set[int] | None,
            max_bytes: int, unit_filter: UnitFilter | None, readable_end: int | None) -> GetResult:
        """See ``MessageStore.get_messages``; ``cq`` None: no such queue."""
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        filtering = bool(tag_codes) or unit_filter is not None
        if max_count <= FEW_ENTRIES and not filtering and readable_end is None and not cq.has_quarantined:
            return self._get_few(cq, queue_id, offset, max_count, max_bytes, lo, hi)
        scan = max(max_count, MAX_FILTER_SCAN) if filtering else max_count
        ent = cq.get(offset, scan)
        if readable_end is not None:  # a queue's units grow in commitlog offset: the readable ones lead
            ent = ent[:int(np.searchsorted(ent["phys"].astype(np.int64) + ent["size"], readable_end, side="right"))]
            if ent.size == 0:
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        phys = ent["phys"].astype(np.int64)
        sizes = ent["size"].astype(np.int64)
        # a queue's units grow in commitlog offset: any deleted by retention lead the window
        first = 0
        if phys.size and phys[0] < self.commitlog.min_offset():
            first = int(np.searchsorted(phys, self.commitlog.min_offset()))
        if tag_codes:
            candidates = first + np.flatnonzero(np.isin(ent["tag"][first:], np.fromiter(tag_codes, dtype=np.int64)))
        elif cq.has_quarantined:
            candidates = first + np.flatnonzero(ent["tag"][first:] != QUARANTINED_TAG)
        else:
            candidates = np.arange(first, ent.size)
        judged = None
        if unit_filter is not None and candidates.size:
            # read the candidates (bounded by bytes) until enough match, keep those the filter matches
            window = candidates[:max(1, int(np.searchsorted(np.cumsum(sizes[candidates]), UNIT_FILTER_SCAN_BYTES,
                                                            side="right")))]
            try:
                read, judged, keep = _judge(self.commitlog.read_units, window, phys, sizes, max_count, unit_filter)
            except LookupError:
                return GetResult(GetStatus.OFFSET_FOUND_NULL, max(cq.min_offset, offset), cq.min_offset, hi)
            unread = ent.size if read.size == candidates.size else int(read[-1]) + 1
            judged_starts = np.zeros(read.size, dtype=np.int64)
            np.cumsum(sizes[read][:-1], out=judged_starts[1:])
            judged_starts = judged_starts[keep]
            candidates = read[keep]
        picked = candidates[:max_count]
        if picked.size and int(sizes[picked].sum()) > max_bytes:
            within = np.cumsum(sizes[picked]) <= max_bytes
            within[0] = True  # always make progress, even past max_bytes
            picked = picked[within]
        # more matches left in the window: resume right after the last one returned
        window_end = unread if judged is not None else ent.size
        scanned_to = offset + (int(picked[-1]) + 1 if picked.size < candidates.size else window_end)
        if picked.size == 0:
            status = GetStatus.NO_MATCHED_MESSAGE if filtering else GetStatus.OFFSET_FOUND_NULL
            return GetResult(status, scanned_to, lo, hi)
        phys, sizes = phys[picked], sizes[picked]
        if judged is not None:  # already read: cut the kept units (a prefix of those matched) out
            data = gather_ranges(np.frombuffer(judged, dtype=np.uint8), judged_starts[:picked.size], sizes).tobytes()
        else:
            try:
                data = self.commitlog.read_units(phys, sizes)
            except LookupError:  # retention removed the file under us: the queue minimum has moved
                return GetResult(GetStatus.OFFSET_FOUND_NULL, max(cq.min_offset, offset), cq.min_offset, hi)
        data, offsets, phys, sizes = self.checks.served(cq.topic, queue_id, data, offset + picked, phys, sizes)
        if not sizes.size:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, scanned_to, lo, hi)
        return GetResult(GetStatus.FOUND, scanned_to, lo, hi, data, offsets, sizes,
                         self.commitlog.max_offset() - int(phys[-1]))

    def _get_few(self, cq: ConsumeQueue, queue_id: int, offset: int, max_count: int, max_bytes: int, lo: int,
                 hi: int) -> GetResult:
        """``get`` of at most ``FEW_ENTRIES`` entries, unfiltered, on a master's queue without quarantined
        entries: the numpy path's answer (tests compare the two) with ``struct`` and plain lists."""
        rows = cq.entry_tuples(offset, max_count)
        first, floor = 0, self.commitlog.min_offset()
        while first < len(rows) and rows[first][0] < floor:  # deleted by retention: they lead the window
            first += 1
        phys: list[int] = []
        sizes: list[int] = []
        total = 0
        for at, size, _ in rows[first:]:
            if sizes and total + size > max_bytes:  # always make progress, even past max_bytes
                break
            phys.append(at)
            sizes.append(size)
            total += size
        scanned_to = offset + (first + len(sizes) if first + len(sizes) < len(rows) else len(rows))
        if not sizes:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, scanned_to, lo, hi)
        try:
            data = self.commitlog.read_few_units(phys, sizes)
        except LookupError:  # retention removed the file under us: the queue minimum has moved
            return GetResult(GetStatus.OFFSET_FOUND_NULL, max(cq.min_offset, offset), cq.min_offset, hi)
        offsets = list(range(offset + first, offset + first + len(sizes)))
        data, offsets, phys, sizes = self.checks.served_few(cq.topic, queue_id, data, offsets, phys, sizes)
        if not sizes:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, scanned_to, lo, hi)
        return GetResult(GetStatus.FOUND, scanned_to, lo, hi, data, offsets, sizes,
                         self.commitlog.max_offset() - phys[-1])
