"""``MessageStore``: the facade the broker talks to.

Layout under ``storePathRootDir``: ``commitlog/``, ``consumequeue/<topic>/<queueId>/``,
``index/``, ``checkpoint``, ``abort``, ``lock``, ``cleanstop`` (see ``clean_stop``) and ``config/*.json``,
every path built by ``store_path`` (which refuses one that would leave the root).

Dispatch (consume queue and index entries) runs in batched passes, see ``dispatch.py``: on a
background thread, before every read, and from a put once the backlog passes
``DISPATCH_BACKLOG`` messages. Batching many appends into one vectorised pass is what makes it
cheap per message. The dispatched-up-to position survives restarts as the checkpoint's safe
offset.

A full disk: every mapped file gets its blocks when created (``disk_space``), the commitlog
rolls to a new file only while the disk keeps ``logic_reserve`` bytes free for the consume
queue and index files still to come, and a put that cannot be stored is refused with
``DiskFullError`` (a ``StoreNotWritableError``: SERVICE_NOT_AVAILABLE at the broker) before
anything is written. The store then refuses writes (reads go on) until a check every
``DISK_CHECK_INTERVAL_S`` finds room for the next file again.

Thread-safety: every public method may be called from any thread. Puts are serialised by one
lock; gets and queries run without it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from spark_mq.common.byte_ranges import gather_ranges
from spark_mq.common.config import SYNC_FLUSH, BrokerConfig
from spark_mq.common.delay_levels import parse_delay_levels
from spark_mq.common.errors import DiskFullError, ReplicationError, StoreError, StoreNotWritableError
from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.unit.check import served_faults
from spark_mq.common.unit.decode import decode_message
from spark_mq.common.unit.layout import (
    BLANK_MAGIC,
    INT64,
    MESSAGE_MAGIC,
    PHYSICAL_OFFSET_OFFSET,
    SIZE_MAGIC,
    STORE_TIMESTAMP_OFFSET,
)
from spark_mq.store.checkpoint import Checkpoint
from spark_mq.store.clean_stop import FILE_NAME as CLEAN_STOP
from spark_mq.store.clean_stop import take_clean_stop, write_clean_stop
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.config_file import JsonConfigFile, config_file
from spark_mq.store.consume_queue import ENTRY, QUARANTINED_TAG, ConsumeQueue
from spark_mq.store.disk_space import disk_full, free_bytes
from spark_mq.store.dispatch import IDLE_BEFORE_DISPATCH_S, AppendRecord, Dispatcher
from spark_mq.store.flush import GroupCommit, PeriodicTask
from spark_mq.store.index_file import index_file_size
from spark_mq.store.index_service import IndexService
from spark_mq.store.lock_file import StoreLock
from spark_mq.store.recovery import DeferredCrc, RecoveryReport, check_from, check_region, rebuild, recover
from spark_mq.store.replica_units import read_replicated
from spark_mq.store.results import GetResult, GetStatus, PutResult, PutStatus
from spark_mq.store.retention import (
    ArchivedOffset,
    ConsumedOffsets,
    ReplicaFloor,
    RetentionService,
    disk_used_ratio,
    no_consumers,
    no_floor,
    nothing_archived,
)
from spark_mq.store.store_paths import (
    ABORT_FILE,
    CHECKPOINT_FILE,
    COMMITLOG_DIR,
    CONSUME_QUEUE_DIR,
    INDEX_DIR,
    LOCK_FILE,
    store_path,
)
from spark_mq.store.truncation import check_unit_start, cut_commitlog, cut_queues

log = logging.getLogger(__name__)

# background dispatch poll (reads also catch up on demand); its pass waits for 10 ms of idle
# appends anyway, and every wake-up takes the GIL from the event loop (1 ms meant 1000 a second)
DISPATCH_INTERVAL_S = 0.010
DISPATCH_BACKLOG = 8_192  # messages: past this a put dispatches the backlog itself
# a slave builds the entries of replicated units once this many bytes wait (else on a read or once appends
# pause): one pass over 1 MiB costs about what one over 32 KiB does, per message far less
REPLICA_DISPATCH_BYTES = 1 << 20
DISK_CHECK_INTERVAL_S = 1.0  # while writes are refused for a full disk, how often free space is looked at
RESERVED_QUEUE_FILES = 16  # consume queue files' worth of space a commitlog roll leaves free
MAX_FILTER_SCAN = 16_000  # consume queue entries scanned per get when filtering by tag
# commitlog bytes read per get when a unit filter (SQL92) judges units by their contents: the units
# must be read to be judged, so the scan is bounded by bytes as well as by entries
UNIT_FILTER_SCAN_BYTES = 8 * 1024 * 1024
MIN_JUDGED_UNITS = 256  # units a unit filter judges at once at least (each call has a fixed cost)
DEFAULT_MAX_GET_BYTES = 4 * 1024 * 1024
# the background start-up check waits this long first: its Python loop holds the GIL, and every
# I/O wake-up of the starting broker (registration, first connections and pulls) would wait up to
# a switch interval for it; reads check unchecked units themselves meanwhile
STARTUP_CHECK_DELAY_S = 2.0
_QUEUE_DIR = re.compile(r"^\d+$")


UnitFilter = Callable[[bytes, np.ndarray], np.ndarray]
"""``unit_filter(data, sizes)``: which of the units back to back in ``data`` a reader wants (a
boolean mask), judged on their contents (a SQL92 subscription's properties)."""


def _judge(read_units: Callable[[np.ndarray, np.ndarray], bytes], window: np.ndarray, phys: np.ndarray,
           sizes: np.ndarray, wanted: int, unit_filter: UnitFilter) -> tuple[np.ndarray, bytes, np.ndarray]:
    """The first units of ``window`` (entry indexes into ``phys``/``sizes``) read and judged, in chunks, until
    ``wanted`` match or the window ends: (the entries judged, their bytes back to back, which match).

    Why chunks: a pull asks for ``wanted`` matches, and the window may hold many times that; reading and
    judging all of it, to return the first ``wanted``, made each pull do the work of the next ones again.
    A chunk holds what is still missing at the rate of matches seen so far, a quarter more."""
    datas, keeps, done, matched = [], [], 0, 0
    chunk = max(wanted, MIN_JUDGED_UNITS)
    while done < window.size and matched < wanted:
        part = window[done:done + chunk]
        data = read_units(phys[part], sizes[part])
        keep = unit_filter(data, sizes[part])
        datas.append(data)
        keeps.append(keep)
        done += part.size
        matched += int(np.count_nonzero(keep))
        chunk = max(chunk, (wanted - matched) * done * 5 // (4 * max(matched, 1)))
    return window[:done], datas[0] if len(datas) == 1 else b"".join(datas), np.concatenate(keeps)


def logic_reserve(config: BrokerConfig) -> int:
    """Bytes a commitlog roll leaves free: the consume queue and index files its messages may
    need (a message stored whose entries cannot be written is readable only once space returns)."""
    index = index_file_size(config.max_hash_slot_num, config.max_index_num) if config.message_index_enable else 0
    return RESERVED_QUEUE_FILES * config.maped_file_size_consume_queue + index


class MessageStore:
    def __init__(
        self,
        config: BrokerConfig,
        disk_ratio: Callable[[Path], float] = disk_used_ratio,
        clock: Callable[[], float] = time.time,
        archived_offset: ArchivedOffset = nothing_archived,
        consumed_offsets: ConsumedOffsets = no_consumers,
        replica_floor: ReplicaFloor = no_floor,
    ) -> None:
        """``archived_offset(topic, queue_id)`` is consulted by retention when tieredStoreEnable is
        on (the broker gives its tiered offset table), ``consumed_offsets(topic, queue_id)`` (each
        group's committed offset, from the broker's offset table) before a forced deletion,
        ``replica_floor()`` (a slave's master's commitlog min offset) before every deletion; all
        may be called from the retention thread."""
        self.config = config
        self.root = config.root
        self.clock = clock
        self.store_host = pack_host(config.broker_ip1, config.listen_port)
        self.delays_ms = np.array(parse_delay_levels(config.message_delay_level), dtype=np.int64)
        self.commitlog = CommitLog(store_path(self.root, COMMITLOG_DIR), config.maped_file_size_commit_log,
                                   logic_reserve(config))
        self.index = (
            IndexService(store_path(self.root, INDEX_DIR), config.max_hash_slot_num, config.max_index_num)
            if config.message_index_enable
            else None
        )
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.retention = RetentionService(config, self.commitlog, self._dispatched_queues,
                                          self._delete_logic_files_below, disk_ratio, clock, archived_offset,
                                          consumed_offsets, replica_floor)
        self._lock = StoreLock(store_path(self.root, LOCK_FILE))
        self._put_lock = threading.Lock()
        # held while the checkpoint is taken: a truncation lowers the safe offset in between
        self._checkpoint_lock = threading.Lock()
        self._queues_lock = threading.Lock()
        self._dispatcher: Dispatcher | None = None
        self._next_queue_offset: dict[tuple[str, int], int] = {}
        self._last_store_ts = 0
        self._checkpoint: Checkpoint | None = None
        self._group_commit: GroupCommit | None = None
        self._tasks: list[PeriodicTask] = []
        self._running = False
        self._disk_full: str | None = None  # why writes are refused since a file did not fit the disk
        self._rebuild_from: int | None = None  # queue and index entries recovery could not build (full disk)
        self.recovery: RecoveryReport | None = None
        self._corrupt: set[int] = set()  # commitlog offsets of the damaged units found (never served)
        # units below this commitlog offset are not checked (yet): older than the last
        # checkCRCOnRecoverFiles files, or the background check of those files still runs. Reads
        # check them (header and body CRC) before serving; the others were checked or written since
        self._checked_from = 0
        self.startup_check: threading.Thread | None = None  # the background check after a clean stop
        self._stop_check = threading.Event()
        self._rebuild_next_start = False  # the background check found what only a start can repair
        self._replica_read = 0  # a slave's commitlog offset up to which units went to the dispatcher
        self._last_replica_append = 0.0
        self._replica_trouble: tuple[int, int] | None = None  # the last stretch left to rebuild (logged once)

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def abort_path(self) -> Path:
        return store_path(self.root, ABORT_FILE)

    def start(self) -> MessageStore:
        """Lock the directory, recover, and start flush and retention threads."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            abnormal = self.abort_path.exists()
            self.commitlog.load()
            self._load_queues()
            if self.index is not None:
                self.index.load()
            self._checkpoint = Checkpoint(store_path(self.root, CHECKPOINT_FILE))
            safe = self._checkpoint.safe_offset if self._checkpoint.valid else -1
            as_left = take_clean_stop(store_path(self.root, CLEAN_STOP), safe, self.queues.values())
            check_files = self.config.check_crc_on_recover_files
            later = as_left and not abnormal and check_files > 0  # check while serving
            self.recovery, deferred = recover(
                self.commitlog,
                list(self.queues.values()),
                self._queue_for_write,
                self.index,
                self._checkpoint,
                abnormal,
                self.config.check_crc_on_recover,
                0 if later else check_files,
                defer_crc=abnormal,
                replica=self.config.is_slave,
                delays_ms=self.delays_ms,
            )
            self._corrupt.update(self.recovery.damaged)
            self._checked_from = self.recovery.start_offset
            if deferred is not None:  # body CRCs below the safe offset: checked while serving
                self._checked_from = deferred.below
                self.startup_check = threading.Thread(
                    target=self._check_crcs_in_background, args=(deferred, self.recovery.start_offset),
                    name="startup-check", daemon=True)
            if later:
                end = self.commitlog.max_offset()
                self._checked_from = end
                self.startup_check = threading.Thread(
                    target=self._check_in_background, args=(check_from(self.commitlog, end, False, check_files), end),
                    name="startup-check", daemon=True)
            self._rebuild_from = self.recovery.rebuild_from
            dispatched = self.commitlog.max_offset() if self._rebuild_from is None else self._rebuild_from
            self._dispatcher = Dispatcher(self._queue_for_write, self.index, dispatched, self.delays_ms)
            self._replica_read = dispatched
            if self._rebuild_from is not None:
                self._disk_full = (f"disk full: the store started without room for the consume queue and index "
                                   f"files of the messages from commitlog offset {self._rebuild_from}; writes are "
                                   "refused until space is freed (delete files on that disk or grow it), reads "
                                   "and pulls keep working")
            elif free_bytes(self.root) < self.commitlog.files.space_needed():
                self._disk_full = str(disk_full(self.root, self.commitlog.files.space_needed(),
                                                "the next commitlog file and its reserve (checked at start)"))
            if self._disk_full is not None:
                log.error("starting read-only: %s", self._disk_full)
            self._last_store_ts = max(self.recovery.last_store_timestamp, 0)
            self._sync_queue_offsets()
            if not self._checkpoint_current():
                self._checkpoint_now()
            self.abort_path.touch()
        except BaseException:
            self._close_files()
            self._lock.release()
            raise
        cfg = self.config
        if cfg.flush_disk_type == SYNC_FLUSH:
            self._group_commit = GroupCommit(self.commitlog.flush)
            self._group_commit.start(self.commitlog.max_offset())
        else:
            self._tasks.append(PeriodicTask("flush-commitlog", cfg.flush_interval_commit_log / 1000,
                                            self.commitlog.flush))
        self._tasks.append(PeriodicTask("dispatch", DISPATCH_INTERVAL_S, self._dispatch_replica_in_background
                                        if cfg.is_slave
                                        else self._dispatcher.catch_up_when_idle))
        self._tasks.append(PeriodicTask("flush-logic", cfg.flush_interval_consume_queue / 1000,
                                        self._checkpoint_now))
        self._tasks.append(PeriodicTask("retention", cfg.clean_resource_interval / 1000, self.retention.run_once))
        self._tasks.append(PeriodicTask("disk-space", DISK_CHECK_INTERVAL_S, self._check_disk_space))
        for t in self._tasks:
            t.start()
        if self.startup_check is not None:
            self.startup_check.start()
        self._running = True
        log.info("store started at %s (%s recovery, commitlog [%d, %d))", self.root,
                 "abnormal" if abnormal else "normal", self.commitlog.min_offset(), self.commitlog.max_offset())
        return self

    def shutdown(self) -> None:
        """Stop threads, flush everything, checkpoint, remove the abort file, unlock."""
        if not self._running:
            return
        self._running = False
        for t in self._tasks:
            t.stop()
        self._tasks.clear()
        if self._group_commit is not None:
            self._group_commit.stop()
        self._stop_check.set()
        if self.startup_check is not None:
            self.startup_check.join()
        with self._put_lock:
            if self.config.is_slave:  # a clean restart then has nothing to rebuild, nor a unit's first bytes
                self._drop_partial_unit()
            self._checkpoint_now()
            try:
                if not self._rebuild_next_start:  # without the record the next start checks and rebuilds first
                    write_clean_stop(store_path(self.root, CLEAN_STOP), self.commitlog.max_offset(),
                                     self.queues.values())
            except OSError as e:
                log.warning("store: cannot record the clean stop: %s", e)
            self.abort_path.unlink(missing_ok=True)
            self._close_files()
        self._lock.release()
        log.info("store at %s shut down cleanly", self.root)

    def __enter__(self) -> MessageStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _close_files(self) -> None:
        self.commitlog.close()
        for cq in self.queues.values():
            cq.close()
        if self.index is not None:
            self.index.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
            self._checkpoint = None

    def _sync_queue_offsets(self) -> None:
        """Queue minimums and next offsets from the consume queues (after recovery built them)."""
        for key, cq in list(self.queues.items()):
            cq.correct_min_offset(self.commitlog.min_offset())
            self._next_queue_offset[key] = cq.max_offset

    def _check_in_background(self, start: int, end: int) -> None:
        """Check the units of ``[start, end)`` and the consume queues against them while the store
        serves (see ``clean_stop``); until done, reads check those units themselves."""
        if self._stop_check.wait(STARTUP_CHECK_DELAY_S):
            return
        try:
            damaged, self._rebuild_next_start = check_region(self.commitlog, list(self.queues.values()), start, end,
                                                             self.config.check_crc_on_recover, self._stop_check)
        except (LookupError, ValueError, OSError) as e:  # e.g. retention deleted a file being checked
            log.warning("store: start-up check of commitlog [%d, %d) stopped: %s; reads keep checking those units",
                        start, end, e)
            return
        if not self._stop_check.is_set():
            self._corrupt.update(damaged.tolist())
            self._checked_from = start

    def _check_crcs_in_background(self, deferred: DeferredCrc, checked_from: int) -> None:
        """The body CRCs a start after a crash deferred (see ``DeferredCrc``); until done, reads
        check those units themselves."""
        if self._stop_check.wait(STARTUP_CHECK_DELAY_S):
            return
        try:
            with self._queues_lock:
                queues = dict(self.queues)
            damaged = deferred.check(self.commitlog, queues, self._stop_check)
        except (LookupError, ValueError, OSError) as e:  # e.g. retention deleted a file being checked
            log.warning("store: start-up check of the body CRCs below commitlog offset %d stopped: %s; reads keep "
                        "checking those units", deferred.below, e)
            return
        if damaged is not None:
            self._corrupt.update(damaged.tolist())
            self._checked_from = checked_from

    def _checkpoint_current(self) -> bool:
        """Whether the checkpoint already says what one taken now would (a clean restart): the
        start then skips its fdatasyncs, which a busy disk can make slow."""
        cp, rec = self._checkpoint, self.recovery
        return (cp is not None and rec is not None and cp.valid and rec.units_replayed == 0
                and cp.safe_offset == self.commitlog.max_offset())

    def _checkpoint_now(self) -> None:
        """Flush commitlog, queues and index, then record the dispatched offset as safe."""
        with self._checkpoint_lock:
            self._take_checkpoint()

    def _take_checkpoint(self) -> None:
        if self._dispatcher is None:
            return
        safe = self._dispatcher.catch_up()
        ts = self._dispatcher.last_store_timestamp
        self.commitlog.flush()
        with self._queues_lock:
            queues = list(self.queues.values())
        for cq in queues:
            cq.flush()
        if self.index is not None:
            self.index.flush()
        if self._checkpoint is not None:
            self._checkpoint.update(safe, ts)

    # -- consume queues -------------------------------------------------------------------
    def _queue_dir(self, topic: str, queue_id: int) -> Path:
        return store_path(self.root, CONSUME_QUEUE_DIR, topic, str(queue_id))

    def _load_queues(self) -> None:
        base = store_path(self.root, CONSUME_QUEUE_DIR)
        if not base.exists():
            return
        for tdir in sorted(base.iterdir()):
            for qdir in sorted(tdir.iterdir()):
                if _QUEUE_DIR.match(qdir.name):
                    cq = ConsumeQueue(tdir.name, int(qdir.name), self._queue_dir(tdir.name, int(qdir.name)),
                                      self.config.maped_file_size_consume_queue)
                    cq.load()
                    self.queues[(tdir.name, int(qdir.name))] = cq

    def _queue_for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            with self._queues_lock:
                cq = self.queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self._queue_dir(topic, queue_id),
                                      self.config.maped_file_size_consume_queue)
                    self.queues = {**self.queues, key: cq}
        return cq

    def _dispatched_queues(self) -> list[ConsumeQueue]:
        """Every consume queue, with every message stored so far dispatched into it."""
        if self._dispatcher is not None:
            self._dispatcher.catch_up()
        return list(self.queues.values())

    def _delete_logic_files_below(self, commitlog_min: int) -> None:
        for cq in self._dispatched_queues():  # entries still pending must be judged too
            cq.delete_files_below(commitlog_min)
        if self.index is not None:
            self.index.delete_files_below(commitlog_min)

    # -- writes ---------------------------------------------------------------------------
    def put_message(self, message: Message, queue_id: int, uniq_key: str | None = None) -> PutResult:
        """Store one message (a batch of one)."""
        batch = MessageBatch.from_messages([message], queue_id, [uniq_key] if uniq_key else None)
        return self.put_messages(batch)

    def put_messages(self, batch: MessageBatch, wait_flush: bool = True) -> PutResult:
        """Store a batch for one topic queue. Invalid input raises before anything is written.

        Under SYNC_FLUSH returns once the batch is on disk (FLUSH_DISK_TIMEOUT if that takes
        longer than ``syncFlushTimeout``; the messages are stored either way). With
        ``wait_flush=False`` it returns at once and ``durable(result.end_offset)`` gives a future
        (how the broker waits without blocking its event loop).
        """
        if not self._running:
            raise StoreNotWritableError("store is not running: start() it first")
        if self.config.is_slave:
            raise StoreNotWritableError("this store is a slave's (brokerRole=SLAVE): only its master writes")
        refusal = self.retention.refusal
        if refusal is not None:
            raise StoreNotWritableError(refusal)
        refusal = self.disk_full
        if refusal is not None:
            raise DiskFullError(refusal)
        assert self._dispatcher is not None
        batch.validate(self.config.max_message_size)
        key = (batch.topic, batch.queue_id)
        with self._put_lock:
            now = max(int(self.clock() * 1000), self._last_store_ts)
            queue_offset = self._next_queue_offset.get(key, 0)
            try:
                res = self.commitlog.append_batch(batch, queue_offset, now, self.store_host)
            except DiskFullError as e:
                if self._disk_full is None:
                    log.error("refusing writes: %s", e)
                self._disk_full = str(e)
                raise
            self._next_queue_offset[key] = queue_offset + len(batch)
            self._dispatcher.enqueue(
                AppendRecord(batch.topic, batch.queue_id, queue_offset, res.physical_offsets, res.sizes,
                             res.data, batch.property_lengths, now)
            )
            self._last_store_ts = now
        if self._dispatcher.backlog >= DISPATCH_BACKLOG:
            self._dispatcher.catch_up()
        status = PutStatus.PUT_OK
        if wait_flush and self._group_commit is not None and not self._group_commit.wait(
            res.end_offset, self.config.sync_flush_timeout / 1000
        ):
            status = PutStatus.FLUSH_DISK_TIMEOUT
        return PutResult(status, queue_offset, res.physical_offsets, res.sizes, now, self.store_host)

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """A slave's write: the master's commitlog bytes at the same ``offset`` (see
        ``CommitLog.append_raw``). Consume queue and index entries for the complete units follow
        (a transfer may end inside a unit: its entries come with the next one) before any read,
        and in the background once ``REPLICA_DISPATCH_BYTES`` wait or appends pause, never here:
        the slave acknowledges the bytes (what a SYNC_MASTER put waits for) as soon as they are
        written. Returns the commitlog's new end. Raises ``ReplicationError`` (nothing written)
        when ``offset`` is not this commitlog's end or when the bytes show the two commitlogs
        diverged (see ``_check_continues``), ``DiskFullError`` when the file does not fit the disk."""
        if not self._running:
            raise StoreNotWritableError("store is not running: start() it first")
        with self._put_lock:
            self._check_continues(offset, data)
            end = self.commitlog.append_raw(offset, data)
        self._last_replica_append = time.monotonic()
        return end

    def _dispatch_replica_in_background(self) -> None:
        """A slave's dispatch duty: one large pass once ``REPLICA_DISPATCH_BYTES`` wait or appends
        pause (each pass has a fixed cost, see ``dispatch``), like a master's ``catch_up_when_idle``."""
        assert self._dispatcher is not None
        waiting = self.commitlog.max_offset() - self._replica_read
        if waiting > 0 and (waiting >= REPLICA_DISPATCH_BYTES
                            or time.monotonic() - self._last_replica_append >= IDLE_BEFORE_DISPATCH_S):
            self._catch_up_replica()
            self._dispatcher.catch_up()
        else:
            self._dispatcher.catch_up_when_idle()  # what reads' small passes left (index entries)

    def _catch_up_replica(self) -> None:
        """A slave's append records for every complete replicated unit, handed to the dispatcher
        (before reads, and in the background)."""
        if self._dispatcher is not None and self._replica_read < self.commitlog.max_offset():
            with self._put_lock:
                self._dispatch_replicated()

    def _dispatch_replicated(self) -> bool:
        """Append records for the replicated units past those read (under the put lock), see
        ``replica_units``; what that path leaves (damaged units, a broken chain) goes to recovery's
        rebuild, which quarantines and reports it as a start would. False while that rebuild waits
        for disk space (whole units past ``_replica_read`` then wait too)."""
        assert self._dispatcher is not None
        # an empty commitlog restarts at the master's first byte sent, a file start maybe past 0
        start = max(self._replica_read, self.commitlog.min_offset())
        got = read_replicated(self.commitlog, start, self.commitlog.max_offset(),
                              self._next_queue_offset, self.config.check_crc_on_recover)
        for r in got.records:
            self._dispatcher.enqueue(r)
            self._next_queue_offset[(r.topic, r.queue_id)] = r.queue_offset + int(r.sizes.size)
            self._last_store_ts = max(self._last_store_ts, r.store_timestamp)
        self._replica_read = got.end
        return got.trouble is None or self._rebuild_replicated(got.trouble)

    def _rebuild_replicated(self, why: str) -> bool:
        """Recovery's rebuild over the replicated units ``replica_units`` would not read (under the
        put lock), once everything before them is dispatched; False when a full disk defers it."""
        assert self._dispatcher is not None
        self._dispatcher.catch_up()
        if self._dispatcher.backlog or self._dispatcher.stalled is not None:
            return False  # a full disk: tried again on the next pass
        start = self._replica_read
        with self._queues_lock:
            queues = list(self.queues.values())
        done, ts, damaged = rebuild(self.commitlog, queues, start, start, self._queue_for_write, self.index,
                                    self.config.check_crc_on_recover, self.delays_ms)
        if (start, done) != self._replica_trouble:
            log.warning("replicated units: %s; built by recovery's rebuild up to commitlog offset %d", why, done)
            self._replica_trouble = (start, done)
        self._corrupt.update(damaged.tolist())
        self._last_store_ts = max(self._last_store_ts, ts)
        self._dispatcher.rebuilt(done, self._last_store_ts)
        self._replica_read = max(start, done)
        self._sync_queue_offsets()
        return True

    def drop_partial_unit(self) -> int:
        """A slave's commitlog ends inside a unit when a transfer was cut off there (the master sends
        ``haTransferBatchSize`` bytes at a time, not whole units): drop those first bytes, so that it
        ends after its last whole unit; returns that end. A slave does this before it reports its end
        to a master (which refuses an end inside one of its units) and at shutdown (recovery after a
        clean stop would take a unit's first bytes for a damaged unit). The master sends it whole."""
        with self._put_lock:
            self._drop_partial_unit()
            return self.commitlog.max_offset()

    def _drop_partial_unit(self) -> None:
        """``drop_partial_unit`` under the put lock: every whole unit is read for dispatch first, so
        the offset read up to is the end of the last whole one (the dispatcher may not have built
        their entries yet: its dispatched offset lags). Nothing is dropped while a full disk defers
        the rebuild of damaged units: the bytes past the offset read are not known to be a cut unit."""
        if not self._dispatch_replicated():
            return
        whole, end = self._replica_read, self.commitlog.max_offset()
        if whole < end:
            log.info("store: dropping the first %d bytes of a replicated unit at commitlog offset %d (a transfer "
                     "cut off inside it); the master sends it again whole", end - whole, whole)
            self.commitlog.files.truncate(whole)

    def _check_continues(self, offset: int, data: bytes | memoryview) -> None:
        """Where this commitlog ends after a whole unit, the master's bytes there must begin a unit
        written at this very offset (or the blank closing a file). Anything else means the two
        commitlogs differ before this offset (this store was written to as a master, say): merging
        would make a commitlog neither of them wrote. (A divergence that happens to end on one of
        the master's unit boundaries is not seen here; nor one while entries wait to be built: the
        check is sure to run on the first transfer after a (re)connect, where a diverged slave is.)"""
        if offset != self._replica_read or len(data) < SIZE_MAGIC.size:
            return  # inside a unit the master started sending: its start was checked
        _, magic = SIZE_MAGIC.unpack_from(data)
        if magic == BLANK_MAGIC:
            return
        if magic == MESSAGE_MAGIC:
            if len(data) < PHYSICAL_OFFSET_OFFSET + INT64.size:
                return
            written_at = INT64.unpack_from(data, PHYSICAL_OFFSET_OFFSET)[0]
            if written_at == offset:
                return
            why = f"the master's unit there says it was written at offset {written_at}"
        else:
            why = "the master's bytes there do not begin a message unit"
        raise ReplicationError(f"this commitlog ends at offset {offset} after a whole unit, but {why}: the two "
                               "commitlogs diverged before it (was this store written to as a master?). Nothing "
                               "was merged; empty this store directory to copy the master's commitlog afresh")

    @property
    def disk_full(self) -> str | None:
        """Why writes are refused for a full disk (a file that could not be allocated), else None."""
        return self._disk_full or (self._dispatcher.stalled if self._dispatcher is not None else None)

    @property
    def write_refusal(self) -> str | None:
        """Why writes are refused now (disk over a ratio, or full), None while they are accepted."""
        return self.retention.refusal or self.disk_full

    def _check_disk_space(self) -> None:
        """While refusing writes for a full disk: accept them again once the next commitlog file
        (and the reserve kept with it) fits."""
        if self._disk_full is None:
            return
        if self._rebuild_from is not None:
            self._finish_rebuild()
            if self._rebuild_from is not None:
                return
        need = self.commitlog.files.space_needed()
        free = free_bytes(self.root)
        if free >= need:
            log.warning("disk space is back (%d bytes free, %d needed for the next file): accepting writes again",
                        free, need)
            self._disk_full = None

    def _finish_rebuild(self) -> None:
        """Build the entries recovery could not (a full disk at start), once the disk takes them."""
        assert self._rebuild_from is not None and self._dispatcher is not None
        with self._put_lock:  # no put runs meanwhile anyway: they are refused until this is done
            try:
                assert self.recovery is not None
                end, ts, damaged = rebuild(self.commitlog, list(self.queues.values()), self._rebuild_from,
                                           self.recovery.safe_offset, self._queue_for_write, self.index,
                                           self.config.check_crc_on_recover, self.delays_ms)
            except DiskFullError:
                return
            self._corrupt.update(damaged.tolist())
            self._dispatcher.rebuilt(end, ts)
            self._replica_read = end
            self._last_store_ts = max(self._last_store_ts, ts)
            self._sync_queue_offsets()
            log.warning("consume queue and index entries from commitlog offset %d to %d built", self._rebuild_from, end)
            self._rebuild_from = None

    def dispatch_backlog(self) -> int:
        """Messages stored but not yet in their consume queue and the index."""
        return self._dispatcher.backlog if self._dispatcher is not None else 0

    def durable(self, offset: int) -> Future[None] | None:
        """Under SYNC_FLUSH, a future done once the commitlog is flushed past ``offset``;
        None under ASYNC_FLUSH (nothing to wait for)."""
        return self._group_commit.future(offset) if self._group_commit is not None else None

    # -- reads ----------------------------------------------------------------------------
    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The consume queue for a read, with every append so far dispatched into it."""
        if self.config.is_slave:
            self._catch_up_replica()
        if self._dispatcher is not None:
            self._dispatcher.catch_up_queues()
        return self.queues.get((topic, queue_id))

    def get_queue_entries(self, topic: str, queue_id: int, offset: int, count: int) -> np.ndarray:
        """Up to ``count`` consume-queue entries (``phys``, ``size``, ``tag``) from ``offset``: the
        schedule service reads due times (the tag codes) by the thousand."""
        cq = self._queue(topic, queue_id)
        return cq.get(offset, count) if cq is not None else np.zeros(0, dtype=ENTRY)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_cold_offset(self, topic: str, queue_id: int) -> int:
        """First queue offset whose message is in the active (last) commitlog file: every offset
        below it lies in full files, the ones retention may delete (what tiered storage offloads).
        The max offset when the queue has no message in the active file."""
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        active = self.commitlog.files.last
        return cq.max_offset if active is None else cq.first_offset_at_or_after(active.file_from_offset)

    def queue_ids(self, topic: str) -> list[int]:
        if self.config.is_slave:
            self._catch_up_replica()
        if self._dispatcher is not None:
            self._dispatcher.catch_up_queues()
        return sorted(q for (t, q) in self.queues if t == topic)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_codes: set[int] | None = None,
        max_bytes: int = DEFAULT_MAX_GET_BYTES,
        unit_filter: UnitFilter | None = None,
        readable_end: int | None = None,
    ) -> GetResult:
        """Up to ``max_count`` units from ``offset`` (only those whose tag code is in
        ``tag_codes`` if given, and that ``unit_filter`` keeps if given), back to back in one
        buffer, with the offset to ask next. ``readable_end``: no unit ending past this commitlog
        offset is served (a queue whose next unit does is answered as if at its end)."""
        cq = self._queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        filtering = bool(tag_codes) or unit_filter is not None
        scan = max(max_count, MAX_FILTER_SCAN) if filtering else max_count
        ent = cq.get(offset, scan)
        if readable_end is not None:  # a queue's units grow in commitlog offset: the readable ones lead
            ent = ent[:int(np.searchsorted(ent["phys"].astype(np.int64) + ent["size"], readable_end, side="right"))]
            if ent.size == 0:
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        phys = ent["phys"].astype(np.int64)
        sizes = ent["size"].astype(np.int64)
        # a queue's units grow in commitlog offset: any deleted by retention lead the window
        first = 0
        if phys.size and phys[0] < self.commitlog.min_offset():
            first = int(np.searchsorted(phys, self.commitlog.min_offset()))
        if tag_codes:
            candidates = first + np.flatnonzero(np.isin(ent["tag"][first:], np.fromiter(tag_codes, dtype=np.int64)))
        elif cq.has_quarantined:
            candidates = first + np.flatnonzero(ent["tag"][first:] != QUARANTINED_TAG)
        else:
            candidates = np.arange(first, ent.size)
        judged = None
        if unit_filter is not None and candidates.size:
            # read the candidates (bounded by bytes) until enough match, keep those the filter matches
            window = candidates[:max(1, int(np.searchsorted(np.cumsum(sizes[candidates]), UNIT_FILTER_SCAN_BYTES,
                                                            side="right")))]
            try:
                read, judged, keep = _judge(self.commitlog.read_units, window, phys, sizes, max_count, unit_filter)
            except LookupError:
                return GetResult(GetStatus.OFFSET_FOUND_NULL, max(cq.min_offset, offset), cq.min_offset, hi)
            unread = ent.size if read.size == candidates.size else int(read[-1]) + 1
            judged_starts = np.zeros(read.size, dtype=np.int64)
            np.cumsum(sizes[read][:-1], out=judged_starts[1:])
            judged_starts = judged_starts[keep]
            candidates = read[keep]
        picked = candidates[:max_count]
        if picked.size and int(sizes[picked].sum()) > max_bytes:
            within = np.cumsum(sizes[picked]) <= max_bytes
            within[0] = True  # always make progress, even past max_bytes
            picked = picked[within]
        # more matches left in the window: resume right after the last one returned
        window_end = unread if judged is not None else ent.size
        scanned_to = offset + (int(picked[-1]) + 1 if picked.size < candidates.size else window_end)
        if picked.size == 0:
            status = GetStatus.NO_MATCHED_MESSAGE if filtering else GetStatus.OFFSET_FOUND_NULL
            return GetResult(status, scanned_to, lo, hi)
        phys, sizes = phys[picked], sizes[picked]
        if judged is not None:  # already read: cut the kept units (a prefix of those matched) out
            data = gather_ranges(np.frombuffer(judged, dtype=np.uint8), judged_starts[:picked.size], sizes).tobytes()
        else:
            try:
                data = self.commitlog.read_units(phys, sizes)
            except LookupError:  # retention removed the file under us: the queue minimum has moved
                return GetResult(GetStatus.OFFSET_FOUND_NULL, max(cq.min_offset, offset), cq.min_offset, hi)
        offsets = offset + picked
        if int(phys[0]) < self._checked_from:  # units no check has seen: check them now
            bad = served_faults(data, sizes, queue_id, offsets, phys)
            if bad.any():
                data, offsets, phys, sizes = self._drop_damaged(topic, queue_id, data, offsets, phys, sizes, bad)
                if not sizes.size:
                    return GetResult(GetStatus.OFFSET_FOUND_NULL, scanned_to, lo, hi)
        return GetResult(GetStatus.FOUND, scanned_to, lo, hi, data, offsets, sizes,
                         self.commitlog.max_offset() - int(phys[-1]))

    def _drop_damaged(self, topic: str, queue_id: int, data: bytes, offsets: np.ndarray, phys: np.ndarray,
                      sizes: np.ndarray, bad: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
        """A read's units without the damaged ones (logged and counted once per unit)."""
        ends = np.cumsum(sizes)
        for i in np.flatnonzero(bad).tolist():
            if int(phys[i]) not in self._corrupt:
                self._corrupt.add(int(phys[i]))
                mf = self.commitlog.files.find(int(phys[i]))
                log.warning("store: %s:%d@%d: the unit at commitlog offset %d (file %s) is damaged: not served",
                            topic, queue_id, int(offsets[i]), int(phys[i]), mf.path.name if mf else "-")
        keep = np.flatnonzero(~bad)
        data = b"".join(data[int(ends[i]) - int(sizes[i]) : int(ends[i])] for i in keep.tolist())
        return data, offsets[keep], phys[keep], sizes[keep]

    @property
    def corrupt_units(self) -> int:
        """Damaged units found so far: quarantined by the start-up checks or skipped by reads."""
        return len(self._corrupt)

    def _store_time_of(self, phys: int) -> int | None:
        view = self.commitlog.read(phys + STORE_TIMESTAMP_OFFSET, 8)
        return None if view is None else INT64.unpack(view)[0]

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First queue offset stored at or after ``timestamp`` ms (max offset if none)."""
        cq = self._queue(topic, queue_id)
        return cq.offset_by_time(timestamp, self._store_time_of) if cq else 0

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return -1
        ts = self._store_time_of(int(cq.get(cq.min_offset, 1)["phys"][0]))
        return -1 if ts is None else ts

    def look_message_by_offset(self, phys: int) -> bytes | None:
        """The unit at commitlog offset ``phys``, or None if absent or deleted."""
        if phys < self.commitlog.min_offset():
            return None
        return self.commitlog.read_unit(phys)

    def look_message_by_id(self, msg_id: str) -> bytes | None:
        """The unit an offsetMsgId names (this store's ids only)."""
        host, phys = parse_offset_msg_id(msg_id)
        if host != self.store_host:
            return None
        return self.look_message_by_offset(phys)

    def query_by_key(
        self, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = 2**62
    ) -> list[bytes]:
        """Units of ``topic`` carrying ``key`` (in KEYS or as UNIQ_KEY), stored within
        ``[begin, end]`` ms, newest first. Hash hits are verified against the unit itself."""
        if self.index is None:
            raise StoreError("the message index is disabled (messageIndexEnable=false)")
        if self.config.is_slave:
            self._catch_up_replica()
        if self._dispatcher is not None:
            self._dispatcher.catch_up()
        out = []
        # index entries keep whole seconds since their file's begin time (a stored time reads
        # back up to 999 ms early): widen the lookup, the exact check against the unit follows
        for phys in self.index.query(topic, key, max_num * 2, begin - 999, end):
            unit = self.look_message_by_offset(phys)
            if unit is None:
                continue
            msg = decode_message(unit)
            cq = self.queues.get((msg.topic, msg.queue_id))
            if cq is None or not cq.holds(msg.queue_offset, phys):
                continue  # its topic was deleted (and maybe created again): not a message of today's topic
            if msg.topic == topic and (key in msg.keys or msg.properties.get("UNIQ_KEY") == key):
                if begin <= msg.store_timestamp <= end:
                    out.append(unit)
                    if len(out) >= max_num:
                        break
        return out

    def delete_topic(self, topic: str) -> int:
        """Forget ``topic``: its consume queues are destroyed, so its offsets start again from 0
        and key queries no longer find its messages (their units stay in the commitlog until
        retention deletes the files). Returns how many queues were removed. A topic that is no plain
        directory name raises StorePathError before anything is touched."""
        assert self._dispatcher is not None
        topic_dir = store_path(self.root, CONSUME_QUEUE_DIR, topic)
        with self._put_lock:
            self._dispatcher.catch_up()
            with self._queues_lock:
                gone = {k: cq for k, cq in self.queues.items() if k[0] == topic}
                self.queues = {k: cq for k, cq in self.queues.items() if k[0] != topic}
            for key, cq in gone.items():
                cq.destroy()
                self._next_queue_offset.pop(key, None)
            shutil.rmtree(topic_dir, ignore_errors=True)
            # move the safe offset past the topic's units, so crash recovery never rebuilds them
            self._checkpoint_now()
        log.info("topic %s deleted from the store (%d queues)", topic, len(gone))
        return len(gone)

    def truncate_to(self, offset: int) -> int:
        """Cut the store back to commitlog ``offset`` (a slave dropping a tail its new master's
        history does not have): units, consume queue entries and index entries at and past it go;
        an offset at or below the commitlog's min empties the store (its commitlog then restarts
        wherever the next replicated bytes start). Crash-safe: see ``truncation``. Returns the
        commitlog's new end. ``StoreError`` (nothing changed) for an offset past the end or inside
        a unit. Reads racing the cut check the units they serve (``_checked_from``)."""
        if not self._running:
            raise StoreNotWritableError("store is not running: start() it first")
        assert self._dispatcher is not None and self._checkpoint is not None
        with self._put_lock, self._checkpoint_lock:
            self._stop_check.set()  # the start-up check would judge entries this changes; reads check instead
            if self.startup_check is not None:
                self.startup_check.join()
            # a slave's units read for dispatch, then built (a full disk may defer either)
            read_all = self._dispatch_replicated() if self.config.is_slave else True
            self._dispatcher.catch_up()
            end = self.commitlog.max_offset()
            if not read_all or self._rebuild_from is not None or self._dispatcher.backlog:
                raise StoreError(f"cannot truncate while entries wait to be built ({self.disk_full}): free disk "
                                 "space first; nothing truncated")
            if offset > end:
                raise StoreError(f"cannot truncate to commitlog offset {offset}: the commitlog ends at {end}; "
                                 "nothing truncated")
            if offset == end and self.commitlog.files.files:
                return end
            everything = offset <= self.commitlog.min_offset()
            if not everything:
                check_unit_start(self.commitlog, offset)
            checked_from, self._checked_from = self._checked_from, max(self._checked_from, end)
            cut = max(offset, 0)
            self._checkpoint.update(min(self._checkpoint.safe_offset, cut), self._last_store_ts)
            with self._queues_lock:
                queues = list(self.queues.values())
            gone = queues if everything else cut_queues(queues, cut)
            with self._queues_lock:
                self.queues = {k: cq for k, cq in self.queues.items() if cq not in gone}
            for cq in gone:
                cq.destroy()
                self._next_queue_offset.pop((cq.topic, cq.queue_id), None)
                with contextlib.suppress(OSError):  # the topic's directory, once its last queue went
                    store_path(self.root, CONSUME_QUEUE_DIR, cq.topic).rmdir()
            cut_commitlog(self.commitlog, self.index, cut)
            new_end = self.commitlog.max_offset()
            self._dispatcher.rebuilt(new_end, self._last_store_ts)
            self._replica_read = new_end
            if self._group_commit is not None:
                self._group_commit.truncated(new_end)
            self._sync_queue_offsets()
            self._corrupt = {p for p in self._corrupt if p < new_end}
            self._checked_from = min(checked_from, new_end)
            self._take_checkpoint()
        log.warning("store truncated to commitlog offset %d: it ended at %d, now at %d (%d consume queues removed)",
                    offset, end, new_end, len(gone))
        return new_end

    def config_file(self, name: str) -> JsonConfigFile:
        """One of the JSON files under ``config/`` (see ``config_file`` module names)."""
        return config_file(self.root, name)
