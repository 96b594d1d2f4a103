"""Cutting a store back to a commitlog offset: what a slave does to a tail its new master's
history does not have (``store/ha/divergence`` says where), RocketMQ's ``truncateFiles``.

Everything at and past the offset goes: consume queue entries whose unit starts there or later
(a queue left without any entry is removed, as if it never had a message), index entries, and
the commitlog (later files deleted, the file holding the offset zeroed from it). Only the tail
is touched: a binary search per queue and in the newest index file, no pass over the log.

Crash safety comes from the order ``Truncator.truncate`` follows: the checkpoint's safe
offset is lowered to the cut first, so a crash from then on recovers by walking the commitlog
from at or below the cut; the commitlog's cut is zeroed and fdatasynced before any later file
goes, so that walk either still finds the whole old tail (a crash before the cut: the store is
as it was, and the caller truncates again) or ends exactly at the cut (the store is the prefix:
recovery cuts consume queues and index there). Either way every entry points at a unit.

Thread-safety: ``Truncator.truncate`` takes the store's put lock and the checkpoint lock itself
(puts, a slave's appends, rebuilds and checkpoints wait; reads go on and check the units they
serve); the functions are called under both, with dispatch caught up.
"""

from __future__ import annotations

import logging

from spark_mq.common.errors import StoreError
from spark_mq.store.checkpoint import Checkpointer
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.consume_queue_store import ConsumeQueueStore
from spark_mq.store.dispatch import Dispatcher
from spark_mq.store.flush import GroupCommit
from spark_mq.store.full_disk import FullDisk
from spark_mq.store.index_service import IndexService
from spark_mq.store.replica_writer import ReplicaWriter
from spark_mq.store.unit_checks import CheckedUnits, StartupCheck
from spark_mq.store.write_state import WriteState

log = logging.getLogger(__name__)


def check_unit_start(commitlog: CommitLog, offset: int) -> None:
    """Refuse (``StoreError``, nothing changed) an ``offset`` inside ``[min, max)`` that the unit
    chain walked from the start of its file does not reach exactly (a cut inside a unit would
    leave half a message; the bytes at the offset alone could be a body imitating a header).
    Walks at most that one file, vectorised."""
    mf = commitlog.files.find(offset)
    if mf is None:
        raise StoreError(f"commitlog offset {offset} is not stored (commitlog [{commitlog.min_offset()}, "
                         f"{commitlog.max_offset()})): nothing truncated")
    if not commitlog.is_unit_boundary(offset):
        pos = offset - mf.file_from_offset
        raise StoreError(f"commitlog offset {offset} (position {pos} of {mf.path.name}) does not begin a message "
                         "unit: a truncation there would cut a message in two, nothing truncated. Is the offset from "
                         "this store's own history (epoch comparison with its master)?")


def cut_queues(queues: list[ConsumeQueue], offset: int) -> list[ConsumeQueue]:
    """Drop every entry whose unit starts at or past ``offset``; returns the queues left with no
    entry ever (their first message was past it), which the caller removes."""
    emptied = []
    for cq in queues:
        if cq.last_phys() >= offset:
            cq.truncate(cq.first_offset_at_or_after(offset))
            if cq.max_offset == 0:
                emptied.append(cq)
    return emptied


def cut_commitlog(commitlog: CommitLog, index: IndexService | None, offset: int) -> None:
    """The index past ``offset``, then the commitlog: the cut made durable before later files go
    (see the module docstring). An offset at or below the commitlog's min empties it."""
    if index is not None:
        gone = index.truncate_past(offset)
        log.info("truncation: %d index entries at or past commitlog offset %d dropped", gone, offset)
    if offset <= commitlog.min_offset():
        first = commitlog.files.first
        commitlog.files.truncate(first.file_from_offset if first is not None else offset, durable=True)
        for mf in reversed(commitlog.files.files):
            mf.destroy()
        commitlog.files.files = []
        return
    commitlog.files.truncate(offset, durable=True)


class Truncator:
    """Cuts the whole store (``MessageStore.truncate_to``): its parts, in the order above.

    Thread-safety: ``truncate`` may be called from any thread (the HA client's, the broker's role
    change) and holds the put lock and the checkpoint lock throughout."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueStore, index: IndexService | None,
                 dispatcher: Dispatcher, writes: WriteState, checkpointer: Checkpointer, checks: CheckedUnits,
                 startup_check: StartupCheck, full_disk: FullDisk, replica: ReplicaWriter | None) -> None:
        """``replica``: a slave's, whose replicated units are read for dispatch first (None on a master)."""
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.writes = writes
        self.checkpointer = checkpointer
        self.checks = checks
        self.startup_check = startup_check
        self.full_disk = full_disk
        self.replica = replica

    def truncate(self, offset: int, group_commit: GroupCommit | None) -> int:
        """See ``MessageStore.truncate_to``; ``group_commit`` fails the waiters for what is cut."""
        with self.writes.lock, self.checkpointer.lock:
            self.startup_check.stop()  # it would judge entries this changes; reads check instead
            # a slave's units read for dispatch, then built (a full disk may defer either)
            read_all = self.replica.read_all() if self.replica is not None else True
            self.dispatcher.catch_up()
            end = self.commitlog.max_offset()
            if not read_all or self.full_disk.rebuild_from is not None or self.dispatcher.backlog:
                raise StoreError(f"cannot truncate while entries wait to be built ({self.full_disk.reason}): free "
                                 "disk space first; nothing truncated")
            if offset > end:
                raise StoreError(f"cannot truncate to commitlog offset {offset}: the commitlog ends at {end}; "
                                 "nothing truncated")
            if offset == end and self.commitlog.files.files:
                return end
            everything = offset <= self.commitlog.min_offset()
            if not everything:
                check_unit_start(self.commitlog, offset)
            checked_from = self.checks.checked_from
            self.checks.checked_from = max(checked_from, end)
            cut = max(offset, 0)
            self.checkpointer.lower(cut, self.writes.last_store_ts)
            queues = list(self.queues.values())
            gone = queues if everything else cut_queues(queues, cut)
            self.queues.remove(gone)
            for cq in gone:
                self.writes.next_offset.pop((cq.topic, cq.queue_id), None)
            cut_commitlog(self.commitlog, self.index, cut)
            new_end = self.commitlog.max_offset()
            self.dispatcher.rebuilt(new_end, self.writes.last_store_ts)
            if self.replica is not None:
                self.replica.read = new_end
            if group_commit is not None:
                group_commit.truncated(new_end)
            self.writes.next_offset.update(self.queues.settled(self.commitlog.min_offset()))
            self.checks.truncated(new_end, checked_from)
            self.checkpointer.take_locked()
        log.warning("store truncated to commitlog offset %d: it ended at %d, now at %d (%d consume queues removed)",
                    offset, end, new_end, len(gone))
        return new_end
