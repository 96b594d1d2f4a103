"""``MessageStore``: the facade the broker talks to, over parts with one job each (as RocketMQ's
``DefaultMessageStore`` delegates to ``CommitLog``, ``ConsumeQueueStore``, ``IndexService``):

- ``commitlog`` (``CommitLog``): the units, appended by puts;
- ``queues`` (``ConsumeQueueStore``): one consume queue per topic queue;
- ``index`` (``IndexService``): key lookups when messageIndexEnable, checked against the units by ``key_query``;
- the ``Dispatcher`` (``dispatch``): builds queue and index entries from appends, in batched passes;
- ``WriteState`` (``write_state``): the put lock, each queue's next offset, the newest store time;
- ``Checkpointer`` (``checkpoint``): flushes everything and records the safe offset;
- ``recover`` (``recovery``) at start; ``CheckedUnits`` and ``StartupCheck`` (``unit_checks``) while serving;
- ``QueueReader`` (``queue_reader``): gets by queue offset, filtered;
- ``ReplicaWriter`` (``replica_writer``): a slave's appends of its master's bytes, and their entries;
- ``Truncator`` (``truncation``): cutting the store back to an offset, crash-safe;
- ``FullDisk`` (``full_disk``): refusing writes while the disk is full, and accepting them again;
- ``RetentionService`` (``retention``): deleting old files.

What stays here is the public API and the order the parts start and stop in.

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

Thread-safety: every public method may be called from any thread. Puts, a slave's appends,
truncation and rebuilds are serialised by one lock (``WriteState.lock``); gets and queries run
without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from spark_mq.common.config import SYNC_FLUSH, BrokerConfig
from spark_mq.common.delay_levels import parse_delay_levels
from spark_mq.common.errors import DiskFullError, StoreError, StoreNotWritableError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.common.unit.layout import INT64, STORE_TIMESTAMP_OFFSET
from spark_mq.store.checkpoint import Checkpointer
from spark_mq.store.clean_stop import FILE_NAME as CLEAN_STOP
from spark_mq.store.clean_stop import take_clean_stop, write_clean_stop
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.config_file import JsonConfigFile, config_file
from spark_mq.store.consume_queue import ConsumeQueue, entry_record
from spark_mq.store.consume_queue_store import ConsumeQueueStore
from spark_mq.store.dispatch import AppendRecord, Dispatcher
from spark_mq.store.flush import GroupCommit, PeriodicTask
from spark_mq.store.full_disk import DISK_CHECK_INTERVAL_S, FullDisk
from spark_mq.store.index_file import index_file_size
from spark_mq.store.index_service import IndexService
from spark_mq.store.key_query import unit_at, units_with_key
from spark_mq.store.lock_file import StoreLock
from spark_mq.store.queue_reader import DEFAULT_MAX_GET_BYTES, QueueReader, UnitFilter
from spark_mq.store.recovery import RecoveryReport, check_from, rebuild, recover
from spark_mq.store.replica_writer import ReplicaWriter
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
from spark_mq.store.store_paths import ABORT_FILE, CHECKPOINT_FILE, COMMITLOG_DIR, INDEX_DIR, LOCK_FILE, store_path
from spark_mq.store.truncation import Truncator
from spark_mq.store.unit_checks import CheckedUnits, StartupCheck
from spark_mq.store.write_state import WriteState

log = logging.getLogger(__name__)

# background dispatch poll (reads also catch up on demand); its pass waits for 10 ms of idle
# appends anyway, and every wake-up takes the GIL from the event loop (1 ms meant 1000 a second)
DISPATCH_INTERVAL_S = 0.010
DISPATCH_BACKLOG = 8_192  # messages: past this a put dispatches the backlog itself
# messages left undispatched by pulls at a queue's end (at_queue_end): a pull past it reads and dispatches them,
# a batch at ~1/6 of a one-message dispatch's cost each, before a put's catch-up of DISPATCH_BACKLOG (a 10-50 ms
# stall at 5,000 msg/s while no 10 ms idle lets the dispatcher thread run)
AT_END_MAX_BACKLOG = 32
RESERVED_QUEUE_FILES = 16  # consume queue files' worth of space a commitlog roll leaves free


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
        self.delays_ms = tuple(parse_delay_levels(config.message_delay_level))  # ms, level 1 first
        self.commitlog = CommitLog(store_path(self.root, COMMITLOG_DIR), config.maped_file_size_commit_log,
                                   logic_reserve(config))
        self.index = (
            IndexService(store_path(self.root, INDEX_DIR), config.max_hash_slot_num, config.max_index_num)
            if config.message_index_enable
            else None
        )
        self.queues = ConsumeQueueStore(self.root, config.maped_file_size_consume_queue)
        self.retention = RetentionService(config, self.commitlog, self._dispatched_queues,
                                          self._delete_logic_files_below, disk_ratio, clock, archived_offset,
                                          consumed_offsets, replica_floor)
        self._lock = StoreLock(store_path(self.root, LOCK_FILE))
        self._writes = WriteState()
        # positioned at start, where recovery left the entries built
        self._dispatcher = Dispatcher(self.queues.for_write, self.index, 0, self.delays_ms)
        self._checkpointer = Checkpointer(store_path(self.root, CHECKPOINT_FILE), self._dispatcher, self.commitlog,
                                          self.queues, self.index)
        self._checks = CheckedUnits(self.commitlog)
        self._startup_check = StartupCheck(self.commitlog, self.queues, self._checks, config.check_crc_on_recover)
        self._reader = QueueReader(self.commitlog, self._checks)
        self._replica = ReplicaWriter(self.commitlog, self.queues, self.index, self._dispatcher, self._writes,
                                      self._checks, config.check_crc_on_recover, self.delays_ms)
        self._full_disk = FullDisk(self.root, self.commitlog, self._dispatcher, self._writes.lock,
                                   self._rebuild_entries)
        self._truncator = Truncator(self.commitlog, self.queues, self.index, self._dispatcher, self._writes,
                                    self._checkpointer, self._checks, self._startup_check, self._full_disk,
                                    self._replica if config.is_slave else None)
        self._group_commit: GroupCommit | None = None
        self._tasks: list[PeriodicTask] = []
        self._running = False
        self.recovery: RecoveryReport | None = None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def abort_path(self) -> Path:
        return store_path(self.root, ABORT_FILE)

    @property
    def startup_check(self) -> threading.Thread | None:
        """The background part of the start-up check, if this start left one (see ``unit_checks``)."""
        return self._startup_check.thread

    def start(self) -> MessageStore:
        """Lock the directory, recover, and start flush and retention threads."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            abnormal = self.abort_path.exists()
            self.commitlog.load()
            self.queues.load()
            if self.index is not None:
                self.index.load()
            checkpoint = self._checkpointer.open()
            safe = checkpoint.safe_offset if checkpoint.valid else -1
            as_left = take_clean_stop(store_path(self.root, CLEAN_STOP), safe, self.queues.values())
            check_files = self.config.check_crc_on_recover_files
            later = as_left and not abnormal and check_files > 0  # check while serving
            self.recovery, deferred = recover(self.commitlog, list(self.queues.values()), self.queues.for_write,
                                              self.index, checkpoint, abnormal, self.config.check_crc_on_recover,
                                              0 if later else check_files, defer_crc=abnormal,
                                              replica=self.config.is_slave, delays_ms=self.delays_ms)
            self._checks.found(self.recovery.damaged)
            self._checks.checked_from = self.recovery.start_offset
            if deferred is not None:  # body CRCs below the safe offset: checked while serving
                self._startup_check.deferred_crcs(deferred, self.recovery.start_offset)
            if later:
                end = self.commitlog.max_offset()
                self._startup_check.region(check_from(self.commitlog, end, False, check_files), end)
            rebuild_from = self.recovery.rebuild_from
            dispatched = self.commitlog.max_offset() if rebuild_from is None else rebuild_from
            self._dispatcher.rebuilt(dispatched, 0)
            self._replica.read = dispatched
            self._full_disk.start(rebuild_from)
            self._writes.last_store_ts = max(self.recovery.last_store_timestamp, 0)
            self._writes.next_offset.update(self.queues.settled(self.commitlog.min_offset()))
            if not (self.recovery.units_replayed == 0 and self._checkpointer.says(self.commitlog.max_offset())):
                self._checkpointer.take()
            self.abort_path.touch()
        except BaseException:
            self._close_files()
            self._lock.release()
            raise
        self._start_tasks()
        self._startup_check.start()
        self._running = True
        log.info("store started at %s (%s recovery, commitlog [%d, %d))", self.root,
                 "abnormal" if abnormal else "normal", self.commitlog.min_offset(), self.commitlog.max_offset())
        return self

    def _start_tasks(self) -> None:
        cfg = self.config
        if cfg.flush_disk_type == SYNC_FLUSH:
            self._group_commit = GroupCommit(self.commitlog.flush)
            self._group_commit.start(self.commitlog.max_offset())
        else:
            self._tasks.append(PeriodicTask("flush-commitlog", cfg.flush_interval_commit_log / 1000,
                                            self.commitlog.flush))
        self._tasks.append(PeriodicTask("dispatch", DISPATCH_INTERVAL_S, self._replica.dispatch_in_background
                                        if cfg.is_slave
                                        else self._dispatcher.catch_up_when_idle))
        self._tasks.append(PeriodicTask("flush-logic", cfg.flush_interval_consume_queue / 1000,
                                        self._checkpointer.take))
        self._tasks.append(PeriodicTask("retention", cfg.clean_resource_interval / 1000, self.retention.run_once))
        self._tasks.append(PeriodicTask("disk-space", DISK_CHECK_INTERVAL_S, self._full_disk.check))
        for t in self._tasks:
            t.start()

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
        self._startup_check.stop()
        with self._writes.lock:
            if self.config.is_slave:  # a clean restart then has nothing to rebuild, nor a unit's first bytes
                self._replica.drop_partial_unit()
            self._checkpointer.take()
            try:
                if not self._startup_check.rebuild_next_start:  # without the record the next start checks first
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
        self.queues.close()
        if self.index is not None:
            self.index.close()
        self._checkpointer.close()

    def _dispatched_queues(self) -> list[ConsumeQueue]:
        """Every consume queue, with every message stored so far dispatched into it."""
        self._dispatcher.catch_up()
        return list(self.queues.values())

    def _delete_logic_files_below(self, commitlog_min: int) -> None:
        self._dispatcher.catch_up()  # entries still pending must be judged too
        self.queues.delete_files_below(commitlog_min)
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
        batch.validate(self.config.max_message_size)
        key = (batch.topic, batch.queue_id)
        with self._writes.lock:
            now = self._writes.store_time(int(self.clock() * 1000))
            queue_offset = self._writes.next_offset.get(key, 0)
            try:
                res = self.commitlog.append_batch(batch, queue_offset, now, self.store_host,
                                                  self._dispatcher.key_prefix(batch.topic))
            except DiskFullError as e:
                self._full_disk.refuse(e)
                raise
            self._dispatcher.enqueue(
                AppendRecord(batch.topic, batch.queue_id, queue_offset, res.physical_offsets, res.sizes,
                             None, batch.property_lengths, now, list(batch.properties), res.dispatch)
            )
            self._writes.appended(key, queue_offset, len(batch), now)
        if self._dispatcher.backlog >= DISPATCH_BACKLOG:
            self._dispatcher.catch_up()
        status = PutStatus.PUT_OK
        if wait_flush and self._group_commit is not None and not self._group_commit.wait(
            res.end_offset, self.config.sync_flush_timeout / 1000
        ):
            status = PutStatus.FLUSH_DISK_TIMEOUT
        return PutResult(status, queue_offset, res.physical_offsets, res.sizes, now, self.store_host, res.units)

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """A slave's write: the master's commitlog bytes at the same ``offset`` (see
        ``CommitLog.append_raw``). Consume queue and index entries for the complete units follow
        (a transfer may end inside a unit: its entries come with the next one) before any read,
        and in the background once ``REPLICA_DISPATCH_BYTES`` wait or appends pause, never here:
        the slave acknowledges the bytes (what a SYNC_MASTER put waits for) as soon as they are
        written. Returns the commitlog's new end. Raises ``ReplicationError`` (nothing written)
        when ``offset`` is not this commitlog's end or when the bytes show the two commitlogs
        diverged (see ``replica_writer``), ``DiskFullError`` when the file does not fit the disk."""
        if not self._running:
            raise StoreNotWritableError("store is not running: start() it first")
        return self._replica.append(offset, data)

    def drop_partial_unit(self) -> int:
        """A slave's commitlog ends inside a unit when a transfer was cut off there (the master sends
        ``haTransferBatchSize`` bytes at a time, not whole units): drop those first bytes, so that it
        ends after its last whole unit; returns that end. A slave does this before it reports its end
        to a master (which refuses an end inside one of its units) and at shutdown (recovery after a
        clean stop would take a unit's first bytes for a damaged unit). The master sends it whole."""
        with self._writes.lock:
            self._replica.drop_partial_unit()
            return self.commitlog.max_offset()

    @property
    def disk_full(self) -> str | None:
        """Why writes are refused for a full disk (a file that could not be allocated), else None."""
        return self._full_disk.reason

    @property
    def write_refusal(self) -> str | None:
        """Why writes are refused now (disk over a ratio, or full), None while they are accepted."""
        return self.retention.refusal or self.disk_full

    def _rebuild_entries(self, start: int) -> bool:
        """Build the entries recovery could not from ``start`` (a full disk at start), under the put
        lock; False while the disk still cannot take them."""
        assert self.recovery is not None
        try:
            end, ts, damaged = rebuild(self.commitlog, list(self.queues.values()), start, self.recovery.safe_offset,
                                       self.queues.for_write, self.index, self.config.check_crc_on_recover,
                                       self.delays_ms)
        except DiskFullError:
            return False
        self._checks.found(damaged)
        self._dispatcher.rebuilt(end, ts)
        self._replica.read = end
        self._writes.last_store_ts = max(self._writes.last_store_ts, ts)
        self._writes.next_offset.update(self.queues.settled(self.commitlog.min_offset()))
        log.warning("consume queue and index entries from commitlog offset %d to %d built", start, end)
        return True

    def dispatch_backlog(self) -> int:
        """Messages stored but not yet in their consume queue and the index."""
        return self._dispatcher.backlog

    def dispatch_queues(self) -> None:
        """Build the consume queue entries of every append so far, now: what a read would do first. The
        broker calls it once its sends pause, so that the reads of a long-polling consumer (every
        ``AT_END_MAX_BACKLOG`` appends) do not do it between a message's arrival and its delivery."""
        if self._running and not self.config.is_slave:
            self._dispatcher.catch_up_queues()

    def durable(self, offset: int) -> Future[None] | None:
        """Under SYNC_FLUSH, a future done once the commitlog is flushed past ``offset``;
        None under ASYNC_FLUSH (nothing to wait for)."""
        return self._group_commit.future(offset) if self._group_commit is not None else None

    # -- reads ----------------------------------------------------------------------------
    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The consume queue for a read, with every append so far dispatched into it."""
        if self.config.is_slave:
            self._replica.catch_up()
        self._dispatcher.catch_up_queues()
        return self.queues.get((topic, queue_id))

    def get_queue_entries(self, topic: str, queue_id: int, offset: int, count: int) -> np.ndarray:
        """Up to ``count`` consume-queue entries (``phys``, ``size``, ``tag``) from ``offset``: the
        schedule service reads due times (the tag codes) by the thousand."""
        cq = self._queue(topic, queue_id)
        return cq.get(offset, count) if cq is not None else np.zeros(0, dtype=entry_record())

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def written_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next put to the queue gets, read without dispatching anything:
        services idle until their system topic receives a message compare it (a read by queue
        offset would make the dispatcher catch up on every poll)."""
        return self._writes.next_offset.get((topic, queue_id), 0)

    def at_queue_end(self, topic: str, queue_id: int, offset: int) -> GetResult | None:
        """``get_messages``' answer to a read at the queue's end (``offset`` is where its next put goes), found
        without dispatching anything; None when ``offset`` is not the end: read. A consumer's pull right after
        its last answer comes here and is held: it need not wait for the appends since to be dispatched first
        (the put that wakes it hands its units over). Past ``AT_END_MAX_BACKLOG`` messages waiting for dispatch
        the pull reads, which dispatches them in one batch."""
        if (offset <= 0 or self.config.is_slave or self._dispatcher.backlog > AT_END_MAX_BACKLOG
                or self.written_offset(topic, queue_id) != offset):
            return None
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return None
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, cq.min_offset, offset)

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
            self._replica.catch_up()
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
        return self._reader.get(self._queue(topic, queue_id), queue_id, offset, max_count, tag_codes, max_bytes,
                                unit_filter, readable_end)

    @property
    def corrupt_units(self) -> int:
        """Damaged units found so far: quarantined by the start-up checks or skipped by reads."""
        return len(self._checks.damaged)

    def _store_time_of(self, phys: int) -> int | None:
        view = self.commitlog.read(phys + STORE_TIMESTAMP_OFFSET, 8)
        return None if view is None else INT64.unpack(view)[0]

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First queue offset stored at or after ``timestamp`` ms (max offset if none)."""
        cq = self._queue(topic, queue_id)
        return cq.offset_by_time(timestamp, self._store_time_of) if cq else 0

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        first = None if cq is None else cq.entry(cq.min_offset)
        if first is None:
            return -1
        ts = self._store_time_of(first[0])
        return -1 if ts is None else ts

    def look_message_by_offset(self, phys: int) -> bytes | None:
        """The unit at commitlog offset ``phys``, or None if absent or deleted."""
        return unit_at(self.commitlog, phys)

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
            self._replica.catch_up()
        self._dispatcher.catch_up()
        return units_with_key(self.index, self.commitlog, self.queues, topic, key, max_num, begin, end)

    def delete_topic(self, topic: str) -> int:
        """Forget ``topic``: its consume queues are destroyed, so its offsets start again from 0
        and key queries no longer find its messages (their units stay in the commitlog until
        retention deletes the files). Returns how many queues were removed. A topic that is no plain
        directory name raises StorePathError before any queue is removed."""
        with self._writes.lock:
            self._dispatcher.catch_up()
            gone = self.queues.remove_topic(topic)
            for cq in gone:
                self._writes.next_offset.pop((cq.topic, cq.queue_id), None)
            # move the safe offset past the topic's units, so crash recovery never rebuilds them
            self._checkpointer.take()
        log.info("topic %s deleted from the store (%d queues)", topic, len(gone))
        return len(gone)

    def truncate_to(self, offset: int) -> int:
        """Cut the store back to commitlog ``offset`` (a slave dropping a tail its new master's
        history does not have): units, consume queue entries and index entries at and past it go;
        an offset at or below the commitlog's min empties the store (its commitlog then restarts
        wherever the next replicated bytes start). Crash-safe: see ``truncation`` for the order of
        the steps. Returns the commitlog's new end. ``StoreError`` (nothing changed) for an offset
        past the end or inside a unit. Reads racing the cut check the units they serve."""
        if not self._running:
            raise StoreNotWritableError("store is not running: start() it first")
        return self._truncator.truncate(offset, self._group_commit)

    def config_file(self, name: str) -> JsonConfigFile:
        """One of the JSON files under ``config/`` (see ``config_file`` module names)."""
        return config_file(self.root, name)
