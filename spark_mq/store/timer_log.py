"""The timer log (RocketMQ's ``TimerLog``): one fixed-size record per timer message enqueued, append
only, in files of ``mappedFileSizeTimerLog`` bytes under ``timerlog/``.

A record points at the parked unit in the commitlog and links to the record before it in the same
timing-wheel slot, so a slot's records are found by walking back from the slot's last one
(``timer_wheel.py`` keeps first/last/count per slot): pending timers cost these 40 bytes on disk each,
not memory. Positions are record numbers (byte offset / 40), global across files::

    0        8           16         20      24           32             40
    | prev   | offset_py | size_py  | magic | deliver_ms | queue_offset |
      int64    int64       int32      int32   int64        int64          (little-endian)

``prev``: the previous record of the slot, -1 for a slot's first; ``offset_py``/``size_py``: the unit in
the commitlog; ``magic``: a written record (zeros were never written); ``deliver_ms``: when it is due;
``queue_offset``: its offset in the timer topic's consume queue (recovery re-reads the queue from the
first pending one when the log cannot be trusted).

Thread-safety: one owner (the broker's event loop).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

from spark_mq.common.config import TIMER_LOG_RECORD_SIZE
from spark_mq.common.lazy_numpy import np
from spark_mq.store.mapped_file_queue import MappedFileQueue

RECORD_FIELDS = (("prev", "<i8"), ("offset_py", "<i8"), ("size_py", "<i4"), ("magic", "<i4"),
                 ("deliver_ms", "<i8"), ("queue_offset", "<i8"))
RECORD_SIZE = TIMER_LOG_RECORD_SIZE  # RECORD_FIELDS' bytes
RECORD_MAGIC = 0x54494D52  # "TIMR"
_WORDS = RECORD_SIZE // 8  # a record as int64 words: prev is word 0
CHUNK_RECORDS = 1 << 18  # records per chunk a rebuild holds in memory (10 MiB)


@cache
def record_type() -> np.dtype:
    """RECORD_FIELDS as a numpy record (made on first use)."""
    record = np.dtype(list(RECORD_FIELDS))
    assert record.itemsize == RECORD_SIZE, "RECORD_FIELDS and TIMER_LOG_RECORD_SIZE disagree"
    return record


def records(offset_py: np.ndarray, size_py: np.ndarray, deliver_ms: np.ndarray, queue_offset: np.ndarray,
            prev: np.ndarray) -> np.ndarray:
    """Records for the given columns (all of one length)."""
    out = np.zeros(offset_py.size, dtype=record_type())
    out["prev"], out["offset_py"], out["size_py"] = prev, offset_py, size_py
    out["magic"], out["deliver_ms"], out["queue_offset"] = RECORD_MAGIC, deliver_ms, queue_offset
    return out


class TimerLog:
    """Append-only records in a ``MappedFileQueue``; reads by record number."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.files = MappedFileQueue(directory, file_size)
        self.per_file = file_size // RECORD_SIZE
        self._words: dict[int, memoryview] = {}  # file start -> its bytes as int64 words (chain walks)
        self._latest: dict[int, int] = {}  # full file start -> the latest due time in it (full files never change)

    def load(self, end: int) -> None:
        """Map the files and keep the records below ``end`` (the checkpointed end): later ones may be torn
        or unflushed, and their messages are enqueued again from the consume queue."""
        self.files.load()
        end = min(max(end, self.min_index), self.end_in_files)
        self.files.truncate(end * RECORD_SIZE, durable=True)

    @property
    def end_in_files(self) -> int:
        """Records the mapped files can hold up to (before a load truncates them)."""
        return self.files.max_offset() // RECORD_SIZE

    @property
    def min_index(self) -> int:
        return self.files.min_offset() // RECORD_SIZE

    @property
    def end(self) -> int:
        """The next record's number."""
        return self.files.max_offset() // RECORD_SIZE

    def append(self, recs: np.ndarray) -> int:
        """Append ``recs``; returns the first one's number."""
        first = self.end
        done = 0
        while done < recs.size:
            mf = self.files.last_writable()
            room = mf.remaining // RECORD_SIZE
            mf.append(recs[done:done + room].tobytes())
            done += min(room, recs.size - done)
        return first

    def read(self, index: np.ndarray) -> np.ndarray:
        """The records numbered ``index`` (each below ``end``), in that order."""
        index = np.asarray(index, dtype=np.int64)
        out = np.empty(index.size, dtype=record_type())
        file_no = (index - self.min_index) // self.per_file
        for f in np.unique(file_no).tolist():
            mf = self.files.files[f]
            rows = np.flatnonzero(file_no == f)
            out[rows] = mf.buf.view(record_type())[index[rows] - mf.file_from_offset // RECORD_SIZE]
        return out

    def chain(self, last: int, count: int) -> np.ndarray:
        """The record numbers of a slot, first to last: ``count`` records back from ``last`` by ``prev``.
        One step per record: the only per-timer Python in the wheel, a word read from the mapping."""
        out = np.empty(count, dtype=np.int64)
        i, n = last, 0
        size = self.files.file_size
        while i >= 0 and n < count:
            out[n] = i
            n += 1
            start = i * RECORD_SIZE // size * size
            words = self._words.get(start)
            if words is None:
                words = self._words[start] = self.files.find(start).mv.cast("q")  # type: ignore[union-attr]
            i = words[(i - start // RECORD_SIZE) * _WORDS]
        return out[:n][::-1]

    def chunks(self, start: int, end: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first record number, records) for the records in ``[start, end)``, ``CHUNK_RECORDS`` at a time
        (copies)."""
        for mf in self.files.files:
            lo = mf.file_from_offset // RECORD_SIZE
            a, b = max(start, lo), min(end, lo + mf.wrote_position // RECORD_SIZE)
            for c in range(a, b, CHUNK_RECORDS):
                yield c, mf.buf.view(record_type())[c - lo:min(b, c + CHUNK_RECORDS) - lo].copy()

    def first_queue_offset(self) -> int | None:
        """The consume-queue offset of the oldest record kept, None for an empty log."""
        if self.end <= self.min_index:
            return None
        return int(self.read(np.array([self.min_index]))["queue_offset"][0])

    def flush(self) -> int:
        """Make every record appended durable; returns the end flushed."""
        return self.files.flush() // RECORD_SIZE

    def delete_files_before(self, done_ms: int) -> int:
        """Delete leading full files whose records were all due before ``done_ms`` (delivered); returns how
        many went."""
        count = 0
        for mf in self.files.files[:-1]:
            if not mf.is_full():
                break
            latest = self._latest.get(mf.file_from_offset)
            if latest is None:
                latest = self._latest[mf.file_from_offset] = int(mf.buf.view(record_type())["deliver_ms"].max())
            if latest >= done_ms:
                break
            count += 1
        for mf in self.files.files[:count]:
            self._words.pop(mf.file_from_offset, None)  # before the unmap, which our views would hold up
            self._latest.pop(mf.file_from_offset, None)
        self.files.delete_first(count)
        return count

    def clear(self) -> None:
        """Delete every record (the log is rebuilt from the consume queue)."""
        self._words.clear()
        self._latest.clear()
        self.files.truncate(0, durable=True)

    def close(self) -> None:
        self._words.clear()
        self.files.close()
