"""Walking the commitlog's unit chain for recovery and the start-up check.

From a start offset the walk follows the TOTALSIZE/MAGICCODE chain file by file (``follow_chain``,
``WALK_CHUNK_UNITS`` at a time to bound memory), checks every unit it finds in batch
(``unit_faults``: inner lengths, PHYSICALOFFSET, QUEUEID, body CRC) and keeps, per step, the
header fields reconciling needs (``Chunk``). It stops where the chain ends: a blank closing the
last file, zeros, a broken link; ``CLEAN_ENDS`` are the ends that are no damage.

Thread-safety: a walk reads mapped files only; it runs at start or on the start-up check's
thread (which passes ``stop`` to end it early).
"""

from __future__ import annotations

import threading
from dataclasses import fields

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.chain import follow_chain, stop_reason
from spark_mq.common.unit.check import UnitFaults, unit_faults
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.deferred_crc import DeferredCrc
from spark_mq.store.mapped_file import MappedFile

WALK_CHUNK_UNITS = 500_000  # bounds memory while walking a large file
CLEAN_ENDS = ("blank", "end", "zero", "empty")  # where a chain may end without damage


@lazy_dataclass
class Chunk(LazyDataclass):
    """Units of one mapped file found by one walk step, with the header fields reconciling needs
    (taken from the headers ``unit_faults`` gathered: the units are read once)."""

    mf: MappedFile
    starts: np.ndarray  # positions in the file
    damaged: np.ndarray  # bool per unit
    readable: np.ndarray  # bool per unit: inner lengths hold, so the topic can be read
    qoff: np.ndarray
    size: np.ndarray
    qid: np.ndarray
    body_end: np.ndarray  # in the file; where readable, the topic length byte is there
    last_ts: int  # newest store time of the readable units

    @classmethod
    def of(cls, mf: MappedFile, starts: np.ndarray, faults: UnitFaults) -> Chunk:
        head = faults.header
        ts = head["store_timestamp"][faults.readable]
        return cls(mf, starts, faults.damaged, faults.readable, head["queue_offset"].astype(np.int64),
                   head["total_size"].astype(np.int32), head["queue_id"].astype(np.int32), faults.body_end,
                   int(ts.max()) if ts.size else 0)

    def head(self, keep: int) -> Chunk:
        """The first ``keep`` units only."""
        return Chunk(self.mf, *(getattr(self, f.name)[:keep] for f in fields(self)[1:-1]), self.last_ts)



def walk(
    commitlog: CommitLog, start: int, stop_at: int | None, check_crc: bool, stop: threading.Event | None = None,
    deferred: DeferredCrc | None = None,
) -> tuple[list[Chunk], int, str]:
    """Follow the unit chain from ``start`` (up to ``stop_at``, else to its end, making the files
    it walks through full), file by file, checking every unit found (but the body CRCs
    ``deferred`` takes); returns the chunks, where the chain ends and why."""
    chunks: list[Chunk] = []
    end, reason = start, "empty"
    mf = commitlog.files.find(start)
    while mf is not None and (stop is None or not stop.is_set()):
        pos = max(start - mf.file_from_offset, 0)
        limit = mf.size if stop_at is None else min(mf.size, stop_at - mf.file_from_offset)
        while True:
            ends_here = stop_reason(mf.mv, pos, limit)  # a clean start's walk: the log ends right here, no numpy
            if ends_here is not None:
                why = ends_here
                break
            chain = follow_chain(mf.mv, pos, limit, WALK_CHUNK_UNITS)
            if chain.starts.size:
                faults = unit_faults(mf.mv, chain.starts, chain.end, mf.file_from_offset,
                                     check_crc and deferred is None)
                if deferred is not None:  # only made with check_crc (see recover)
                    deferred.split(mf, chain.starts, faults)
                chunks.append(Chunk.of(mf, chain.starts, faults))
            pos, why = chain.end, chain.reason
            if why != "max":
                break
        end, reason = mf.file_from_offset + pos, why
        if why not in ("blank", "end") or (stop_at is not None and end >= stop_at):
            break
        if why == "end" and limit < mf.size:  # a unit's first bytes before stop_at, not the file's end
            break
        if stop_at is None:
            mf.reset_to(mf.size)  # full: continue in the next file
        end = mf.file_from_offset + mf.size
        mf = commitlog.files.find(end)
    return chunks, end, reason
