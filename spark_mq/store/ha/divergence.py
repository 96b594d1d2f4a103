"""Where a slave's log parts from its master's, found from the two epoch histories.

A replica's log is ``[min, max)`` of commitlog offsets plus its epoch entries (see
``epoch_file``; the last entry ends at ``max``). Comparing bytes would mean reading hundreds of
GB; comparing epochs is enough, since one epoch has one master and only a master writes: walking
the slave's epochs from the newest, the first one the master has with the same start offset is
the last epoch both wrote alike, and both logs agree up to the smaller of its two end offsets
(RocketMQ's ``EpochFileCache.findConsistentPoint``). The slave keeps that prefix and copies the
rest from the master.

Seed 004 sorts a slave's ``[min, max]`` against the master's: each end lies below the master's
min (1), within its range (2) or past its max (3), which gives six cases (``LogCase``):

- 1-1: the slave's whole log is older than anything the master keeps (it was down while the
  master's retention deleted those files): it keeps nothing and copies from the master's min.
- 1-2, 2-2: the slave is behind; it keeps the common prefix and catches up (the usual case).
- 1-3, 2-3: the slave also holds a tail past the master's end: the old master's messages no
  in-sync replica had when this master was elected (an unclean election, or an asynchronous
  master that failed). They are not in the new history and are truncated.
- 3-3: the slave's whole log lies past the master's end: the master lost its data and was
  elected anyway. Truncating would delete everything the slave has, messages no other replica
  holds: ``DivergedLogError`` for a person to decide, as the seed says.

A person is also needed when the histories share no epoch although the logs overlap, or the
slave knows a newer epoch than its master (the controller's state was lost or reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from spark_mq.common.errors import DivergedLogError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.store.ha.epoch_file import EpochEntry


class LogCase(Enum):
    """Where the slave's first and last offsets lie against the master's range (seed 004)."""

    OLDER = "1-1"
    BEHIND_AND_OLDER = "1-2"
    WIDER = "1-3"
    BEHIND = "2-2"
    LONGER = "2-3"
    PAST_END = "3-3"


_CASES = {(1, 1): LogCase.OLDER, (1, 2): LogCase.BEHIND_AND_OLDER, (1, 3): LogCase.WIDER,
          (2, 2): LogCase.BEHIND, (2, 3): LogCase.LONGER, (3, 3): LogCase.PAST_END}


@lazy_dataclass(frozen=True)
class ReplicaLog(LazyDataclass):
    """What the comparison needs of one replica: its commitlog range and its epoch history."""

    min_offset: int
    max_offset: int
    epochs: Sequence[EpochEntry]

    def describe(self) -> str:
        history = ", ".join(e.line() for e in self.epochs) or "none"
        return f"commitlog [{self.min_offset}, {self.max_offset}), epochs (epoch-startOffset) {history}"


@lazy_dataclass(frozen=True)
class TruncationPlan(LazyDataclass):
    """What a slave does before copying: keep ``[its min, truncate_to)``, then copy the master's
    bytes from ``replicate_from``. When ``keeps_nothing``, the slave empties its store (its
    commitlog then restarts at ``replicate_from``, a file start on the master)."""

    case: LogCase
    consistent_offset: int  # both logs agree below it (the slave's max when it has no epochs)
    truncate_to: int
    replicate_from: int
    keeps_nothing: bool


def classify(slave: ReplicaLog, master: ReplicaLog) -> LogCase:
    """The seed's case: which of the master's three regions each end of the slave's log is in."""

    def region(offset: int) -> int:
        return 1 if offset < master.min_offset else 2 if offset <= master.max_offset else 3

    return _CASES[(region(slave.min_offset), region(slave.max_offset))]


def last_consistent_offset(local: Sequence[EpochEntry], local_end: int, other: Sequence[EpochEntry],
                           other_end: int) -> int | None:
    """The offset below which two logs agree: the newest epoch of ``local`` that ``other`` has
    with the same start, ended at the smaller of its two ends (the last entry of each history
    ends at that log's end). None when they share no such epoch."""
    theirs = {e.epoch: (e.start_offset, _end(other, i, other_end)) for i, e in enumerate(other)}
    for i in range(len(local) - 1, -1, -1):
        mine = local[i]
        match = theirs.get(mine.epoch)
        if match is not None and match[0] == mine.start_offset:
            return min(_end(local, i, local_end), match[1])
    return None


def _end(entries: Sequence[EpochEntry], i: int, log_end: int) -> int:
    return entries[i + 1].start_offset if i + 1 < len(entries) else log_end


def plan_truncation(slave: ReplicaLog, master: ReplicaLog, file_size: int) -> TruncationPlan:
    """How ``slave`` joins ``master`` (``file_size``: the commitlog file size both use). Raises
    ``DivergedLogError`` when only a person should decide (see the module docstring)."""
    if not master.epochs:
        raise ValueError("the master has no epoch history: it never became master under a controller")
    case = classify(slave, master)
    if slave.max_offset <= slave.min_offset:  # nothing to keep or to lose: copy all the master keeps
        return TruncationPlan(case, slave.max_offset, slave.min_offset, master.min_offset, True)
    if case is LogCase.PAST_END:
        raise DivergedLogError(
            f"this replica's log lies wholly past its master's end (this replica: {slave.describe()}; master: "
            f"{master.describe()}): the master was elected without these messages (did it lose its disk?). "
            "Truncating would delete every message this replica holds, some perhaps acknowledged and held "
            "nowhere else, so nothing was changed. Decide by hand: copy this store aside first; then either "
            "make this replica the master (stop the other, elect this one), or empty this store directory so "
            "it copies the master's commitlog afresh")
    if slave.epochs and slave.epochs[-1].epoch > master.epochs[-1].epoch:
        raise DivergedLogError(
            f"this replica knows epoch {slave.epochs[-1].epoch}, newer than its master's last epoch "
            f"{master.epochs[-1].epoch} (this replica: {slave.describe()}; master: {master.describe()}): the "
            "controller's state was lost or reset, or this master is stale. Nothing was changed; check the "
            "controller's view of this broker set before restarting either broker")
    if not slave.epochs:  # a replica that never copied under a controller (or one starting empty)
        point = slave.max_offset
        if point > master.max_offset:
            raise DivergedLogError(
                f"this replica has no epoch history and its log ends past its master's (this replica: "
                f"{slave.describe()}; master: {master.describe()}): where the two parted is unknown. Nothing "
                "was changed; keep this store aside and empty its directory to copy the master afresh, or "
                "make this replica the master")
    else:
        found = last_consistent_offset(slave.epochs, slave.max_offset, master.epochs, master.max_offset)
        if found is None:
            if case is not LogCase.OLDER:
                raise DivergedLogError(
                    f"the two epoch histories share no epoch (this replica: {slave.describe()}; master: "
                    f"{master.describe()}): these logs were written by different masters throughout, so no "
                    "common prefix is known. Nothing was changed; keep this store aside and empty its directory "
                    "to copy the master afresh")
            found = slave.max_offset  # all of it older than the master keeps: nothing to compare
        point = found
    if point < master.min_offset or point <= slave.min_offset:
        # the master no longer has the bytes from ``point`` (or the slave keeps nothing anyway): an
        # empty commitlog restarts at a file start the master still has
        start = max(master.min_offset, point - point % file_size)
        return TruncationPlan(case, point, slave.min_offset, start, True)
    return TruncationPlan(case, point, point, point, False)
