"""A slave's replication client (RocketMQ's DefaultHAClient): connects to its master's HA address,
reports its commitlog's end, and appends what the master streams at the same offsets, so both
commitlogs are byte-identical and the slave's own dispatch builds its consume queues and index.

Before each connection it makes sure it continues the master's commitlog, not a different one:
it drops the first bytes of a unit a cut-off transfer left at its end (``drop_partial_unit``: the
end it reports is then one of its unit boundaries, as a master requires), and compares its last
unit with the master's unit at the same offset (``master``: remoting requests, so the HA wire
format stays RocketMQ's). A store whose last unit the master does not hold byte for byte diverged
(it was written to as a master, say: same length, shorter, or ending inside one of the master's
units): it is refused, logged as an error, nothing written, and checked again after
``RETRY_INTERVAL_S``. Unless it is longer than the master's commitlog: then it connects all the
same and reports its end, which the master refuses, and refuses sends meanwhile (the master's
store may be the one lost, see ``HAConnection``). (Only the last unit is compared: two commitlogs
that differ earlier but hold the same last unit, its store timestamp and hosts included, are not
told apart.)

A connection that brings nothing for haHousekeepingInterval (``housekeeping_s``; an idle master still
sends a heartbeat every haSendHeartbeatInterval) is dropped and made again, as RocketMQ's DefaultHAClient
does: a master frozen without being deposed (SIGSTOP, a long pause) or behind a network black hole
neither sends nor closes its side, and without it the slave would wait on that connection for ever,
even after the master, or the route to it, came back with a new one.

It reports its end when it connects, after appending the whole transfers each wake-up finds
received (``ReceiveBuffer``: one report for all of them, sent once they are written; a slave
behind its master catches up with one report per socket read, not per transfer) and at least
every haSendHeartbeatInterval. A transfer that does not start at its end (the master and this slave
disagree about the commitlog) is refused likewise. A restarted slave resumes from its own end
(recovery of its store is the store's own).

Controller mode (``epochs`` given: the replica's epoch file): before each connection it also asks
for the master's epoch history, truncates a tail the master's history does not have (``divergence``
plans it; a log that needs a person raises ``DivergedLogError``, logged and retried like any
refusal, nothing changed), takes the master's epochs up to its end, and records each later one just
before the first bytes that reach its start offset are appended, so its epoch file stays the master's
for what it holds: a commitlog that has caught up has the master's epoch file too (recorded after the
bytes, a reader could see the bytes without their epoch: the failover tests once did).

``master_ha_addr`` gives the master's HA address as the NameServer last told it (empty while
unknown); ``master_changed`` is called when another master is to be followed: the connection to the
old one is dropped at once (a frozen or cut-off master would otherwise hold it open for ever);
``on_master_lost`` is called when a connection fails (ask the NameServer again: a restarted master
may listen elsewhere); ``on_appended`` after the appends of each read (a slave's messages
arrive this way, never through a send: its held pulls are woken from here); ``on_master_found`` when
a connection starts (a returning master: the slave's metadata sync runs at once, offering it the
consumer offsets committed here meanwhile).

``ssl_context``: connect over TLS (``tls.enable``; the slave's certificate is presented to a master that
requires one); ``account``: prove the cluster's account to the master before anything else
(``ha_auth.py``); a master that refuses it is logged as an error and retried like any refusal.

Thread-safety: none; the coroutine runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol, cast

from spark_mq.common.errors import RemotingError, ReplicationError, StoreError
from spark_mq.common.tls import handshake_failure
from spark_mq.store.ha.divergence import ReplicaLog, plan_truncation
from spark_mq.store.ha.epoch_file import EpochEntry, EpochFile
from spark_mq.store.ha.ha_auth import ClusterAccount, prove
from spark_mq.store.ha.ha_protocol import REPORT, TRANSFER_HEADER
from spark_mq.store.ha.receive_buffer import ReceiveBuffer
from spark_mq.store.ha.replica_epochs import apply_plan, replica_log
from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 1.0  # between connection attempts (RocketMQ's client retries every 5 s)
CONNECT_TIMEOUT_S = 3.0


class MasterCommitLogView(Protocol):
    """What a slave can ask its master about the master's commitlog (both raise ``RemotingError`` when
    the master cannot be asked)."""

    async def unit(self, offset: int) -> bytes | None:
        """The master's unit at ``offset``, None if it has none there."""

    async def end(self) -> int:
        """The master's commitlog end (-1 if it does not say)."""

    async def history(self) -> ReplicaLog:
        """The master's commitlog range and epoch history (controller mode)."""


class HAClient:
    def __init__(self, store: MessageStore, master_ha_addr: Callable[[], str], heartbeat_s: float,
                 housekeeping_s: float, on_master_lost: Callable[[], None], on_appended: Callable[[], None],
                 master: MasterCommitLogView, on_master_found: Callable[[], None],
                 epochs: EpochFile | None = None, replica_id: int | None = None,
                 ssl_context: ssl.SSLContext | None = None, account: ClusterAccount | None = None) -> None:
        """``epochs`` and ``replica_id`` (the hello naming this replica to its master): controller mode."""
        self.store = store
        self.ssl_context = ssl_context
        self.account = account
        self.replica_id = replica_id
        self.epochs = epochs
        self._coming_epochs: list[EpochEntry] = []  # the master's epochs starting past this replica's end
        self.master_ha_addr = master_ha_addr
        self.on_master_lost = on_master_lost
        self.on_appended = on_appended
        self.master = master
        self.on_master_found = on_master_found
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.connected_to = ""  # the master's HA address while connected
        self._writer: asyncio.StreamWriter | None = None  # the connection to it, while connected
        self.reported = -1  # the last offset reported to the master
        self.failures = 0  # connections failed in a row (only the first of a run is a warning)
        self.bytes_received = 0  # commitlog bytes appended from masters since start
        self.master_offset = -1  # the end of what the master had sent, as last seen (-1: nothing yet)

    async def run(self) -> None:
        """Replicate until cancelled, reconnecting after every failure."""
        while True:
            addr = self.master_ha_addr()
            if addr:
                try:
                    await self._replicate(addr)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, RemotingError) as e:
                    why = handshake_failure(e) if isinstance(e, ssl.SSLError) else e or "closed"
                    self._failed(logging.WARNING, "HA: no connection to master %s: %s", addr, why)
                except ReplicationError as e:
                    self._failed(logging.ERROR, "HA: refusing master %s: %s", addr, e)
                except StoreError as e:  # e.g. a full disk: nothing was written
                    self._failed(logging.ERROR, "HA: cannot store what master %s sent: %s", addr, e)
                finally:
                    self.connected_to = ""
            await asyncio.sleep(RETRY_INTERVAL_S)

    def _failed(self, level: int, msg: str, *args: object) -> None:
        """A failed connection: logged at ``level`` when it ends a run of good ones (at debug while the
        failures go on: it retries every second), and the NameServer is asked again for the master."""
        log.log(level if self.failures == 0 else logging.DEBUG, msg + "; retrying every %.0f s", *args,
                RETRY_INTERVAL_S)
        self.failures += 1
        self.on_master_lost()

    async def _check_continues_master(self) -> None:
        """Raise ``ReplicationError`` unless the master holds this commitlog's last unit byte for byte, or
        this commitlog is longer than the master's (logged: the master is to hear it)."""
        end = self.store.drop_partial_unit()
        last = await asyncio.get_running_loop().run_in_executor(None, self.store.commitlog.last_unit)
        if last is None:
            return
        offset, unit = last
        theirs = await self.master.unit(offset)
        if theirs == unit:
            return
        master_end = await self.master.end()
        if end > master_end >= 0:
            log.log(logging.ERROR if self.failures == 0 else logging.DEBUG,
                    "HA: this slave's commitlog ends at offset %d, past its master's end %d: reporting it to the "
                    "master, which refuses it and refuses sends (see its log for what to do)", end, master_end)
            return
        why = ("the master has no unit there" if theirs is None else
               f"the master's unit there ({len(theirs)} bytes) differs")
        raise ReplicationError(f"this slave's commitlog ends with a unit of {len(unit)} bytes at offset {offset}, but "
                               f"{why}: the two commitlogs diverged (was this store written to as a master?), or the "
                               "master no longer keeps that offset. Nothing was merged; empty this store directory "
                               "to copy the master's commitlog afresh")

    async def _align_with_master(self, epochs: EpochFile) -> None:
        """Controller mode: cut what the master's history does not have, then take its epochs."""
        master = await self.master.history()
        mine = replica_log(self.store, epochs)
        plan = plan_truncation(mine, master, self.store.config.maped_file_size_commit_log)
        if plan.truncate_to < mine.max_offset:
            await asyncio.get_running_loop().run_in_executor(None, apply_plan, self.store, epochs, plan)
            log.warning("HA: commitlog [%d, %d) dropped (case %s): its master's history (%s) does not have it; "
                        "replicating from %d", plan.truncate_to, mine.max_offset, plan.case.value,
                        master.describe(), plan.replicate_from)
        # this replica's epochs from the point the logs part are not the master's (one may start there
        # and have written nothing): the master's from there on replace them
        epochs.truncate_after(-1 if plan.keeps_nothing else plan.consistent_offset - 1)
        self._coming_epochs = [e for e in master.epochs if e.epoch > epochs.last_epoch]
        self._record_epochs(epochs, self.store.commitlog.max_offset())

    def _record_epochs(self, epochs: EpochFile, end: int) -> None:
        """Record the master's epochs that start at or below ``end``."""
        while self._coming_epochs and self._coming_epochs[0].start_offset <= end:
            entry = self._coming_epochs[0]
            epochs.append(entry.epoch, entry.start_offset)
            self._coming_epochs.pop(0)  # once recorded: one that fails stays to come

    async def _replicate(self, addr: str) -> None:
        if self.epochs is not None:
            await self._align_with_master(self.epochs)
        await self._check_continues_master()
        host, _, port = addr.rpartition(":")
        tls = self.ssl_context
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            host, int(port), ssl=tls, server_hostname=host if tls is not None and tls.check_hostname else None),
            CONNECT_TIMEOUT_S)
        if self.account is not None:
            try:
                await asyncio.wait_for(prove(reader, writer, self.account), CONNECT_TIMEOUT_S)
            except BaseException:
                writer.close()
                raise
        # the master sends nothing before the first report: the stream's buffer is empty as it hands over
        received = ReceiveBuffer(cast(asyncio.Transport, writer.transport))
        loop = asyncio.get_running_loop()
        reporter = loop.create_task(self._report_every_heartbeat(writer), name="ha-report")
        housekeeper = loop.create_task(self._drop_when_silent(addr, received, writer), name="ha-housekeeping")
        try:
            self.connected_to, self._writer = addr, writer
            self.failures = 0
            if self.replica_id is not None:
                writer.write(REPORT.pack(-self.replica_id))  # the controller-mode hello (``ha_protocol``)
            self._report(writer)
            log.info("HA: replicating from master %s from commitlog offset %d", addr, self.reported)
            self.on_master_found()
            need = TRANSFER_HEADER.size
            while True:
                used, appended, need = self._append_transfers(await received.wait(need))
                received.consume(used)
                if appended:
                    self._report(writer)
                    self.on_appended()
        finally:
            self._writer = None
            for task in (reporter, housekeeper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
            writer.close()

    async def _drop_when_silent(self, addr: str, received: ReceiveBuffer, writer: asyncio.StreamWriter) -> None:
        """Abort the connection once nothing arrived on it for ``housekeeping_s`` (the read then fails and
        ``run`` connects again, asking the NameServer anew)."""
        while (silent := time.monotonic() - received.last_read) < self.housekeeping_s:
            await asyncio.sleep(self.housekeeping_s - silent)
        log.warning("HA: master %s sent nothing for %.1f s (haHousekeepingInterval): connection dropped, "
                    "connecting again", addr, silent)
        writer.transport.abort()

    def master_changed(self) -> None:
        """The master to follow changed (the controller named another): drop the connection to the one it
        replaced now, as RocketMQ's AutoSwitchHAClient does when its master's address changes. A deposed master
        that is frozen or cut off neither sends nor closes its side, and a slave waiting on it would never
        reach the new master's bytes; ``run`` connects to the new one once its HA address is known."""
        writer = self._writer
        if writer is not None and self.master_ha_addr() != self.connected_to:
            log.warning("HA: master %s replaced: its connection dropped, replicating from the new master once "
                        "its address is known", self.connected_to)
            writer.transport.abort()

    def _append_transfers(self, received: memoryview) -> tuple[int, bool, int]:
        """Append every whole transfer at the start of ``received``, each run of consecutive ones within
        one commitlog file in one write: (the bytes they took, whether any brought commitlog bytes rather
        than being heartbeats, the bytes after them the next whole transfer needs)."""
        pos, need, run_start, run_end = 0, TRANSFER_HEADER.size, -1, -1
        run: list[memoryview] = []  # the bodies of the run of transfers from commitlog offset run_start
        while len(received) - pos >= TRANSFER_HEADER.size:
            offset, size = TRANSFER_HEADER.unpack_from(received, pos)
            if size < 0:
                raise ReplicationError(f"the master sent a transfer header of {size} bytes at commitlog offset "
                                       f"{offset}: not RocketMQ's HA protocol")
            end = pos + TRANSFER_HEADER.size + size
            if end > len(received):
                need = end - pos  # the rest of this transfer is still on its way
                break
            self.master_offset = max(self.master_offset, offset + size)
            if size:  # else the master's heartbeat
                if run and (offset != run_end or offset % self.store.commitlog.file_size == 0):
                    self._append(run_start, run)
                    run = []
                if not run:
                    run_start = offset
                run.append(received[pos + TRANSFER_HEADER.size:end])
                run_end = offset + size
            pos = end
        if run:
            self._append(run_start, run)
        return pos, run_start >= 0, need

    def _append(self, offset: int, bodies: list[memoryview]) -> None:
        """Append consecutive transfers' bodies from commitlog ``offset`` (joined: one write, and one
        copy in memory is far cheaper than a write per transfer)."""
        data = bodies[0] if len(bodies) == 1 else b"".join(bodies)
        epochs = self.epochs if self._coming_epochs else None
        if epochs is not None:
            # the epochs these bytes reach are recorded first (RocketMQ's AutoSwitchHAClient order): whoever
            # sees a byte of an epoch, in the files or through this broker, sees the epoch too
            self._record_epochs(epochs, offset + len(data))
        try:
            self.store.append_replicated(offset, data)
        except StoreError:  # ReplicationError included
            if epochs is not None:  # nothing was written: no epoch may start past the commitlog's end
                epochs.truncate_after(self.store.commitlog.max_offset())
            raise
        self.bytes_received += len(data)

    def lag_bytes(self) -> int:
        """Bytes behind the master's offset as last seen in its transfers (their headers carry no
        more: the master's own ``lag_bytes`` per slave is the authoritative figure)."""
        return max(0, self.master_offset - self.store.commitlog.max_offset())

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's replication figures of a slave."""
        return {"haMasterAddress": self.connected_to, "haMasterLagBytes": str(self.lag_bytes()),
                "haReceivedBytes": str(self.bytes_received)}

    def _report(self, writer: asyncio.StreamWriter) -> None:
        self.reported = self.store.commitlog.max_offset()
        writer.write(REPORT.pack(self.reported))

    async def _report_every_heartbeat(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            self._report(writer)  # 8 bytes: no drain (the stream's flow control no longer hears the transport)
