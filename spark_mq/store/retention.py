"""Retention: deleting old commitlog files, and the consume queue and index files behind them.

RocketMQ's rules (CleanCommitLogService), with the thresholds as config:

* a commitlog file expires ``fileReservedTime`` hours after it was last written;
* expired files are deleted at the ``deleteWhen`` hours, or at any time once disk usage
  passes ``diskMaxUsedSpaceRatio``;
* past ``diskSpaceCleanForciblyRatio`` the oldest files go even if not expired, one at a
  time until usage is back under it;
* past ``diskSpaceWarningLevelRatio`` the store also refuses writes until usage drops.

The active (last) file is never deleted. At most ``deleteFilesBatchMax`` files go per run.

With ``tieredStoreEnable`` a file also needs every message in it archived: for each consume
queue, the queue offsets of its messages stored in that file (or earlier ones) must lie below
the queue's archived-up-to offset (given by the broker as ``archived_offset``; the store knows
nothing of the archive). Files go oldest-first, so a run stops at the first file that cannot
go: an expired one is simply kept (info log); under disk pressure the refusal is an error
naming the file and the queues, unless ``tieredDeleteUnarchivedForcibly`` lets it go anyway.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from spark_mq.common.config import BrokerConfig
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

ArchivedOffset = Callable[[str, int], int]
"""``archived_offset(topic, queue_id)``: queue offsets below it are archived (tiered storage)."""

EXPIRY = "expiry"  # a refusal trigger: the file merely expired (kept quietly)
DISK_PRESSURE = "disk_pressure"  # a refusal trigger: usage over diskMaxUsedSpaceRatio or diskSpaceCleanForciblyRatio
MAX_QUEUES_LOGGED = 10


def nothing_archived(topic: str, queue_id: int) -> int:
    """The archived offset of every queue when nothing provides one: no message is archived."""
    return 0


def disk_used_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


@dataclass(frozen=True)
class RetentionReport:
    deleted_files: int
    disk_ratio: float
    writable: bool


@dataclass(frozen=True)
class Unarchived:
    """A queue with messages below some commitlog offset that are not archived yet: the archive
    must reach ``needed`` (it is at ``archived``) before those messages may be deleted."""

    topic: str
    queue_id: int
    archived: int
    needed: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.queue_id} (archived up to {self.archived}, needs {self.needed})"


def unarchived_below(queues: Iterable[ConsumeQueue], archived_offset: ArchivedOffset, end: int) -> list[Unarchived]:
    """The queues holding messages stored below commitlog offset ``end`` that are not archived.

    A queue's commitlog offsets grow with its queue offsets, so its messages below ``end`` are
    the queue offsets [min, first at or after ``end``): one binary search per queue, none for a
    queue archived up to its max offset.
    """
    out = []
    for cq in queues:
        archived = archived_offset(cq.topic, cq.queue_id)
        if archived >= cq.max_offset:
            continue
        needed = cq.first_offset_at_or_after(end)
        if needed > max(archived, cq.min_offset):
            out.append(Unarchived(cq.topic, cq.queue_id, archived, needed))
    return out


def _describe(missing: list[Unarchived]) -> str:
    shown = ", ".join(map(str, missing[:MAX_QUEUES_LOGGED]))
    more = len(missing) - MAX_QUEUES_LOGGED
    return f"{shown} and {more} more queue(s)" if more > 0 else shown


class RetentionService:
    """Decides and performs deletions; ``run_once`` is called periodically by the store.

    ``queues()`` returns every consume queue with all stored messages dispatched into it (only
    called with tiering on). ``unarchived_refusals`` counts, per trigger (``EXPIRY``,
    ``DISK_PRESSURE``), the runs that kept a file because of unarchived messages; it is read by
    metrics from other threads.
    """

    def __init__(
        self,
        config: BrokerConfig,
        commitlog: CommitLog,
        queues: Callable[[], Iterable[ConsumeQueue]],
        after_delete: Callable[[int], None],
        disk_ratio: Callable[[Path], float] = disk_used_ratio,
        clock: Callable[[], float] = time.time,
        archived_offset: ArchivedOffset = nothing_archived,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.after_delete = after_delete
        self.disk_ratio = disk_ratio
        self.clock = clock
        self.archived_offset = archived_offset
        self.writable = True
        self.manual_deletes = 0
        self.unarchived_refusals = {EXPIRY: 0, DISK_PRESSURE: 0}

    def request_delete(self, times: int = 1) -> None:
        """Force the next ``times`` runs to delete expired files whatever the hour (admin)."""
        self.manual_deletes += times

    def _time_to_delete(self, now: float) -> bool:
        hour = time.localtime(now).tm_hour
        return any(int(h) == hour for h in self.config.delete_when.split(";"))

    def run_once(self) -> RetentionReport:
        cfg = self.config
        now = self.clock()
        root = cfg.root
        ratio = self.disk_ratio(root)
        clean_now = ratio > cfg.disk_space_clean_forcibly_ratio
        if ratio > cfg.disk_space_warning_level_ratio:
            if self.writable:
                log.error(
                    "disk %.1f%% full, over diskSpaceWarningLevelRatio %.0f%%: refusing writes until space is "
                    "freed", ratio * 100, cfg.disk_space_warning_level_ratio * 100,
                )
            self.writable = False
        elif not self.writable:
            log.warning("disk back to %.1f%%: accepting writes again", ratio * 100)
            self.writable = True
        elif ratio > cfg.disk_max_used_space_ratio / 100:
            log.warning(
                "disk %.1f%% used, over diskMaxUsedSpaceRatio %d%%", ratio * 100, cfg.disk_max_used_space_ratio
            )

        deleted = 0
        files = self.commitlog.files
        space_to_delete = ratio > cfg.disk_max_used_space_ratio / 100
        manual = self.manual_deletes > 0
        if self._time_to_delete(now) or space_to_delete or manual or clean_now:
            if manual:
                self.manual_deletes -= 1
            pressure = space_to_delete or clean_now
            expired = min(files.expired_count(cfg.file_reserved_time * 3_600_000, now), cfg.delete_files_batch_max)
            allowed = self._archived_prefix(expired, pressure)
            deleted = len(files.delete_first(allowed))
            refused = allowed < expired  # files go oldest-first: nothing after a kept file goes
            while clean_now and not refused and deleted < cfg.delete_files_batch_max and len(files.files) > 1:
                if not self._archived_prefix(1, pressure):
                    break
                files.delete_first(1)
                deleted += 1
                ratio = self.disk_ratio(root)
                clean_now = ratio > cfg.disk_space_clean_forcibly_ratio
            if deleted:
                log.info("retention deleted %d commitlog file(s); commitlog now starts at %d",
                         deleted, self.commitlog.min_offset())
                self.after_delete(self.commitlog.min_offset())
                ratio = self.disk_ratio(root)
                if not self.writable and ratio <= cfg.disk_space_warning_level_ratio:
                    self.writable = True
        return RetentionReport(deleted, ratio, self.writable)

    def _archived_prefix(self, count: int, pressure: bool) -> int:
        """How many of the ``count`` oldest commitlog files may go as far as tiered storage is
        concerned: all of them with tiering off, else up to the first holding unarchived messages
        (unless ``pressure`` and tieredDeleteUnarchivedForcibly let that one go too)."""
        cfg = self.config
        if not cfg.tiered_store_enable or count <= 0:
            return count
        queues = list(self.queues())
        for i, mf in enumerate(self.commitlog.files.files[:count]):
            missing = unarchived_below(queues, self.archived_offset, mf.file_from_offset + mf.size)
            if not missing:
                continue
            if not pressure:
                self.unarchived_refusals[EXPIRY] += 1
                log.info("retention keeps expired commitlog file %s: it holds messages not yet archived: %s",
                         mf.path.name, _describe(missing))
                return i
            if cfg.tiered_delete_unarchived_forcibly:
                log.warning("disk pressure: deleting commitlog file %s with messages never archived "
                            "(tieredDeleteUnarchivedForcibly=true), lost from both tiers: %s",
                            mf.path.name, _describe(missing))
                continue
            self.unarchived_refusals[DISK_PRESSURE] += 1
            log.error("disk pressure: refusing to delete commitlog file %s, it holds messages not yet archived: %s; "
                      "run the offload job (or set tieredDeleteUnarchivedForcibly=true to lose them)",
                      mf.path.name, _describe(missing))
            return i
        return count
