"""A directory of equally sized ``MappedFile``s forming one contiguous logical byte space.

File ``i`` covers ``[start_i, start_i + size)`` and is named by ``start_i``. Used by the
commitlog and by each consume queue.

A queue with a ``reserve`` checks before each new file that the disk keeps ``reserve`` bytes
free after it: the commitlog leaves room for the consume queue and index files its messages
still need (a write it refuses is refused before anything is stored).

Thread-safety: as ``MappedFile``: one writer, concurrent readers. ``files`` is replaced, never
mutated in place, so a reader iterating an old list never sees a half-updated one; a lock
orders replacements, since the writer adds files while retention deletes them.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from pathlib import Path

from spark_mq.common.errors import CorruptFileError
from spark_mq.store.disk_space import disk_full, free_bytes, make_dirs
from spark_mq.store.mapped_file import FILE_NAME_DIGITS, MappedFile, file_name
from spark_mq.store.store_paths import store_path

log = logging.getLogger(__name__)
_NAME = re.compile(rf"^\d{{{FILE_NAME_DIGITS}}}$")


class MappedFileQueue:
    def __init__(self, directory: Path, file_size: int, reserve: int = 0) -> None:
        self.directory = directory
        self.file_size = file_size
        self.reserve = reserve
        self.files: list[MappedFile] = []
        self._lock = threading.Lock()

    def load(self) -> None:
        """Map every existing file, in offset order; positions are set by recovery."""
        if not self.directory.exists():
            return
        names = sorted(p.name for p in self.directory.iterdir() if _NAME.match(p.name))
        files = [MappedFile(store_path(self.directory, n), self.file_size) for n in names]
        for prev, cur in itertools.pairwise(files):
            if cur.file_from_offset != prev.file_from_offset + self.file_size:
                raise CorruptFileError(
                    str(cur.path), cur.file_from_offset,
                    f"expected the file after {prev.path.name} to start at {prev.file_from_offset + self.file_size}"
                )
        for f in files:
            f.reset_to(f.size)
        self.files = files

    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    def max_offset(self) -> int:
        """Offset just past the last written byte."""
        return self.files[-1].end_offset if self.files else 0

    def flushed_offset(self) -> int:
        for f in reversed(self.files):
            if f.flushed_position:
                return f.file_from_offset + f.flushed_position
        return self.min_offset()

    def create_file(self, start: int) -> MappedFile:
        """Map a new file at ``start`` (a multiple of the file size) and append it."""
        if start % self.file_size:
            raise ValueError(f"file start {start} is not a multiple of {self.file_size}")
        if self.files and start != self.files[-1].file_from_offset + self.file_size:
            raise ValueError(f"new file at {start} does not follow {self.files[-1].path.name}")
        make_dirs(self.directory)
        if self.reserve and free_bytes(self.directory) < self.space_needed():
            raise disk_full(self.directory, self.space_needed(),
                            f"the next file ({self.file_size} bytes) and {self.reserve} bytes kept for logic files")
        mf = MappedFile(store_path(self.directory, file_name(start)), self.file_size)
        with self._lock:
            self.files = [*self.files, mf]
        return mf

    def space_needed(self) -> int:
        """Free bytes a new file needs: itself and the reserve."""
        return self.file_size + self.reserve

    def last_writable(self) -> MappedFile:
        """The file appends go to, creating the next one when the last is full."""
        last = self.last
        if last is None:
            return self.create_file(0)
        if last.is_full():
            return self.create_file(last.file_from_offset + self.file_size)
        return last

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or None if no file covers it."""
        files = self.files
        if not files:
            return None
        i = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    def flush(self) -> int:
        """Flush every file with unflushed bytes; returns the flushed offset."""
        for f in self.files:
            if f.flushed_position < f.wrote_position:
                f.flush()
        return self.flushed_offset()

    def truncate(self, offset: int, durable: bool = False) -> None:
        """Drop everything at and after ``offset``: the file holding it is cut back first (its
        stale tail zeroed, and with ``durable`` fdatasynced), then later files are deleted newest
        first. A crash part way thus leaves contiguous files whose content ends at ``offset``
        (``load`` refuses a gap, and a walk of the commitlog stops at the zeroed bytes)."""
        with self._lock:
            keep = [f for f in self.files if f.file_from_offset <= offset]
            later = self.files[len(keep):]
        last = keep[-1] if keep else None
        if last is not None and offset < last.file_from_offset + last.size:
            pos = offset - last.file_from_offset
            last.zero_from(pos)
            last.reset_to(pos)
            if durable:
                last.sync()
        for f in reversed(later):
            log.debug("truncate: deleting %s (starts past %d)", f.path, offset)
            with self._lock:
                self.files = self.files[:-1]
            f.destroy()

    def delete_first(self, count: int) -> list[MappedFile]:
        """Delete the ``count`` oldest files (never the last one); returns them."""
        with self._lock:
            count = min(count, len(self.files) - 1)
            if count <= 0:
                return []
            gone, self.files = self.files[:count], self.files[count:]
        for f in gone:
            f.destroy()
        return gone

    def expired_count(self, reserved_ms: int, now: float | None = None, force: bool = False) -> int:
        """How many leading files are past their reserved time (all but the last if ``force``)."""
        now = time.time() if now is None else now
        n = 0
        for f in self.files[:-1]:
            if force or (f.last_modified() * 1000 + reserved_ms) <= now * 1000:
                n += 1
            else:
                break
        return n

    def close(self) -> None:
        for f in self.files:
            f.close()
