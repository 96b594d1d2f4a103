"""A consume queue: the index of one topic queue into the commitlog.

Entry ``i`` (the message at queue offset ``i``) is 20 bytes at logical byte ``i * 20``::

    +----------------------+-------------+----------------------+
    | commitlog offset (8) | size (4)    | tag hash code (8)    |
    +----------------------+-------------+----------------------+

A quarantined entry (its unit failed a check at start-up) keeps its place, so its queue offset
is never given to another message, but its tag hash is ``QUARANTINED_TAG``: no Java
``String.hashCode`` (an int32) equals it, so reads skip the entry like a filtered-out tag.

Files hold ``entries_per_file`` entries and are named by the logical byte offset of their
first entry (RocketMQ ``ConsumeQueue``). Entries are read and written as numpy structured
arrays over the mapping, a batch at a time.

Thread-safety: one writer (the store's put lock or recovery); readers read only below
``max_offset``, which moves after the entries are in place.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

from spark_mq.common.errors import CorruptFileError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.layout import fields_struct
from spark_mq.store.mapped_file import MappedFile
from spark_mq.store.mapped_file_queue import MappedFileQueue

ENTRY_FIELDS = (("phys", ">i8"), ("size", ">i4"), ("tag", ">i8"))
ENTRY_STRUCT = fields_struct(ENTRY_FIELDS)  # for a lone entry
ENTRY_SIZE = ENTRY_STRUCT.size  # 20
_SIZE_AT = fields_struct(ENTRY_FIELDS[1:2]).unpack_from  # an entry's size field, 8 bytes in
QUARANTINED_TAG = -(1 << 62)  # outside the int32 range of tag hash codes


@cache
def entry_record() -> np.dtype:
    """ENTRY_FIELDS as a numpy record (made on first use)."""
    return np.dtype(list(ENTRY_FIELDS))


def _entries(mf: MappedFile) -> np.ndarray:
    return mf.buf.view(entry_record()) if mf.buf.size else np.zeros(0, dtype=entry_record())


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: Path, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(directory, file_size)
        self.entries_per_file = file_size // ENTRY_SIZE
        self.min_offset = 0  # first queue offset still served
        self.max_offset = 0  # next queue offset to be written
        # whether reads must look for quarantined entries: set when entries are marked (those an
        # earlier run marked count once this run's start-up check has seen them; until then reads
        # check the units themselves)
        self.has_quarantined = False

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}:{self.queue_id} [{self.min_offset}, {self.max_offset}))"

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Map the files and find the end: the first all-zero entry after the last file's start."""
        self.files.load()
        if not self.files.files:
            return
        first = self.files.first
        assert first is not None
        base = first.file_from_offset // ENTRY_SIZE
        self.min_offset = base + _first_valid(first)
        end = self.files.max_offset() // ENTRY_SIZE
        for mf in reversed(self.files.files):
            used = _used_count(mf)
            mf.reset_to(used * ENTRY_SIZE)
            if used:
                end = mf.file_from_offset // ENTRY_SIZE + used
                break
            end = mf.file_from_offset // ENTRY_SIZE
        self.max_offset = end
        self.min_offset = min(self.min_offset, self.max_offset)

    # -- writing ---------------------------------------------------------------------------
    def put_batch(self, queue_offset: int, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Write entries for queue offsets ``queue_offset ...``.

        Entries already present (a redispatch after recovery) are skipped; a gap is an error
        because it would mean messages the queue can never serve.
        """
        n = phys.size
        skip = self.max_offset - queue_offset
        if skip >= n:
            return
        if skip < 0:
            if self.files.files:
                raise CorruptFileError(
                    str(self.files.directory), queue_offset * ENTRY_SIZE,
                    f"entry for queue offset {queue_offset} would leave a gap after {self.max_offset}",
                )
            self._start_at(queue_offset)
            skip = 0
        done = skip
        while done < n:
            logical = queue_offset + done
            mf = self._file_for_write(logical)
            slot = logical - mf.file_from_offset // ENTRY_SIZE
            take = min(n - done, self.entries_per_file - slot)
            ent = _entries(mf)[slot : slot + take]
            ent["phys"] = phys[done : done + take]
            ent["size"] = sizes[done : done + take]
            ent["tag"] = tags[done : done + take]
            mf.wrote_position = (slot + take) * ENTRY_SIZE
            done += take
            self.max_offset = logical + take

    def quarantine(self, queue_offsets: np.ndarray) -> None:
        """Mark the entries at ``queue_offsets`` (all below ``max_offset``) as never to be served."""
        self.has_quarantined |= bool(queue_offsets.size)
        for mf in self.files.files:
            first = mf.file_from_offset // ENTRY_SIZE
            mine = queue_offsets[(queue_offsets >= first) & (queue_offsets < first + self.entries_per_file)]
            if mine.size:
                _entries(mf)["tag"][mine - first] = QUARANTINED_TAG

    def _start_at(self, queue_offset: int) -> None:
        """First write into an empty queue at a non-zero offset (its earlier files are gone)."""
        file_bytes = self.files.file_size
        start = (queue_offset * ENTRY_SIZE) // file_bytes * file_bytes
        mf = self.files.create_file(start)
        mf.reset_to(queue_offset * ENTRY_SIZE - start)
        self.min_offset = self.max_offset = queue_offset

    def _file_for_write(self, logical: int) -> MappedFile:
        mf = self.files.find(logical * ENTRY_SIZE)
        if mf is None:
            last = self.files.last
            start = 0 if last is None else last.file_from_offset + self.files.file_size
            mf = self.files.create_file(start)
        return mf

    def truncate(self, queue_offset: int) -> None:
        """Drop entries at and after ``queue_offset``."""
        if queue_offset >= self.max_offset:
            return
        self.files.truncate(queue_offset * ENTRY_SIZE)
        self.max_offset = max(queue_offset, self.min_offset)

    def truncate_past(self, commitlog_end: int) -> None:
        """Drop trailing entries whose unit does not end inside the commitlog."""
        lo = self.min_offset
        hi = self.max_offset
        last = self.entry(hi - 1) if hi > lo else None
        if last is None or last[0] + last[1] <= commitlog_end:
            return  # entries grow in commitlog offset: the last one inside means all are (a clean start)
        while hi > lo:  # walk back a file at a time; normally only the last few entries are bad
            chunk = self.get(max(lo, hi - self.entries_per_file), hi - max(lo, hi - self.entries_per_file))
            good = (chunk["phys"] + chunk["size"]) <= commitlog_end
            if good.all():
                break
            bad = np.flatnonzero(~good)
            hi = max(lo, hi - self.entries_per_file) + int(bad[0])
        self.truncate(hi)

    # -- reading ---------------------------------------------------------------------------
    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """Entry ``queue_offset`` as (phys, size, tag), None outside ``[min_offset, max_offset)``: one
        ``struct`` read, for the callers that want one entry (no numpy's fixed costs, none imported)."""
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        mf = self.files.find(queue_offset * ENTRY_SIZE)
        if mf is None:
            return None
        return ENTRY_STRUCT.unpack_from(mf.mv, queue_offset * ENTRY_SIZE - mf.file_from_offset)

    def _spans(self, queue_offset: int, count: int) -> Iterator[tuple[MappedFile, int, int]]:
        """(file, first slot, entries) of each file holding entries ``[queue_offset, queue_offset + count)``,
        clamped to ``[min_offset, max_offset)``; stops at a file that is gone."""
        pos = max(queue_offset, self.min_offset)
        stop = min(queue_offset + count, self.max_offset)
        while pos < stop:
            mf = self.files.find(pos * ENTRY_SIZE)
            if mf is None:
                return
            slot = pos - mf.file_from_offset // ENTRY_SIZE
            take = min(stop - pos, self.entries_per_file - slot)
            yield mf, slot, take
            pos += take

    def entry_tuples(self, queue_offset: int, count: int) -> list[tuple[int, int, int]]:
        """``get`` as (phys, size, tag) tuples, by ``struct``: for a read of a few entries (no numpy's fixed
        costs; a restarted broker's first pull imports none)."""
        out: list[tuple[int, int, int]] = []
        for mf, slot, take in self._spans(queue_offset, count):
            out += ENTRY_STRUCT.iter_unpack(mf.mv[slot * ENTRY_SIZE : (slot + take) * ENTRY_SIZE])
        return out

    def get(self, queue_offset: int, count: int) -> np.ndarray:
        """A copy of up to ``count`` entries from ``queue_offset`` (fewer at the end)."""
        parts = [_entries(mf)[slot : slot + take] for mf, slot, take in self._spans(queue_offset, count)]
        if not parts:
            return np.zeros(0, dtype=entry_record())
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int], int | None]) -> int:
        """First queue offset whose message was stored at or after ``timestamp`` (ms);
        ``max_offset`` if none. Binary search: one commitlog read per probe."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.entry(mid)
            ts = store_time_of(entry[0]) if entry is not None else None
            if ts is None:  # unit no longer in the commitlog: treat as older than anything
                lo = mid + 1
            elif ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def last_phys(self) -> int:
        """Commitlog offset of the newest entry's unit, -1 if empty."""
        last = self.entry(self.max_offset - 1)
        return -1 if last is None else last[0]

    # -- retention -------------------------------------------------------------------------
    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move ``min_offset`` past entries whose unit was deleted from the commitlog."""
        self.min_offset = self.first_offset_at_or_after(commitlog_min)

    def first_offset_at_or_after(self, phys: int) -> int:
        """First queue offset whose unit starts at or after commitlog offset ``phys`` (entries'
        commitlog offsets grow with queue offset, so this is a binary search)."""
        lo, hi = self.min_offset, self.max_offset
        first = self.entry(lo)
        if first is not None and first[0] >= phys:
            return lo  # the usual answer at start and after retention: no search
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.entry(mid)
            if entry is None or entry[0] < phys:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def delete_files_below(self, commitlog_min: int) -> int:
        """Delete leading files whose every entry points below ``commitlog_min``."""
        count = 0
        for mf in self.files.files[:-1]:
            ent = _entries(mf)
            used = mf.wrote_position // ENTRY_SIZE
            if used and int(ent["phys"][used - 1]) + int(ent["size"][used - 1]) <= commitlog_min:
                count += 1
            else:
                break
        self.files.delete_first(count)
        first = self.files.first
        if first is not None:
            self.min_offset = max(self.min_offset, first.file_from_offset // ENTRY_SIZE)
        self.correct_min_offset(commitlog_min)
        return count

    def flush(self) -> None:
        self.files.flush()

    def destroy(self) -> None:
        """Delete every file of this queue and its directory."""
        for mf in self.files.files:
            mf.destroy()
        self.files.files = []
        shutil.rmtree(self.files.directory, ignore_errors=True)
        self.min_offset = self.max_offset = 0

    def holds(self, queue_offset: int, phys: int) -> bool:
        """Whether entry ``queue_offset`` is live and points at commitlog offset ``phys``."""
        entry = self.entry(queue_offset)
        return entry is not None and entry[0] == phys and entry[2] != QUARANTINED_TAG

    def close(self) -> None:
        self.files.close()


_SCAN_CHUNK = 4096  # entries looked at first when searching for the first written one


def _first_written(mf: MappedFile) -> int | None:
    """Index of the first entry of ``mf`` with a positive size, None if none. Normally the first entry
    is written (one ``struct`` read answers: no numpy at a start); else a forward scan in growing chunks."""
    if mf.size >= ENTRY_SIZE and _SIZE_AT(mf.mv, 8)[0] > 0:
        return 0
    sizes = _entries(mf)["size"]
    pos, step = 0, _SCAN_CHUNK
    while pos < sizes.size:
        nz = np.flatnonzero(sizes[pos : pos + step] > 0)
        if nz.size:
            return pos + int(nz[0])
        pos += step
        step *= 4
    return None


def _used_count(mf: MappedFile) -> int:
    """Entries written in a file: the end of the run of written (positive size) entries that
    starts at the first one. Entries are appended in order into a zeroed file, so a binary
    search finds it: O(log n) a file rather than a scan of every entry, which made a start
    read every consume queue's last file whole.

    Entries past the checkpoint's safe offset may have holes after a power loss; recovery
    cuts every queue back to the safe offset, and the entries below it are all on disk."""
    first = _first_written(mf)
    if first is None:
        return 0
    mv = mf.mv
    lo, hi = first + 1, mf.size // ENTRY_SIZE  # entry lo - 1 is written; find the first zero size in [lo, hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if _SIZE_AT(mv, mid * ENTRY_SIZE + 8)[0] > 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _first_valid(mf: MappedFile) -> int:
    first = _first_written(mf)
    return 0 if first is None else first
