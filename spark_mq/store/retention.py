"""Retention: deleting old commitlog files, and the consume queue and index files behind them.

RocketMQ's rules (CleanCommitLogService), with the thresholds as config:

* a commitlog file expires ``fileReservedTime`` hours after it was last written;
* expired files are deleted at the ``deleteWhen`` hours, or at any time once disk usage
  passes ``diskMaxUsedSpaceRatio``;
* past ``diskSpaceCleanForciblyRatio`` the oldest files go even if not expired, one at a
  time until usage is back under it;
* past ``diskSpaceWarningLevelRatio`` the store also refuses writes until usage drops.

The active (last) file is never deleted. At most ``deleteFilesBatchMax`` files go per run.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spark_mq.common.config import BrokerConfig
from spark_mq.store.commitlog import CommitLog

log = logging.getLogger(__name__)


def disk_used_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


@dataclass(frozen=True)
class RetentionReport:
    deleted_files: int
    disk_ratio: float
    writable: bool


class RetentionService:
    """Decides and performs deletions; ``run_once`` is called periodically by the store."""

    def __init__(
        self,
        config: BrokerConfig,
        commitlog: CommitLog,
        after_delete: Callable[[int], None],
        disk_ratio: Callable[[Path], float] = disk_used_ratio,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.after_delete = after_delete
        self.disk_ratio = disk_ratio
        self.clock = clock
        self.writable = True
        self.manual_deletes = 0

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
            expired = files.expired_count(cfg.file_reserved_time * 3_600_000, now)
            deleted = len(files.delete_first(min(expired, cfg.delete_files_batch_max)))
            while clean_now and deleted < cfg.delete_files_batch_max and len(files.files) > 1:
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
