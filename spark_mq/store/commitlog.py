"""The commitlog: every message of every topic, appended to one sequence of mapped files.

A unit never spans two files: when a file cannot hold the next unit plus room for a blank
marker, the tail gets a blank unit and the write moves to a fresh file. A batch is encoded
once per file it lands in and copied with one memcpy per file.

A batch is all or nothing: when the disk cannot take the next file (``DiskFullError``), what the
batch wrote into earlier files is taken back before the error propagates.

Thread-safety: ``append_batch`` must be serialised by the caller (the store's put lock);
reads may run concurrently with appends.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from spark_mq.common.errors import DiskFullError, MessageValidationError, ReplicationError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.unit.chain import follow_chain
from spark_mq.common.unit.check import unit_faults
from spark_mq.common.unit.encode import (
    DispatchInfo,
    OneUnitWriter,
    blank_unit,
    encode_batch,
    unit_sizes,
    units_total,
)
from spark_mq.common.unit.layout import END_FILE_MIN_BLANK_LENGTH, MESSAGE_MAGIC, MIN_UNIT_SIZE, SIZE_MAGIC
from spark_mq.store.mapped_file_queue import MappedFileQueue


class AppendResult(NamedTuple):
    """Where the units of one batch went (one per put: a named tuple, cheaper to build than a frozen dataclass)."""

    physical_offsets: np.ndarray  # int64, start of each unit
    sizes: np.ndarray  # int64, size of each unit
    end_offset: int  # commitlog offset just past the last unit
    dispatch: DispatchInfo | None = None  # the encoder's, when asked for and the batch fit the last file's room
    units: bytes | memoryview | None = None  # the units as written, when the batch fit the last file's room


class CommitLog:
    def __init__(self, directory: Path, file_size: int, reserve: int = 0) -> None:
        """``reserve``: bytes a roll to a new file leaves free on the disk (see ``MappedFileQueue``)."""
        self.files = MappedFileQueue(directory, file_size, reserve)
        self._one = OneUnitWriter()  # a lone message's append (under the put lock, as every append)

    @property
    def file_size(self) -> int:
        return self.files.file_size

    def load(self) -> None:
        self.files.load()

    def min_offset(self) -> int:
        return self.files.min_offset()

    def max_offset(self) -> int:
        return self.files.max_offset()

    def append_batch(
        self, batch: MessageBatch, queue_offset: int, store_timestamp: int, store_host: bytes,
        key_prefix: int | None = None,
    ) -> AppendResult:
        """Append every message of ``batch``; units take consecutive queue offsets from
        ``queue_offset``. One encode and one memcpy per file touched. ``key_prefix``: see
        ``encode_batch`` (the dispatch info is given only for a batch that fits the last file's room)."""
        sizes = unit_sizes(batch)
        total = units_total(sizes)
        largest = total if total + END_FILE_MIN_BLANK_LENGTH <= self.file_size else int(sizes.max())
        if largest + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise MessageValidationError(
                f"a {largest}-byte unit cannot fit a {self.file_size}-byte commitlog file: "
                "shorten its body or properties, or raise mapedFileSizeCommitLog"
            )
        mf = self.files.last
        if mf is not None and total <= mf.remaining - END_FILE_MIN_BLANK_LENGTH:  # the usual case: the last file
            if len(batch.bodies) == 1:  # a network send's lone message: one native call, when it applies
                physical_offset, pos = mf.end_offset, mf.wrote_position
                wrote = self._one.append(batch, total, physical_offset, queue_offset, store_timestamp, store_host,
                                         mf.pwrite_fd, pos)
                if wrote is not None:
                    if wrote < total:  # a failed or short pwrite: the rest copied into the mapping
                        mf.appended(self._one.unit(total), wrote)
                    else:
                        mf.wrote_position = pos + total
                    return AppendResult(np.array([physical_offset], dtype=np.int64), sizes, physical_offset + total,
                                        None, mf.mv[pos:pos + total])
            encoded = encode_batch(batch, mf.end_offset, queue_offset, store_timestamp, store_host, sizes=sizes,
                                   view=True, key_prefix=key_prefix)
            mf.append(encoded.data)
            return AppendResult(encoded.physical_offsets, sizes, mf.end_offset, encoded.dispatch, encoded.data)
        return self._append_across_files(batch, sizes, queue_offset, store_timestamp, store_host)

    def _append_across_files(
        self, batch: MessageBatch, sizes: np.ndarray, queue_offset: int, store_timestamp: int, store_host: bytes
    ) -> AppendResult:
        """``append_batch`` of a batch that does not fit the last file's room (or with no file yet): as
        many units as fit into each file, a blank closing a file that cannot take the next one."""
        ends = sizes.cumsum()  # where each unit ends, counted from the batch's first byte
        phys_parts = []
        done = 0
        n = len(batch)
        start = self.files.max_offset()
        while done < n:
            try:
                mf = self.files.last_writable()
            except DiskFullError:
                self.files.truncate(start)  # the units written so far never happened
                raise
            room = mf.remaining - END_FILE_MIN_BLANK_LENGTH
            written = int(ends[done - 1]) if done else 0
            if int(ends[-1]) - written <= room:  # the rest fits this file: the usual case
                fit = n - done
            else:
                fit = int(np.searchsorted(ends[done:], written + room, side="right"))
            if fit == 0:
                mf.close_tail(blank_unit(mf.remaining))
                continue
            part = batch if (done == 0 and fit == n) else batch.slice(done, done + fit)
            encoded = encode_batch(part, mf.end_offset, queue_offset + done, store_timestamp, store_host,
                                   sizes=sizes[done:done + fit], view=True)
            mf.append(encoded.data)
            phys_parts.append(encoded.physical_offsets)
            done += fit
        phys = phys_parts[0] if len(phys_parts) == 1 else np.concatenate(phys_parts)
        return AppendResult(phys, sizes, mf.end_offset)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Copy a master's commitlog bytes to the same offset here (a slave): ``offset`` must be
        this commitlog's end, or for an empty one the start of a file. The bytes stay within one
        file (a master sends no transfer across its file ends; both must use the same
        mapedFileSizeCommitLog). One memcpy; returns the new end. Raises ``ReplicationError``
        before writing anything when the bytes do not continue this commitlog."""
        if self.files.files:
            end = self.files.max_offset()
            if offset != end:
                raise ReplicationError(f"replicated bytes start at commitlog offset {offset}, but this commitlog "
                                       f"ends at {end}")
            mf = self.files.last_writable()
        elif offset % self.file_size:
            raise ReplicationError(f"replicated bytes start at commitlog offset {offset}, inside a file of "
                                   f"{self.file_size} bytes, and this commitlog is empty")
        else:
            mf = self.files.create_file(offset)
        if len(data) > mf.remaining:
            raise ReplicationError(f"{len(data)} replicated bytes at commitlog offset {offset} cross the end of "
                                   f"file {mf.path.name}: is mapedFileSizeCommitLog ({self.file_size}) the "
                                   "master's?")
        mf.append(data)
        return mf.end_offset

    def read_from(self, offset: int, max_size: int) -> memoryview | None:
        """Zero-copy view of the written bytes from ``offset`` to at most ``max_size`` bytes further,
        within the file holding ``offset`` (what one replication transfer sends); None if none."""
        mf = self.files.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        stop = min(mf.wrote_position, pos + max_size)
        if stop <= pos:
            return None
        view = mf.mv[pos:stop]
        return view if len(view) == stop - pos else None  # None if deleted meanwhile

    def read(self, offset: int, size: int) -> memoryview | None:
        """Zero-copy view of ``size`` bytes at ``offset``, or None if not (or no longer) stored."""
        mf = self.files.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        view = mf.mv[pos : pos + size]
        return view if len(view) == size else None  # None if deleted meanwhile

    def read_unit(self, offset: int) -> bytes | None:
        """The whole unit starting at ``offset`` (its size read from the unit itself), if intact:
        lengths, body CRC and PHYSICALOFFSET checked (a lookup is one unit, so the CRC is cheap)."""
        head = self.read(offset, 8)
        if head is None:
            return None
        size, magic = SIZE_MAGIC.unpack(head)
        if magic != MESSAGE_MAGIC or size < MIN_UNIT_SIZE:
            return None
        view = self.read(offset, size)
        if view is None:
            return None
        unit = bytes(view)
        faults = unit_faults(memoryview(unit), np.zeros(1, dtype=np.int64), size, offset, check_crc=True)
        return None if faults.damaged[0] else unit

    def is_unit_boundary(self, offset: int) -> bool:
        """Whether a unit (or a file) starts at ``offset``, or it is this commitlog's end: the unit
        chain walked from the start of the file holding it reaches it exactly (not a guess from the
        bytes there, which a body may imitate). Walks up to one file: call it off the event loop."""
        mf = self.files.find(offset)
        if mf is None:
            return offset == self.max_offset()
        pos = offset - mf.file_from_offset
        return follow_chain(mf.mv, 0, pos).end == pos

    def last_unit(self) -> tuple[int, bytes] | None:
        """The last message unit (its offset and bytes) of the file holding the commitlog's last byte,
        found by walking that file's chain (a blank closing the file is passed over); None if it
        holds none. Walks up to one file: call it off the event loop."""
        end = self.max_offset()
        mf = self.files.find(end - 1)
        if mf is None:
            return None
        starts = follow_chain(mf.mv, 0, end - mf.file_from_offset).starts
        if not starts.size:
            return None
        start = int(starts[-1])
        size = SIZE_MAGIC.unpack_from(mf.mv, start)[0]
        return mf.file_from_offset + start, bytes(mf.mv[start:start + size])

    def read_few_units(self, offsets: list[int], sizes: list[int]) -> bytes:
        """``read_units`` of a few units given as plain lists (no numpy): one copy of a contiguous run, else
        one a unit (a unit never crosses into the next file)."""
        total = sum(sizes)
        if offsets[-1] + sizes[-1] - offsets[0] == total:  # one contiguous run: the usual case
            view = self.read(offsets[0], total)
            if view is not None:
                return bytes(view)
        views = []
        for offset, size in zip(offsets, sizes, strict=True):
            view = self.read(offset, size)
            if view is None:
                raise LookupError(f"commitlog offset {offset} is no longer stored")
            views.append(view)
        return b"".join(views)

    def read_units(self, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
        """Concatenate many units into one buffer, copying each physically contiguous run once."""
        if offsets.size == 0:
            return b""
        first, total = int(offsets[0]), units_total(sizes)
        if int(offsets[-1]) + int(sizes[-1]) - first == total:  # one contiguous run: the usual case
            view = self.read(first, total)
            if view is not None:
                return bytes(view)
        ends = offsets + sizes
        breaks = np.flatnonzero(offsets[1:] != ends[:-1]) + 1
        run_starts = np.concatenate(([0], breaks))
        run_ends = np.concatenate((breaks, [offsets.size]))
        views = []
        for a, b in zip(offsets[run_starts].tolist(), ends[run_ends - 1].tolist(), strict=True):
            # a run may cross into the next file only through a blank tail, which breaks it,
            # but split defensively by file anyway
            while a < b:
                mf = self.files.find(a)
                if mf is None:
                    raise LookupError(f"commitlog offset {a} is no longer stored")
                pos = a - mf.file_from_offset
                stop = min(b - mf.file_from_offset, mf.wrote_position)
                if stop <= pos:
                    raise LookupError(f"commitlog offset {a} is past the written end")
                view = mf.mv[pos:stop]
                if len(view) != stop - pos:  # deleted by retention while we were reading
                    raise LookupError(f"commitlog offset {a} is no longer stored")
                views.append(view)
                a = mf.file_from_offset + stop
        return b"".join(views)

    def flush(self) -> int:
        return self.files.flush()

    def flushed_offset(self) -> int:
        return self.files.flushed_offset()

    def close(self) -> None:
        self.files.close()
