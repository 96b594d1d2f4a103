"""The body CRCs a start after a crash leaves to a background pass.

Recovery after a crash checks everything about the units of the checked region before the store
serves, except the body CRCs of the units below the checkpoint's safe offset: the CRC is most of
a check's cost, and those units' consume queue entries are durable. ``DeferredCrc`` keeps what
the walk found of them, and the start-up check (``unit_checks``) computes the CRCs while the
store serves, quarantining the entry of a unit that fails. Reads check such units themselves
until it is done, so none is ever served unchecked.

Thread-safety: filled by recovery at start; ``check`` then runs on the start-up check's thread.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import field

from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.batch import decode_units
from spark_mq.common.unit.check import UnitFaults, body_crc_mismatch
from spark_mq.common.unit.layout import HEADER_SIZE, SIZE_MAGIC
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

CRC_BATCH_UNITS = 20_000  # body CRCs a background check computes per step (~5 ms holding the GIL)


@lazy_dataclass
class DeferredCrc(LazyDataclass):
    """The body CRCs a start after a crash leaves to a background pass: those of the units below
    the checkpoint's safe offset (everything else about them is checked before serving). Reads
    check such units themselves until the pass is done, so none is ever served unchecked."""

    below: int  # commitlog offset: units before it are deferred
    parts: list[tuple[MappedFile, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    # (file, unit starts, body ends, stored BODYCRCs) of the units found intact otherwise

    def split(self, mf: MappedFile, starts: np.ndarray, faults: UnitFaults) -> None:
        """Keep the CRCs of the units of ``starts`` (``faults`` found without CRCs) below ``below``
        for later, check the others' now (into ``faults.damaged``)."""
        n = int(np.searchsorted(starts, self.below - mf.file_from_offset))
        if n:
            ok = ~faults.damaged[:n]  # damaged already: nothing left to find
            self.parts.append((mf, starts[:n][ok], faults.body_end[:n][ok],
                               faults.header["body_crc"][:n][ok].astype(np.int64)))  # a copy: the headers go
        if n < starts.size:
            faults.damaged[n:] |= body_crc_mismatch(mf.mv, faults.header["body_crc"][n:], starts[n:] + HEADER_SIZE,
                                                    faults.body_end[n:])

    def forget_from(self, offset: int) -> None:
        """The units at and after ``offset`` are gone (a slave's dropped last unit): none to check."""
        self.parts = [(mf, starts[keep], body_end[keep], stored[keep]) for mf, starts, body_end, stored in self.parts
                      for keep in (starts + mf.file_from_offset < offset,)]

    def check(self, commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue],
              stop: threading.Event) -> np.ndarray | None:
        """Check the deferred CRCs ``CRC_BATCH_UNITS`` at a time (a batch holds the GIL, a running
        broker's event loop waits that long) and quarantine the entries of the damaged units;
        returns their commitlog offsets (None when ``stop`` cut it short)."""
        found: list[np.ndarray] = []
        for mf, starts, body_end, stored in self.parts:
            mv = mf.mv  # held: a file retention deletes meanwhile stays mapped until this view goes
            if len(mv) == 0:  # deleted already: nothing of it is served any more
                continue
            for lo in range(0, starts.size, CRC_BATCH_UNITS):
                if stop.is_set():
                    return None
                hi = lo + CRC_BATCH_UNITS
                bad = body_crc_mismatch(mv, stored[lo:hi], starts[lo:hi] + HEADER_SIZE, body_end[lo:hi])
                found.append(starts[lo:hi][bad] + mf.file_from_offset)
        self.parts.clear()
        damaged = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        for phys in damaged.tolist():
            _quarantine_entry(commitlog, queues, phys)
        return damaged


def _quarantine_entry(commitlog: CommitLog, queues: dict[tuple[str, int], ConsumeQueue], phys: int) -> None:
    """Mark the consume queue entry that points at the damaged unit at ``phys`` (whose lengths
    hold: the walk found it readable), if one does."""
    head = commitlog.read(phys, 8)
    unit = commitlog.read(phys, SIZE_MAGIC.unpack(head)[0]) if head is not None else None
    if unit is None:  # deleted by retention meanwhile
        return
    cols = decode_units(np.frombuffer(unit, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    topic = bytes(unit[int(cols.topic_start[0]):int(cols.topic_end[0])]).decode("utf-8", "replace")
    qid, qoff = int(cols.header["queue_id"][0]), int(cols.header["queue_offset"][0])
    cq = queues.get((topic, qid))
    entry = cq.entry(qoff) if cq is not None else None
    if cq is not None and entry is not None and entry[0] == phys:
        cq.quarantine(np.array([qoff], dtype=np.int64))
    log.warning("start-up check: the unit at commitlog offset %d (%s:%d@%d) fails its body CRC: quarantined, "
                "never served", phys, topic, qid, qoff)
