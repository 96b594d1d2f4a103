"""A slave's writes: its master's commitlog bytes appended at the same offsets, and the consume
queue and index entries of the units they bring.

The bytes go into the commitlog as they arrive (``CommitLog.append_raw``), after a check that
they continue this commitlog (``_check_continues``): the slave acknowledges them (what a
SYNC_MASTER put waits for) as soon as they are written. Their entries are built later, in bulk:
``read_all`` reads the whole units past ``read`` into append records (``replica_units``) for
the dispatcher; before any read (``catch_up``), and in the background once
``REPLICA_DISPATCH_BYTES`` wait or appends pause (``dispatch_in_background``). What that path
leaves (damaged units, a broken chain) goes to recovery's ``rebuild``, which quarantines and
reports it as a start would. A transfer may end inside a unit: its first bytes wait for the
rest, or are dropped (``drop_partial_unit``) before the slave reports its end or stops.
"""

from __future__ import annotations

import logging
import time

from spark_mq.common.errors import ReplicationError
from spark_mq.common.unit.layout import BLANK_MAGIC, INT64, MESSAGE_MAGIC, PHYSICAL_OFFSET_OFFSET, SIZE_MAGIC
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.consume_queue_store import ConsumeQueueStore
from spark_mq.store.dispatch import IDLE_BEFORE_DISPATCH_S, Dispatcher
from spark_mq.store.index_service import IndexService
from spark_mq.store.recovery import rebuild
from spark_mq.store.replica_units import read_replicated
from spark_mq.store.unit_checks import CheckedUnits
from spark_mq.store.write_state import WriteState

log = logging.getLogger(__name__)

# a slave builds the entries of replicated units once this many bytes wait (else on a read or once appends
# pause): one pass over 1 MiB costs about what one over 32 KiB does, per message far less
REPLICA_DISPATCH_BYTES = 1 << 20


class ReplicaWriter:
    """Thread-safety: ``append`` and ``catch_up`` may be called from any thread (the HA client's
    loop appends, reads catch up) and take the put lock (``writes.lock``) themselves;
    ``dispatch_in_background`` runs on the store's dispatch thread; ``read_all`` and
    ``drop_partial_unit`` are called with the put lock held. ``read`` is written under it."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueStore, index: IndexService | None,
                 dispatcher: Dispatcher, writes: WriteState, checks: CheckedUnits, check_crc: bool,
                 delays_ms: tuple[int, ...]) -> None:
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.writes = writes
        self.checks = checks
        self.check_crc = check_crc
        self.delays_ms = delays_ms
        self.read = 0  # commitlog offset up to which units went to the dispatcher
        self._last_append = 0.0
        self._trouble: tuple[int, int] | None = None  # the last stretch left to rebuild (logged once)

    def append(self, offset: int, data: bytes | memoryview) -> int:
        """See ``MessageStore.append_replicated``."""
        with self.writes.lock:
            self._check_continues(offset, data)
            end = self.commitlog.append_raw(offset, data)
        self._last_append = time.monotonic()
        return end

    def dispatch_in_background(self) -> None:
        """A slave's dispatch duty: one large pass once ``REPLICA_DISPATCH_BYTES`` wait or appends
        pause (each pass has a fixed cost, see ``dispatch``), like a master's ``catch_up_when_idle``."""
        waiting = self.commitlog.max_offset() - self.read
        if waiting > 0 and (waiting >= REPLICA_DISPATCH_BYTES
                            or time.monotonic() - self._last_append >= IDLE_BEFORE_DISPATCH_S):
            self.catch_up()
            self.dispatcher.catch_up()
        else:
            self.dispatcher.catch_up_when_idle()  # what reads' small passes left (index entries)

    def catch_up(self) -> None:
        """Append records for every complete replicated unit, handed to the dispatcher (before
        reads, and in the background)."""
        if self.read < self.commitlog.max_offset():
            with self.writes.lock:
                self.read_all()

    def read_all(self) -> bool:
        """Append records for the replicated units past those read (under the put lock), see
        ``replica_units``; what that path leaves (damaged units, a broken chain) goes to recovery's
        rebuild, which quarantines and reports it as a start would. False while that rebuild waits
        for disk space (whole units past ``read`` then wait too)."""
        # an empty commitlog restarts at the master's first byte sent, a file start maybe past 0
        start = max(self.read, self.commitlog.min_offset())
        got = read_replicated(self.commitlog, start, self.commitlog.max_offset(), self.writes.next_offset,
                              self.check_crc)
        for r in got.records:
            self.dispatcher.enqueue(r)
            self.writes.appended((r.topic, r.queue_id), r.queue_offset, int(r.sizes.size), r.store_timestamp)
        self.read = got.end
        return got.trouble is None or self._rebuild(got.trouble)

    def _rebuild(self, why: str) -> bool:
        """Recovery's rebuild over the replicated units ``replica_units`` would not read (under the
        put lock), once everything before them is dispatched; False when a full disk defers it."""
        self.dispatcher.catch_up()
        if self.dispatcher.backlog or self.dispatcher.stalled is not None:
            return False  # a full disk: tried again on the next pass
        start = self.read
        done, ts, damaged = rebuild(self.commitlog, list(self.queues.values()), start, start, self.queues.for_write,
                                    self.index, self.check_crc, self.delays_ms)
        if (start, done) != self._trouble:
            log.warning("replicated units: %s; built by recovery's rebuild up to commitlog offset %d", why, done)
            self._trouble = (start, done)
        self.checks.found(damaged)
        self.writes.last_store_ts = max(self.writes.last_store_ts, ts)
        self.dispatcher.rebuilt(done, self.writes.last_store_ts)
        self.read = max(start, done)
        self.writes.next_offset.update(self.queues.settled(self.commitlog.min_offset()))
        return True

    def drop_partial_unit(self) -> None:
        """``MessageStore.drop_partial_unit`` under the put lock: every whole unit is read for
        dispatch first, so the offset read up to is the end of the last whole one (the dispatcher
        may not have built their entries yet: its dispatched offset lags). Nothing is dropped while
        a full disk defers the rebuild of damaged units: the bytes past the offset read are not
        known to be a cut unit."""
        if not self.read_all():
            return
        whole, end = self.read, self.commitlog.max_offset()
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
        if offset != self.read or len(data) < SIZE_MAGIC.size:
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
