"""Checks of stored units while the store serves: the damaged ones known, the ones not checked
yet, and the start-up check that runs in the background.

A start checks the last ``checkCRCOnRecoverFiles`` commitlog files before it serves, except in
two cases that leave work to a background thread (``StartupCheck``): after a clean stop whose
queues all ended where they had (``clean_stop``) the whole check of those files, and after a
crash the body CRCs below the checkpoint's safe offset (``DeferredCrc``). Until that thread is
done, units below ``CheckedUnits.checked_from`` are unchecked, and a read checks the ones it
serves itself (header and body CRC) and drops the damaged ones, so none is ever served.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from itertools import accumulate

from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.check import served_fault_at, served_faults
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue_store import ConsumeQueueStore
from spark_mq.store.deferred_crc import DeferredCrc
from spark_mq.store.recovery import check_region

log = logging.getLogger(__name__)

# the background start-up check waits this long first: its Python loop holds the GIL, and every
# I/O wake-up of the starting broker (registration, first connections and pulls) would wait up to
# a switch interval for it; reads check unchecked units themselves meanwhile
STARTUP_CHECK_DELAY_S = 2.0


class CheckedUnits:
    """The damaged units found (commitlog offsets, never served), and the offset below which units
    are not checked: older than the last checked files, or their background check still runs
    (the others were checked at start or written since).

    Thread-safety: reads call ``served`` from any thread without a lock; the start-up check,
    rebuilds and truncation (under the put lock) move ``checked_from`` and add damaged units. A
    read that sees a stale ``checked_from`` only checks more than it needs to.
    """

    def __init__(self, commitlog: CommitLog) -> None:
        self.commitlog = commitlog
        self.damaged: set[int] = set()
        self.checked_from = 0

    def found(self, offsets: Iterable[int]) -> None:
        """Damaged units found by a check or a rebuild."""
        self.damaged.update(offsets)

    def truncated(self, end: int, checked_from: int) -> None:
        """The commitlog now ends at ``end``: units from there are gone, ``checked_from`` as before the cut."""
        self.damaged = {p for p in self.damaged if p < end}
        self.checked_from = min(checked_from, end)

    def served(self, topic: str, queue_id: int, data: bytes, offsets: np.ndarray, phys: np.ndarray,
               sizes: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
        """A read's units (back to back in ``data``, commitlog order), without the damaged ones when
        some are unchecked."""
        if int(phys[0]) >= self.checked_from:
            return data, offsets, phys, sizes
        bad = served_faults(data, sizes, queue_id, offsets, phys)
        if not bad.any():
            return data, offsets, phys, sizes
        ends = np.cumsum(sizes)
        for i in np.flatnonzero(bad).tolist():
            self._not_served(topic, queue_id, int(offsets[i]), int(phys[i]))
        keep = np.flatnonzero(~bad)
        data = b"".join(data[int(ends[i]) - int(sizes[i]) : int(ends[i])] for i in keep.tolist())
        return data, offsets[keep], phys[keep], sizes[keep]

    def served_few(self, topic: str, queue_id: int, data: bytes, offsets: list[int], phys: list[int],
                   sizes: list[int]) -> tuple[bytes, list[int], list[int], list[int]]:
        """``served`` of a few units given as plain lists: one ``struct`` check a unit, no numpy."""
        if phys[0] >= self.checked_from:
            return data, offsets, phys, sizes
        starts = list(accumulate(sizes, initial=0))
        keep = []
        for i, (start, size, offset, at) in enumerate(zip(starts, sizes, offsets, phys, strict=False)):
            if served_fault_at(data, start, size, queue_id, offset, at):
                self._not_served(topic, queue_id, offset, at)
            else:
                keep.append(i)
        if len(keep) == len(sizes):
            return data, offsets, phys, sizes
        data = b"".join(data[starts[i] : starts[i + 1]] for i in keep)
        return data, [offsets[i] for i in keep], [phys[i] for i in keep], [sizes[i] for i in keep]

    def _not_served(self, topic: str, queue_id: int, queue_offset: int, phys: int) -> None:
        """A read found the unit at ``phys`` damaged: known from now on, said once."""
        if phys not in self.damaged:
            self.damaged.add(phys)
            mf = self.commitlog.files.find(phys)
            log.warning("store: %s:%d@%d: the unit at commitlog offset %d (file %s) is damaged: not served",
                        topic, queue_id, queue_offset, phys, mf.path.name if mf else "-")


class StartupCheck:
    """The part of the start-up check a start leaves to a background thread (at most one per start).

    ``region`` or ``deferred_crcs`` prepares it at start, ``start`` runs it once the store serves,
    ``stop`` ends it early (truncation and shutdown: it would judge entries they change; reads
    keep checking instead). ``rebuild_next_start``: the check found what only a start can repair
    (a broken chain, units without entries), so shutdown leaves no clean-stop record.

    Thread-safety: ``region``/``deferred_crcs``/``start`` from the store's start; ``stop`` from
    shutdown or a truncation (under the put lock); the check itself runs on its own thread.
    """

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueStore, checks: CheckedUnits,
                 check_crc: bool) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.checks = checks
        self.check_crc = check_crc
        self.thread: threading.Thread | None = None
        self.rebuild_next_start = False
        self._stop = threading.Event()

    def region(self, start: int, end: int) -> None:
        """Check the units of ``[start, end)`` and the consume queues against them (after a clean stop)."""
        self.checks.checked_from = end
        self.thread = threading.Thread(target=self._check_region, args=(start, end), name="startup-check",
                                       daemon=True)

    def deferred_crcs(self, deferred: DeferredCrc, checked_from: int) -> None:
        """Check the body CRCs a start after a crash deferred; ``checked_from`` once done."""
        self.checks.checked_from = deferred.below
        self.thread = threading.Thread(target=self._check_crcs, args=(deferred, checked_from),
                                       name="startup-check", daemon=True)

    def start(self) -> None:
        if self.thread is not None:
            self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join()

    def _check_region(self, start: int, end: int) -> None:
        if self._stop.wait(STARTUP_CHECK_DELAY_S):
            return
        try:
            damaged, self.rebuild_next_start = check_region(self.commitlog, list(self.queues.values()), start, end,
                                                            self.check_crc, self._stop)
        except (LookupError, ValueError, OSError) as e:  # e.g. retention deleted a file being checked
            log.warning("store: start-up check of commitlog [%d, %d) stopped: %s; reads keep checking those units",
                        start, end, e)
            return
        if not self._stop.is_set():
            self.checks.found(damaged)
            self.checks.checked_from = start

    def _check_crcs(self, deferred: DeferredCrc, checked_from: int) -> None:
        if self._stop.wait(STARTUP_CHECK_DELAY_S):
            return
        try:
            damaged = deferred.check(self.commitlog, dict(self.queues.items()), self._stop)
        except (LookupError, ValueError, OSError) as e:  # e.g. retention deleted a file being checked
            log.warning("store: start-up check of the body CRCs below commitlog offset %d stopped: %s; reads keep "
                        "checking those units", deferred.below, e)
            return
        if damaged is not None:
            self.checks.found(damaged)
            self.checks.checked_from = checked_from
