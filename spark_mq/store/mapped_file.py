"""One fixed-size file mapped into memory, named by the offset of its first byte.

Positions: ``wrote_position`` is how far appends have filled the mapping; ``flushed_position``
how far ``fdatasync`` has made durable. We write straight into the page cache, so RocketMQ's
separate commit position (for its off-heap write buffer) is always the wrote position.

Thread-safety: one writer at a time (the owner serialises appends); readers may read any
range below ``wrote_position`` concurrently.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
from functools import cached_property
from pathlib import Path

from spark_mq.common.errors import CorruptFileError, DiskFullError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit import native
from spark_mq.store.disk_space import allocate, is_allocated

log = logging.getLogger(__name__)

FILE_NAME_DIGITS = 20
_HAS_PWRITE = hasattr(os, "pwrite")  # POSIX; elsewhere appends copy into the mapping


def file_name(offset: int) -> str:
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def _allocate_new(fd: int, size: int, path: Path) -> None:
    """Allocate a file just created; on a full disk remove it again (it holds nothing)."""
    try:
        allocate(fd, size, path)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _allocate_sparse(fd: int, size: int, path: Path) -> None:
    """Fill the holes of a file written sparse (by a version before allocation): best effort,
    a file that cannot get its blocks is still mapped for reading."""
    try:
        allocate(fd, size, path, empty=False)
    except DiskFullError as e:
        log.warning("%s is sparse and the disk cannot fill it (%s): do not write to this store before "
                    "freeing space", path, e)


class MappedFile:
    def __init__(self, path: Path, size: int, file_from_offset: int | None = None) -> None:
        """Map ``path`` with every disk block allocated (see ``disk_space``); its name gives its
        offset unless one is given. Raises ``DiskFullError`` (and leaves no file) if a new file
        does not fit the disk."""
        self.path = path
        self.size = size
        self.file_from_offset = int(path.name) if file_from_offset is None else file_from_offset
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            existing = os.fstat(fd).st_size
            if existing == 0:
                _allocate_new(fd, size, path)
            elif existing != size:
                raise CorruptFileError(
                    str(path), existing, f"file is {existing} bytes but the configured size is {size}; "
                    "was the file size setting changed after the store was created?"
                )
            elif not is_allocated(fd, size):
                _allocate_sparse(fd, size, path)
            self._mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.mv = memoryview(self._mm)
        self.wrote_position = 0
        self.flushed_position = 0

    @cached_property
    def buf(self) -> np.ndarray:
        """The mapping as uint8 for numpy's readers, made on first use (a start that reads its files with
        ``mv`` and ``struct`` only never imports numpy); empty once closed."""
        return np.frombuffer(self._mm, dtype=np.uint8) if self._fd >= 0 else np.zeros(0, dtype=np.uint8)

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"

    @property
    def end_offset(self) -> int:
        """Global offset just past the written bytes."""
        return self.file_from_offset + self.wrote_position

    @property
    def remaining(self) -> int:
        return self.size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.size

    def append(self, data: bytes | memoryview) -> int:
        """Write ``data`` at the wrote position; returns where it started.

        With ``pwrite``, not a copy into the mapping: the kernel copies it into the page cache the mapping
        shares, once and without the GIL, where a copy into the mapping faults each page in (measured:
        0.31 -> 0.17 CPU-us per 1 KiB unit appended, 0.065 -> 0.042 per 100 B one; the first read
        through the mapping then faults the page in, ~0.01 us per unit).
        What ``pwrite`` does not write (none of it without ``pwrite``, or after an error) is copied
        into the mapping."""
        pos = self.wrote_position
        if pos + len(data) > self.size:
            raise ValueError(f"{self.path.name}: {len(data)} bytes do not fit at {pos} of {self.size}")
        return self.appended(data, self._pwrite(data, pos))

    @property
    def pwrite_fd(self) -> int:
        """The descriptor a caller's own ``pwrite`` of an append goes to (then ``appended`` counts it): the
        native one-message append's; -1 where appends are copied into the mapping (no ``pwrite``, or closed)."""
        return self._fd if _HAS_PWRITE else -1

    def appended(self, data: bytes | memoryview, wrote: int) -> int:
        """Count ``data`` as appended at the wrote position (the caller checked it fits), its first ``wrote``
        bytes written there already by a ``pwrite``: the rest is copied into the mapping. Returns where it
        started."""
        pos = self.wrote_position
        end = pos + len(data)
        if wrote < len(data):
            self._mm[pos + wrote:end] = memoryview(data)[wrote:]
        self.wrote_position = end
        return pos

    def _pwrite(self, data: bytes | memoryview, pos: int) -> int:
        """How many of ``data``'s first bytes ``pwrite`` wrote at ``pos``: all, unless it failed or is missing."""
        if not _HAS_PWRITE:
            return 0
        view = memoryview(data).cast("B")
        done = 0
        try:
            while done < len(view):  # one call but for a short write (a signal, a full disk)
                wrote = os.pwrite(self._fd, view[done:] if done else view, pos + done)
                if wrote <= 0:
                    break
                done += wrote
        except OSError as e:
            log.debug("%s: pwrite at %d failed (%s): copying into the mapping", self.path.name, pos + done, e)
        return done

    def close_tail(self, marker: bytes) -> None:
        """Write ``marker`` at the wrote position and count the rest of the file as used."""
        self.append(marker)
        self.wrote_position = self.size

    def flush(self) -> int:
        """Make everything written so far durable; returns the new flushed position.

        ``os.fdatasync`` writes back the mapping's dirty pages and, unlike ``mmap.flush``,
        releases the GIL while the disk works.
        """
        target = self.wrote_position
        if self.flushed_position < target:
            os.fdatasync(self._fd)
            self.flushed_position = target
        return self.flushed_position

    def sync(self) -> None:
        """fdatasync whatever was written, whatever the positions say (after zeroing a tail)."""
        os.fdatasync(self._fd)

    def reset_to(self, position: int) -> None:
        """Set wrote and flushed positions (after recovery or truncation)."""
        self.wrote_position = position
        self.flushed_position = position

    def zero_from(self, position: int, clean_run: int = 8 << 20, chunk: int = 1 << 20) -> None:
        """Zero stale bytes after ``position`` so no old unit can ever be walked into again.

        Stops after ``clean_run`` bytes of zeros: a torn write never reaches further than one
        append, and touching the rest of a large file would only cost I/O.
        """
        pos = position
        clean = 0
        while pos < self.size and clean < clean_run:
            end = min(self.size, pos - pos % chunk + chunk)
            if self._nonzero(pos, end):
                self._mm[pos:end] = bytes(end - pos)
                clean = 0
            else:
                clean += end - pos
            pos = end

    def _nonzero(self, pos: int, end: int) -> bool:
        """Whether ``[pos, end)`` holds a non-zero byte: the native library's scan (no numpy at a start), else
        numpy's."""
        if native.FIRST_NONZERO is None:
            return bool(self.buf[pos:end].any())
        view = (ctypes.c_char * (end - pos)).from_buffer(self._mm, pos)
        try:
            return native.FIRST_NONZERO(ctypes.addressof(view), end - pos) >= 0
        finally:
            del view  # the mapping's export: close() cannot unmap while one is held

    def last_modified(self) -> float:
        return os.stat(self.path).st_mtime

    def close(self) -> None:
        """Unmap. A reader still holding a view keeps reading valid memory: the mapping then
        goes when the last view does (reference counting, as RocketMQ's ReferenceResource)."""
        fd, self._fd = self._fd, -1  # from here on a buf not made yet is an empty one
        if "buf" in self.__dict__:
            self.buf = np.zeros(0, dtype=np.uint8)
        self.mv = memoryview(b"")
        try:
            self._mm.close()
        except BufferError:
            log.debug("%s still has readers; unmapped when they finish", self.path.name)
        if fd >= 0:
            os.close(fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)
