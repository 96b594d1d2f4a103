"""The master's side of one slave (RocketMQ's HAConnection): reads the slave's offset reports and
streams it the commitlog from where it stands.

Two coroutines per slave. The reader takes each 8-byte report: the first says where the transfer
starts, every one is an acknowledgement (``on_ack``, which releases SYNC_MASTER puts). The writer
sends, from that offset on, a header and at most haTransferBatchSize bytes at a time, straight
from the mapped commitlog file (one memoryview slice per transfer, never one per message, and
never across a file's end; the headers and slices of up to ``TRANSFERS_PER_WRITE`` transfers in
one write when the slave is that far behind), and a heartbeat header when it has
had nothing to send for haSendHeartbeatInterval. It waits for new bytes on ``wake`` (set after
every put) or ``POLL_INTERVAL_S`` (bytes stored by other paths than a send).

A slave whose first report is past the master's end holds bytes this master never wrote (it
diverged, e.g. it was written to as a master, or this master's store was lost and it started
empty): it is refused with an error and disconnected, never merged. ``on_first_report`` hears why
(None for a slave taken), so the master can refuse sends that would write over offsets the slave
holds. One whose first report falls inside one of the master's units ends with bytes other than
the master's (a slave reports the end of its last whole unit when it connects: ours drops a cut-off
unit's first bytes first, RocketMQ's recovery does on its restart): refused likewise, but sends go
on (this master's store is not the suspect). The master's side sees offsets only, as RocketMQ's HA
protocol carries nothing else; our slave also compares its last unit with the master's before it
connects (see ``HAClient``). In controller mode (``hello``) the slave first names its broker id
(``ha_protocol``), so the master's SyncStateSet knows which replica this is.

Thread-safety: none; both coroutines run on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from spark_mq.common.log_limit import LogLimiter
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.ha.end_times import EndTimes
from spark_mq.store.ha.ha_protocol import REPORT, TRANSFER_HEADER

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.1  # RocketMQ's WriteSocketService waits 100 ms when there is nothing to send
# a slave behind by more than one transfer gets up to this many in one socket write (each still at most
# haTransferBatchSize, as RocketMQ's slaves expect): one syscall and one wake-up of the slave, not eight
TRANSFERS_PER_WRITE = 8
diverged = LogLimiter(log)


class HAConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, commitlog: CommitLog,
                 batch_size: int, heartbeat_s: float, wake: asyncio.Event, on_ack: Callable[[int], None],
                 on_first_report: Callable[[str | None], None], hello: bool = False,
                 first_word: int | None = None) -> None:
        """``first_word``: the slave's first report (or hello), already read by the master's admission check."""
        self.reader = reader
        self.writer = writer
        self.commitlog = commitlog
        self.batch_size = batch_size
        self.heartbeat_s = heartbeat_s
        self.wake = wake
        self.on_ack = on_ack
        self.on_first_report = on_first_report
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.hello = hello
        self.slave_id: int | None = None  # the replica's broker id, from its hello (controller mode)
        self.acked = -1  # the slave's last reported offset (-1: none yet)
        self.next_transfer = -1  # next commitlog offset to send
        self.bytes_sent = 0  # commitlog bytes streamed to this slave
        self.end_times = EndTimes(time.monotonic())  # dates the bytes the slave lacks (lag seconds)
        self._first_report = asyncio.Event()
        self._first_word = first_word

    async def serve(self) -> None:
        """Serve the slave until it disconnects, diverges, or the task is cancelled."""
        writer = asyncio.get_running_loop().create_task(self._write_loop(), name=f"ha-write-{self.peer}")
        try:
            await self._read_loop()
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("HA: slave %s disconnected: %s", self.peer, e or "end of stream")
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await writer
            self.writer.close()

    def lag_bytes(self) -> int:
        """Commitlog bytes the master has and this slave has not acknowledged."""
        return self._bytes_past(self.acked)

    def _bytes_past(self, acked: int) -> int:
        """Commitlog bytes past ``acked``, the slave's acknowledged offset as one reading saw it."""
        return max(0, self.commitlog.max_offset() - max(acked, 0))

    def lag(self, now: float) -> tuple[int, int, float]:
        """(the slave's acknowledged offset, ``lag_bytes``, the age of the oldest byte it has not acknowledged:
        0 while it has everything) from one reading of that offset, so that the three agree (a metrics scrape
        runs on another thread while reports come in)."""
        acked = self.acked
        behind = self._bytes_past(acked)
        return acked, behind, 0.0 if behind == 0 else self.end_times.age(max(acked, 0), now)

    async def _read_loop(self) -> None:
        while True:
            if self._first_word is not None:
                offset, self._first_word = self._first_word, None
            else:
                (offset,) = REPORT.unpack(await self.reader.readexactly(REPORT.size))
            if offset < 0 and self.hello and self.next_transfer < 0:
                self.slave_id = -offset
                continue
            if self.next_transfer < 0:
                end = self.commitlog.max_offset()
                if offset > end:  # it retries every second: a few lines per window, then a count
                    diverged.log(logging.ERROR, self.peer.rpartition(":")[0], "diverged",
                                 "HA: slave %s reports commitlog offset %d, past this master's end %d: its "
                                 "commitlog holds bytes this master never wrote (was it written to as a master?); "
                                 "refused, and this master refuses sends meanwhile. If this master's store was "
                                 "lost, rebuild it from the slave (spark-mq copy-store); if the slave's store is "
                                 "the stale one, empty it (it copies everything again)", self.peer, offset, end)
                    self.on_first_report(
                        f"this master's commitlog ends at offset {end} but its slave {self.peer} holds it up to "
                        f"offset {offset}: this master's store was lost or replaced, so sends are refused rather "
                        f"than written over what the slave holds. Rebuild this store from the slave (stop the "
                        f"slave, spark-mq copy-store --from <its store> --to <this store>, start this master, then "
                        f"the slave), or, if the slave's store is the stale one, empty it")
                    return
                if await self._inside_a_unit(offset, end):
                    diverged.log(logging.ERROR, self.peer.rpartition(":")[0], "diverged",
                                 "HA: slave %s reports commitlog offset %d, inside one of this master's units (its "
                                 "end is %d): its commitlog holds bytes this master never wrote (was it written to "
                                 "as a master?); refused. Empty its store directory (it copies everything again) to "
                                 "make it a slave of this master", self.peer, offset, end)
                    return
                self.on_first_report(None)
                self.next_transfer = max(offset, self.commitlog.min_offset())
                log.info("HA: slave %s connected at commitlog offset %d (master at %d)", self.peer, offset, end)
                self._first_report.set()
            self.acked = offset
            self.end_times.acknowledged(offset)
            self.on_ack(offset)

    async def _inside_a_unit(self, offset: int, end: int) -> bool:
        """Whether a slave's first report (at most this master's end) falls inside one of its units (the
        walk to the offset runs off the event loop). An offset below the oldest byte kept cannot be
        checked: the slave then refuses the transfer, which does not continue its commitlog."""
        if offset == end or offset < self.commitlog.min_offset():  # a caught-up slave: no walk
            return False
        loop = asyncio.get_running_loop()
        return not await loop.run_in_executor(None, self.commitlog.is_unit_boundary, offset)

    def _transfers(self) -> list[bytes | memoryview]:
        """Headers and slices of the next transfers (up to ``TRANSFERS_PER_WRITE``), counted as sent."""
        parts: list[bytes | memoryview] = []
        for _ in range(TRANSFERS_PER_WRITE):
            view = self.commitlog.read_from(self.next_transfer, self.batch_size)
            if view is None:
                break
            parts += (TRANSFER_HEADER.pack(self.next_transfer, len(view)), view)
            self.next_transfer += len(view)
            self.bytes_sent += len(view)
        return parts

    async def _write_loop(self) -> None:
        await self._first_report.wait()
        last_sent = time.monotonic()
        while True:
            # retention may have deleted what the slave still lacks: go on from the oldest byte kept
            self.next_transfer = max(self.next_transfer, self.commitlog.min_offset())
            end = self.commitlog.max_offset()  # before the clock: a note never dates bytes before they were written
            self.end_times.record(time.monotonic(), end)
            parts = self._transfers()
            if parts:
                # one write: a header sent on its own (TCP_NODELAY) costs a packet and wakes the slave for 12
                # bytes, and each write is a syscall that wakes it; copying the slices once is far cheaper
                self.writer.write(b"".join(parts))
                await self.writer.drain()
                await asyncio.sleep(0)  # drain returns at once while the socket takes it all: let requests in
                last_sent = time.monotonic()
                continue
            if time.monotonic() - last_sent >= self.heartbeat_s:
                self.writer.write(TRANSFER_HEADER.pack(self.next_transfer, 0))
                await self.writer.drain()
                last_sent = time.monotonic()
            self.wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), POLL_INTERVAL_S)
