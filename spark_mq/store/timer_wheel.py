"""The timing wheel (RocketMQ's ``TimerWheel``): one slot per ``timerPrecisionMs`` of time, in a
circular file ``timerwheel`` mapped into memory, each slot the head of a chain of timer-log records::

    0         8        16       24       32
    | time_ms | first  | last   | count  |     int64 each (little-endian)

``time_ms``: the slot time the chain belongs to (a slot is reused every ``slots * precision`` ms, so a
slot whose time is not the one asked for holds nothing for it); ``first``/``last``: timer-log record
numbers; ``count``: records in the chain (0: the slot holds nothing, so a file of zeros is an empty wheel).

A message due at ``d`` goes to the slot of time ``ceil(d / precision) * precision``: delivered when that
time has come, never before ``d``. The wheel has twice the slots ``timerMaxDelaySec`` needs, and the
timer service links only times in ``[read time, read time + span)``, so two pending times never share
a slot. The file is re-created empty and rebuilt from the timer log at every start (one sequential,
vectorised pass), so its content never needs to be trusted after a crash; it lives in a file so that
its size (16 MiB for the default 3 days at 1 s) is page cache, not process memory.

Thread-safety: one owner (the broker's event loop).
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterable
from functools import cache, cached_property
from pathlib import Path

from spark_mq.common.lazy_numpy import np
from spark_mq.store.disk_space import allocate, make_dirs

SLOT_FIELDS = (("time_ms", "<i8"), ("first", "<i8"), ("last", "<i8"), ("count", "<i8"))
SLOT_SIZE = 8 * len(SLOT_FIELDS)


@cache
def slot_type() -> np.dtype:
    """SLOT_FIELDS as a numpy record (made on first use)."""
    return np.dtype(list(SLOT_FIELDS))


def wheel_slots(max_delay_ms: int, precision_ms: int) -> int:
    """Slots for a wheel that holds every time up to ``max_delay_ms`` ahead of a read time that may lag as
    much again (a broker paused for that long): twice the slots the max delay needs."""
    return 2 * -(-max_delay_ms // precision_ms) + 1


def slot_times(deliver_ms: np.ndarray, precision_ms: int) -> np.ndarray:
    """The slot time of each due time: the first multiple of the precision at or after it."""
    return -(-np.asarray(deliver_ms, dtype=np.int64) // precision_ms) * precision_ms


def _allocated_zeros(fd: int, size: int) -> bool:
    """Whether the file open as ``fd`` is ``size`` bytes of allocated blocks that hold no data (as ``allocate``
    leaves them, and a wheel no timer was linked in since): then it is already an empty wheel, and re-creating
    it would only cost the file system's work (a few ms of a start). False when unsure."""
    st = os.fstat(fd)
    if st.st_size != size or st.st_blocks * 512 < size:
        return False
    try:
        os.lseek(fd, 0, os.SEEK_DATA)
    except OSError as e:
        return e.errno == errno.ENXIO  # no data from offset 0 on
    return False


class TimerWheel:
    def __init__(self, path: Path, slots: int, precision_ms: int) -> None:
        """Map ``path``, re-created empty: its content is rebuilt from the log anyway, and a file of zeros is
        an empty wheel (a slot of count 0 holds nothing) that no page of was touched, where clearing the old
        content wrote every page (16 MiB: ~12 ms of a broker's start, and that much written back to disk)."""
        self.path = path
        self.slots_total = slots
        self.precision_ms = precision_ms
        self.span_ms = slots * precision_ms
        make_dirs(path.parent)
        size = slots * SLOT_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not _allocated_zeros(fd, size):
                os.ftruncate(fd, 0)
                # every block allocated up front: a write to a hole of a mapping on a full disk is a SIGBUS
                allocate(fd, size, path)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._untouched = True  # no slot written since the file was re-created: already empty

    @cached_property
    def slots(self) -> np.ndarray:
        """The slots as numpy records, made on first use (a start with no timers imports no numpy); empty once
        closed."""
        return np.zeros(0, dtype=slot_type()) if self._mm.closed else np.frombuffer(self._mm, dtype=slot_type())

    def _index(self, times: np.ndarray | int) -> np.ndarray | int:
        return (times // self.precision_ms) % self.slots_total

    def rebuild(self, chunks: Iterable[tuple[int, np.ndarray]], read_time_ms: int) -> int:
        """Empty every slot, then link the records of ``chunks`` ((first record number, records), in log
        order) due at or after ``read_time_ms``; the records' own ``prev`` already chain them. Returns
        how many are pending."""
        if not self._untouched:
            self.slots[:] = 0
        pending = 0
        for first, recs in chunks:
            times = slot_times(recs["deliver_ms"], self.precision_ms)
            keep = np.flatnonzero(times >= read_time_ms)
            if not keep.size:
                continue
            t, idx = times[keep], first + keep
            uniq, counts = np.unique(t, return_counts=True)
            ends = np.cumsum(counts) - 1
            by_slot = idx[np.argsort(t, kind="stable")]  # by slot time, then record number
            last, first_idx = by_slot[ends], by_slot[ends - counts + 1]
            at = self._index(uniq)
            fresh = self.slots["time_ms"][at] != uniq
            self.slots["time_ms"][at] = uniq
            self.slots["first"][at] = np.where(fresh, first_idx, self.slots["first"][at])
            self.slots["last"][at] = last
            self.slots["count"][at] = np.where(fresh, 0, self.slots["count"][at]) + counts
            pending += int(keep.size)
        self._untouched = pending == 0
        return pending

    def link(self, times: np.ndarray, first: int) -> np.ndarray:
        """Add records ``first, first + 1, ...`` due in slot ``times`` (each inside the wheel's span of the
        read time); returns each one's ``prev``, to be written in its record."""
        self._untouched = False
        n = times.size
        idx = first + np.arange(n, dtype=np.int64)
        order = np.argsort(times, kind="stable")  # by slot, then record number
        t_sorted, i_sorted = times[order], idx[order]
        heads = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
        tails = np.r_[heads[1:], n] - 1
        at = self._index(t_sorted[heads])
        fresh = (self.slots["time_ms"][at] != t_sorted[heads]) | (self.slots["count"][at] == 0)
        prev_sorted = np.r_[-1, i_sorted[:-1]]
        prev_sorted[heads] = np.where(fresh, -1, self.slots["last"][at])
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted
        self.slots["first"][at] = np.where(fresh, i_sorted[heads], self.slots["first"][at])
        self.slots["count"][at] = np.where(fresh, 0, self.slots["count"][at]) + (tails - heads + 1)
        self.slots["time_ms"][at] = t_sorted[heads]
        self.slots["last"][at] = i_sorted[tails]
        return prev

    def slot(self, time_ms: int) -> tuple[int, int]:
        """(last record, count) of the slot of ``time_ms``; count 0 when it holds nothing for that time."""
        s = self.slots[self._index(time_ms)]
        if int(s["time_ms"]) != time_ms:
            return -1, 0
        return int(s["last"]), int(s["count"])

    def delivered(self, time_ms: int) -> None:
        """The slot of ``time_ms`` was delivered: it holds nothing any more."""
        i = self._index(time_ms)
        if int(self.slots["time_ms"][i]) == time_ms:
            self.slots["count"][i] = 0

    def next_pending(self, from_ms: int) -> int | None:
        """The earliest slot time at or after ``from_ms`` holding records (one scan of the wheel: for
        catching up after a pause, not for every tick)."""
        s = self.slots
        times = s["time_ms"][(s["count"] > 0) & (s["time_ms"] >= from_ms)]
        return int(times.min()) if times.size else None

    def flush(self) -> None:
        self._mm.flush()

    def close(self) -> None:
        if "slots" in self.__dict__:
            self.slots = np.zeros(0, dtype=slot_type())
        self._mm.close()
