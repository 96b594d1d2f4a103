"""Retention: deleting old commitlog files, and the consume queue and index files behind them.

RocketMQ's rules (CleanCommitLogService), with the thresholds as config:

* a commitlog file expires ``fileReservedTime`` hours after it was last written;
* expired files are deleted at the ``deleteWhen`` hours, or at any time once disk usage
  passes ``diskMaxUsedSpaceRatio``;
* past ``diskSpaceCleanForciblyRatio`` the oldest files go even if not expired, one at a
  time until usage is back under it;
* past ``diskSpaceWarningLevelRatio`` the store also refuses writes until usage drops.

Unlike RocketMQ, forced deletion (the files that have not expired) keeps messages a consumer
group has not consumed yet: ``consumed_offsets(topic, queue_id)`` gives the committed offset of
every group with one for the queue (the broker's offset table), and a file holding a message
at or past one of them is kept and writes are refused instead, until the groups consume or an
operator frees space. ``cleanUnconsumedForcibly=true`` deletes it anyway; the messages lost
are logged and counted (``unconsumed_deleted``) per topic and group.

The active (last) file is never deleted. At most ``deleteFilesBatchMax`` files go per run.

With ``tieredStoreEnable`` a file also needs every message in it archived: for each consume
queue, the queue offsets of its messages stored in that file (or earlier ones) must lie below
the queue's archived-up-to offset (given by the broker as ``archived_offset``; the store knows
nothing of the archive). Files go oldest-first, so a run stops at the first file that cannot
go: an expired one is simply kept (info log); under disk pressure the refusal is an error
naming the file and the queues, unless ``tieredDeleteUnarchivedForcibly`` lets it go anyway.

On a slave a file also needs its master to have deleted it: ``replica_floor()`` gives the master's
commitlog min offset as the slave last learned it (the broker's SlaveSynchronize asks every round),
and only files ending at or below it may go, whatever the slave's own thresholds say (its files
are the master's, at the same offsets). So a slave never holds less than its master, and a reader
that moves to it when the master dies finds everything the master had. A slave that has not learned
it yet keeps every file; a master's floor is None (no bound).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from spark_mq.common.config import BrokerConfig
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

ArchivedOffset = Callable[[str, int], int]
"""``archived_offset(topic, queue_id)``: queue offsets below it are archived (tiered storage)."""

ConsumedOffsets = Callable[[str, int], Mapping[str, int]]
"""``consumed_offsets(topic, queue_id)``: committed offset per consumer group of the queue."""

ReplicaFloor = Callable[[], int | None]
"""``replica_floor()``: on a slave, the commitlog offset below which its master deleted the files (None: no bound)."""

EXPIRY = "expiry"  # a refusal trigger: the file merely expired (kept quietly)
DISK_PRESSURE = "disk_pressure"  # a refusal trigger: usage over diskMaxUsedSpaceRatio or diskSpaceCleanForciblyRatio
MAX_QUEUES_LOGGED = 10
TOPIC_GROUPS = "topic@group(s)"  # what a list of ``Unconsumed`` names


def nothing_archived(topic: str, queue_id: int) -> int:
    """The archived offset of every queue when nothing provides one: no message is archived."""
    return 0


def no_consumers(topic: str, queue_id: int) -> Mapping[str, int]:
    """The consumed offsets of every queue when nothing provides them: no group to wait for."""
    return {}


def no_floor() -> int | None:
    """The replica floor of a master: its own thresholds alone decide."""
    return None


def disk_used_ratio(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


@lazy_dataclass(frozen=True)
class RetentionReport(LazyDataclass):
    deleted_files: int
    disk_ratio: float
    writable: bool


@lazy_dataclass(frozen=True)
class Unarchived(LazyDataclass):
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


@lazy_dataclass(frozen=True)
class Unconsumed(LazyDataclass):
    """``count`` messages of ``topic`` (over its queues) in a commitlog file that ``group`` has not consumed."""

    topic: str
    group: str
    count: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.group}: {self.count}"


def unconsumed_in(queues: Iterable[ConsumeQueue], consumed_offsets: ConsumedOffsets, start: int,
                  end: int) -> list[Unconsumed]:
    """Per topic and group, the messages stored in commitlog range [``start``, ``end``) at or past
    the group's committed offset. A queue's messages in the range are the queue offsets from the
    first at or after ``start`` to the first at or after ``end``: two binary searches per queue
    that some group consumes."""
    counts: dict[tuple[str, str], int] = {}
    for cq in queues:
        committed = consumed_offsets(cq.topic, cq.queue_id)
        if not committed or min(committed.values()) >= cq.max_offset:
            continue
        lo, hi = cq.first_offset_at_or_after(start), cq.first_offset_at_or_after(end)
        for group, offset in committed.items():
            n = hi - max(lo, offset)
            if n > 0:
                counts[(cq.topic, group)] = counts.get((cq.topic, group), 0) + n
    return [Unconsumed(t, g, n) for (t, g), n in sorted(counts.items())]


def _describe(missing: list[Unarchived] | list[Unconsumed], what: str = "queue(s)") -> str:
    shown = ", ".join(map(str, missing[:MAX_QUEUES_LOGGED]))
    more = len(missing) - MAX_QUEUES_LOGGED
    return f"{shown} and {more} more {what}" if more > 0 else shown


class RetentionService:
    """Decides and performs deletions; ``run_once`` is called periodically by the store.

    ``queues()`` returns every consume queue with all stored messages dispatched into it (called
    with tiering on, and under forced deletion). ``unarchived_refusals`` counts, per trigger
    (``EXPIRY``, ``DISK_PRESSURE``), the runs that kept a file because of unarchived messages;
    ``unconsumed_deleted`` the unconsumed messages forced deletion removed, per (topic, group);
    ``refusal`` says why writes are refused (None while they are accepted). Metrics read them
    from other threads.
    """

    def __init__(
        self,
        config: BrokerConfig,
        commitlog: CommitLog,
        queues: Callable[[], Iterable[ConsumeQueue]],
        after_delete: Callable[[int], None],
        disk_ratio: Callable[[Path], float],
        clock: Callable[[], float],
        archived_offset: ArchivedOffset,
        consumed_offsets: ConsumedOffsets,
        replica_floor: ReplicaFloor,
    ) -> None:
        """The store's parts it deletes from, and what it asks outside the store (the defaults and
        meanings are ``MessageStore``'s)."""
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.after_delete = after_delete
        self.disk_ratio = disk_ratio
        self.clock = clock
        self.archived_offset = archived_offset
        self.consumed_offsets = consumed_offsets
        self.replica_floor = replica_floor
        self.kept_for_master = 0  # runs that kept a file because the master still has it (a slave's)
        self._floor_logged: tuple[str, int] | None = None  # (file, floor) last logged as kept
        self.refusal: str | None = None
        self.manual_deletes = 0
        self.unarchived_refusals = {EXPIRY: 0, DISK_PRESSURE: 0}
        self.unconsumed_deleted: dict[tuple[str, str], int] = {}

    @property
    def writable(self) -> bool:
        return self.refusal is None

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
        if cfg.disk_max_used_space_ratio / 100 < ratio <= cfg.disk_space_warning_level_ratio and self.writable:
            log.warning(
                "disk %.1f%% used, over diskMaxUsedSpaceRatio %d%%", ratio * 100, cfg.disk_max_used_space_ratio
            )

        deleted = 0
        unconsumed: list[Unconsumed] = []  # what keeps the oldest file under forced deletion
        files = self.commitlog.files
        space_to_delete = ratio > cfg.disk_max_used_space_ratio / 100
        manual = self.manual_deletes > 0
        if self._time_to_delete(now) or space_to_delete or manual or clean_now:
            if manual:
                self.manual_deletes -= 1
            pressure = space_to_delete or clean_now
            expired = min(files.expired_count(cfg.file_reserved_time * 3_600_000, now), cfg.delete_files_batch_max)
            allowed = self._below_floor(self._archived_prefix(expired, pressure))
            deleted = len(files.delete_first(allowed))
            refused = allowed < expired  # files go oldest-first: nothing after a kept file goes
            while clean_now and not refused and deleted < cfg.delete_files_batch_max and len(files.files) > 1:
                if not self._archived_prefix(1, pressure) or not self._below_floor(1):
                    break
                unconsumed = self._unconsumed_in_oldest()
                if unconsumed and not cfg.clean_unconsumed_forcibly:
                    break
                gone = files.delete_first(1)
                self._count_unconsumed(gone[0].path.name, ratio, unconsumed)
                unconsumed = []
                deleted += 1
                ratio = self.disk_ratio(root)
                clean_now = ratio > cfg.disk_space_clean_forcibly_ratio
            if deleted:
                log.info("retention deleted %d commitlog file(s); commitlog now starts at %d",
                         deleted, self.commitlog.min_offset())
                self.after_delete(self.commitlog.min_offset())
                ratio = self.disk_ratio(root)
        self._set_refusal(self._refusal_for(ratio, unconsumed))
        return RetentionReport(deleted, ratio, self.writable)

    def _unconsumed_in_oldest(self) -> list[Unconsumed]:
        """The messages of the oldest commitlog file some consumer group has not consumed."""
        mf = self.commitlog.files.files[0]
        return unconsumed_in(self.queues(), self.consumed_offsets, mf.file_from_offset, mf.file_from_offset + mf.size)

    def _count_unconsumed(self, name: str, ratio: float, unconsumed: list[Unconsumed]) -> None:
        """Log and count what forced deletion of file ``name`` took from consumer groups."""
        if not unconsumed:
            return
        log.warning("disk %.1f%% over diskSpaceCleanForciblyRatio %.0f%%: deleted commitlog file %s with messages "
                    "never consumed (cleanUnconsumedForcibly=true), unconsumed messages removed per topic@group: %s",
                    ratio * 100, self.config.disk_space_clean_forcibly_ratio * 100, name,
                    _describe(unconsumed, TOPIC_GROUPS))
        table = dict(self.unconsumed_deleted)
        for u in unconsumed:
            table[(u.topic, u.group)] = table.get((u.topic, u.group), 0) + u.count
        self.unconsumed_deleted = table  # replaced, never changed in place: a scrape may be iterating it

    def _refusal_for(self, ratio: float, unconsumed: list[Unconsumed]) -> str | None:
        cfg = self.config
        if ratio > cfg.disk_space_warning_level_ratio:
            return (f"disk full: usage {ratio:.1%} is over diskSpaceWarningLevelRatio "
                    f"({cfg.disk_space_warning_level_ratio:.0%}): writes are refused until retention or an operator "
                    "frees space")
        if unconsumed and ratio > cfg.disk_space_clean_forcibly_ratio:
            return (f"disk full: usage {ratio:.1%} is over diskSpaceCleanForciblyRatio "
                    f"({cfg.disk_space_clean_forcibly_ratio:.0%}) and the oldest commitlog file holds messages "
                    f"consumer groups have not consumed ({_describe(unconsumed, TOPIC_GROUPS)}): writes are refused "
                    "until they consume them or space is freed (cleanUnconsumedForcibly=true deletes them instead)")
        return None

    def _set_refusal(self, refusal: str | None) -> None:
        if refusal is not None and self.refusal is None:
            log.error("refusing writes: %s", refusal)
        elif refusal is None and self.refusal is not None:
            log.warning("disk usage is back under the limits: accepting writes again")
        self.refusal = refusal

    def _below_floor(self, count: int) -> int:
        """How many of the ``count`` oldest commitlog files the master has deleted too (all of them on a
        master): a slave keeps every file its master still has."""
        floor = self.replica_floor()
        if floor is None or count <= 0:
            return count
        files = self.commitlog.files.files
        n = 0
        while n < count and files[n].file_from_offset + files[n].size <= floor:
            n += 1
        if n < count:
            self.kept_for_master += 1
            kept = files[n].path.name
            if self._floor_logged != (kept, floor):  # once per file and floor, not every run
                self._floor_logged = (kept, floor)
                log.info("retention keeps commitlog file %s and later ones: the master still has them (its "
                         "commitlog starts at %d, as last learned)", kept, floor)
        return n

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
