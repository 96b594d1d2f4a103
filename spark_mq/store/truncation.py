"""Cutting a store back to a commitlog offset: what a slave does to a tail its new master's
history does not have (``store/ha/divergence`` says where), RocketMQ's ``truncateFiles``.

Everything at and past the offset goes: consume queue entries whose unit starts there or later
(a queue left without any entry is removed, as if it never had a message), index entries, and
the commitlog (later files deleted, the file holding the offset zeroed from it). Only the tail
is touched: a binary search per queue and in the newest index file, no pass over the log.

Crash safety comes from the order ``MessageStore.truncate_to`` follows: the checkpoint's safe
offset is lowered to the cut first, so a crash from then on recovers by walking the commitlog
from at or below the cut; the commitlog's cut is zeroed and fdatasynced before any later file
goes, so that walk either still finds the whole old tail (a crash before the cut: the store is
as it was, and the caller truncates again) or ends exactly at the cut (the store is the prefix:
recovery cuts consume queues and index there). Either way every entry points at a unit.

Thread-safety: called under the store's put lock, with dispatch caught up.
"""

from __future__ import annotations

import logging

from spark_mq.common.errors import StoreError
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue
from spark_mq.store.index_service import IndexService

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
