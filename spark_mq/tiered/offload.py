"""Offload: move each queue's cold range from the broker into the topic's archive table, then record
the new archived-up-to offset (the watermark) at the broker.

Per queue, :func:`plan_queue` asks the broker (QUERY_TIERED_OFFSET: watermark, cold, min and max
offsets) and the table (its archived end) and picks the range:

* start = max(the table's archived end, the broker's watermark, the queue's min offset);
* end = the cold boundary: every message in full commitlog files (``cold_offset``, the default),
  every message older than an age (SEARCH_OFFSET_BY_TIMESTAMP of now - age: the first message
  stored at or after it, at most ``max_offset``; an age may reach into the active commitlog file,
  which costs nothing and lets quiet queues be archived too), or everything (``max_offset``).

:func:`offload_queue` then pulls the range from the broker in the driver
(:func:`~spark_mq.arrow.range_reader.read_range`: pull bodies decoded straight to Arrow) and appends
it in chunks of about ``chunk_bytes``; after every append the broker's watermark moves to the chunk's
end. Reading in the driver rather than through Spark executors keeps the Arrow data out of the JVM (broker → Arrow →
Parquet with no row conversion, which executors would add on the way back to a driver-side Delta
commit), and the per-queue order "commit, then watermark" wants one sequential writer per table
anyway; a background thread pulls the next chunk while the current one is written, so the write
hides behind the pull (the broker's pull rate is the limit: see BENCHMARKS.md, "Tiered offload").

Crash safety: the table commit is the point of no return. Killed after a commit and before the
watermark update, a re-run plans start = the table's end (past the watermark), finds nothing new
below the boundary or appends from there, and moves the watermark up. Killed mid-append, Delta has
no commit (data files without a commit are invisible) and Parquet has only a ``.tmp-`` file (ignored,
removed at the next run). So each message is archived exactly once.

Thread-safety: one offload per topic archive at a time; the functions are otherwise stateless.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from spark_mq.arrow.queues import QueueKey, TopicQueues, discover_queues, queue_key_text
from spark_mq.arrow.range_reader import QueueRange, QueueSpan, read_range
from spark_mq.arrow.schema import UTC_SCHEMA
from spark_mq.client.config import ClientConfig
from spark_mq.client.results import TieredOffset
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError
from spark_mq.tiered.archive import Archive, ArchiveError, open_archive

log = logging.getLogger(__name__)

OFFLOAD_GROUP = "spark_mq_offload"  # the consumer group named in PULL_MESSAGE (it commits nothing)
ALL_TAGS = "*"
DEFAULT_CHUNK_BYTES = 128 << 20  # Arrow bytes per append (one Delta commit / one Parquet file)
DEFAULT_PULL_BATCH_SIZE = 4096  # messages per PULL_MESSAGE (the broker also caps a pull by bytes)
PREFETCH_CHUNKS = 1  # chunks pulled ahead while one is written: bounds memory to ~2 chunks


@dataclass(frozen=True)
class ColdBoundary:
    """Where a queue's offload range ends: ``all`` (max offset), ``older_than_ms`` (messages stored
    before now - age), or neither (the cold offset: full commitlog files only)."""

    all: bool = False
    older_than_ms: int | None = None

    def __post_init__(self) -> None:
        if self.all and self.older_than_ms is not None:
            raise ConfigError("choose one cold boundary: everything (--all) or an age (--older-than), not both")
        if self.older_than_ms is not None and self.older_than_ms < 0:
            raise ConfigError(f"the age of --older-than must not be negative, got {self.older_than_ms} ms")

    def describe(self) -> str:
        if self.all:
            return "everything up to each queue's max offset"
        if self.older_than_ms is not None:
            return f"messages stored more than {self.older_than_ms / 1000:g}s ago"
        return "messages in full commitlog files (up to each queue's cold offset)"

    def end(self, api: SyncMQClientAPI, addr: str, topic: str, queue_id: int, offsets: TieredOffset,
            now_ms: int) -> int:
        """The queue's offload end (exclusive), never past its max offset."""
        if self.all:
            return offsets.max_offset
        if self.older_than_ms is None:
            return min(offsets.cold_offset, offsets.max_offset)
        found = api.search_offset_by_timestamp(addr, topic, queue_id, now_ms - self.older_than_ms)
        return offsets.max_offset if found is None else min(found, offsets.max_offset)


@dataclass(frozen=True)
class QueuePlan(QueueSpan):
    """One queue's offload: the messages [start, end) to append, and the state it was planned from."""

    watermark: int  # the broker's archived-up-to offset when planned
    archived_end: int | None  # the table's, when planned

    @property
    def messages(self) -> int:
        return self.end - self.start

    @property
    def stale_watermark(self) -> bool:
        """The table is ahead of the broker (a crash between a commit and its watermark update)."""
        return self.archived_end is not None and self.archived_end > self.watermark


def plan_queue(api: SyncMQClientAPI, archive: Archive, queues: TopicQueues, key: QueueKey,
               boundary: ColdBoundary, now_ms: int) -> QueuePlan:
    """What to offload of one queue (see the module docstring); ArchiveError when the table holds
    offsets the broker never had (another broker's archive, or a store that was wiped)."""
    broker_name, queue_id = key
    addr = queues.addr(key)
    offsets = api.query_tiered_offset(addr, queues.topic, queue_id)
    archived = archive.archived_end(broker_name, queue_id)
    name = f"{queues.topic}@{queue_key_text(key)}"
    if archived is not None and archived > offsets.max_offset:
        raise ArchiveError(f"{archive.uri} holds queue {name} up to offset {archived}, past the broker's max offset "
                           f"{offsets.max_offset}: it is not this broker's archive (check --root) or the store was "
                           f"reset; move the table away to start a new archive")
    if (archived or 0) < offsets.offset:
        log.warning("queue %s: the broker says offsets below %d are archived, but %s %s: the messages in between "
                    "are not in this archive (was --root changed?)", name, offsets.offset, archive.uri,
                    "has none of this queue" if archived is None else f"ends at {archived}")
    if archived is not None and archived < offsets.min_offset:
        log.warning("queue %s: offsets [%d, %d) were deleted by the broker before they were archived "
                    "(tieredDeleteUnarchivedForcibly?): the archive has a hole there", name, archived,
                    offsets.min_offset)
    start = max(archived or 0, offsets.offset, offsets.min_offset)
    end = max(boundary.end(api, addr, queues.topic, queue_id, offsets, now_ms), start)
    return QueuePlan(queues.topic, broker_name, addr, queue_id, start, end, offsets.offset, archived)


class OffloadListener(Protocol):
    """What an offload reports, in order per queue: start, pulled batches, then per chunk the commit
    (the table has it) and the watermark (the broker has it), and the queue's end. ``pulled`` is
    called from the pull thread, the others from the thread that runs :func:`offload_queue`."""

    def queue_started(self, plan: QueuePlan) -> None: ...
    def pulled(self, plan: QueuePlan, messages: int, nbytes: int) -> None: ...
    def committed(self, plan: QueuePlan, start: int, end: int, written: bool) -> None: ...
    def watermark_recorded(self, plan: QueuePlan, offset: int) -> None: ...
    def queue_done(self, plan: QueuePlan, result: QueueResult) -> None: ...


@dataclass
class QueueResult:
    """What one queue's offload did."""

    messages: int = 0  # appended to the table
    nbytes: int = 0  # Arrow bytes of those messages
    commits: int = 0
    watermark: int | None = None  # the broker's watermark afterwards (None: unchanged)
    seconds: float = 0.0
    chunks: list[tuple[int, int]] = field(default_factory=list)


def offload_queue(api: SyncMQClientAPI, archive: Archive, plan: QueuePlan, listener: OffloadListener, *,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES, pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
                  client: ClientConfig | None = None) -> QueueResult:
    """Append ``plan``'s range to ``archive`` chunk by chunk, recording the watermark after each, and
    catch the watermark up with the table when it lags (see the module docstring). ``client``: how the
    range's pulls dial and sign (TLS, account), as ``api``'s do; None: plaintext, unsigned."""
    t0 = time.perf_counter()
    result = QueueResult()
    listener.queue_started(plan)
    dropped = archive.discard_incomplete(plan.broker_name, plan.queue_id)
    if dropped:
        log.info("queue %s: removed %d file(s) of an append that did not finish", plan.name, dropped)
    watermark = plan.watermark
    if plan.stale_watermark and plan.archived_end is not None:
        watermark = _record(api, plan, plan.archived_end, listener, result)
    part = QueueRange(plan.topic, plan.broker_name, plan.broker_addr, plan.queue_id, plan.start, plan.end,
                      ALL_TAGS, OFFLOAD_GROUP, pull_batch_size, True, client=client)
    for start, end, rows in _chunks(part, chunk_bytes, plan, listener):
        written = archive.append(plan.broker_name, plan.queue_id, start, end, rows)
        listener.committed(plan, start, end, written)
        if written:
            result.messages += rows.num_rows
            result.nbytes += rows.nbytes
            result.commits += 1
            result.chunks.append((start, end))
        if end > watermark:
            watermark = _record(api, plan, end, listener, result)
    result.seconds = time.perf_counter() - t0
    listener.queue_done(plan, result)
    return result


def _record(api: SyncMQClientAPI, plan: QueuePlan, offset: int, listener: OffloadListener,
            result: QueueResult) -> int:
    api.update_tiered_offset(plan.broker_addr, plan.topic, plan.queue_id, offset)
    result.watermark = offset
    listener.watermark_recorded(plan, offset)
    return offset


_DONE = object()


def _chunks(part: QueueRange, chunk_bytes: int, plan: QueuePlan,
            listener: OffloadListener) -> Iterator[tuple[int, int, pa.Table]]:
    """(start, end, rows) of consecutive chunks covering ``part``, each about ``chunk_bytes`` of Arrow
    data; pulled by a background thread one chunk ahead of the consumer."""
    if part.end <= part.start:
        return
    ahead: queue.Queue = queue.Queue(maxsize=PREFETCH_CHUNKS)
    stop = threading.Event()

    def pull() -> None:
        try:
            batches: list[pa.RecordBatch] = []
            size, start = 0, part.start
            for batch in read_range(part):
                listener.pulled(plan, batch.num_rows, batch.nbytes)
                batches.append(batch)
                size += batch.nbytes
                if size >= chunk_bytes:
                    end = int(batch.column("queue_offset")[-1].as_py()) + 1
                    if not _put(ahead, (start, end, pa.Table.from_batches(batches)), stop):
                        return
                    batches, size, start = [], 0, end
            if start < part.end:  # the rest (no rows at all: append refuses the range, naming it)
                rows = pa.Table.from_batches(batches, schema=batches[0].schema if batches else UTC_SCHEMA)
                _put(ahead, (start, part.end, rows), stop)
            _put(ahead, _DONE, stop)
        except BaseException as e:  # handed to the consumer, which raises it
            _put(ahead, e, stop)

    thread = threading.Thread(target=pull, name=f"offload-pull-{plan.name}", daemon=True)
    thread.start()
    try:
        while (item := ahead.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _put(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Put ``item`` unless the consumer stopped; False when it did."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


@dataclass(frozen=True)
class TopicPlan:
    """The archive of one topic and the plan of each of its queues."""

    archive: Archive
    queues: list[QueuePlan]


def plan_offload(api: SyncMQClientAPI, namesrv_addrs: list[str], topics: list[str], root: str, *,
                 fmt: str | None, boundary: ColdBoundary, now_ms: int | None = None) -> list[TopicPlan]:
    """Plans of every readable queue of ``topics`` (ConfigError for an unknown topic or an unreachable
    NameServer, before anything is written). ``now_ms`` (default: now) anchors an age boundary."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    plans = []
    for topic in topics:
        queues = discover_queues(api, namesrv_addrs, topic, slaves=False)  # it commits watermarks: masters only
        archive = open_archive(root, topic, fmt)
        plans.append(TopicPlan(archive, [plan_queue(api, archive, queues, key, boundary, now_ms)
                                         for key in queues.queues]))
    return plans


def run_offload(api: SyncMQClientAPI, plans: list[TopicPlan], listener: OffloadListener, *,
                chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE,
                client: ClientConfig | None = None) -> list[QueueResult]:
    """Offload every planned queue, one after another."""
    return [offload_queue(api, topic.archive, plan, listener, chunk_bytes=chunk_bytes,
                          pull_batch_size=pull_batch_size, client=client)
            for topic in plans for plan in topic.queues]
