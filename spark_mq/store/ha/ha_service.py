"""A master's replication endpoint (RocketMQ's HAService): accepts slaves on haListenPort, one
``HAConnection`` each, and answers whether a put is replicated (SYNC_MASTER).

A SYNC_MASTER put is in sync once a slave reported an offset past its end; ``replicated`` waits
for that through one ``GroupTransfer`` shared by every pending put. With no slave connected, or
the best one more than haMaxGapNotInSync behind the put, it answers SLAVE_NOT_AVAILABLE at once;
past ``timeout_s`` FLUSH_SLAVE_TIMEOUT (the message is stored on the master either way: these
are RocketMQ's PutMessageStatus values, and its clients' SendStatus).

A slave that reports an end past this master's (its store was lost and it started empty, say)
makes ``write_refusal`` say why sends are refused, until a slave connects at an offset this master
has: what the master would write next lies at offsets the slave holds other bytes at.

Controller mode (a ``BrokerSyncStateSet`` given): slaves name themselves on connecting (``ha_protocol``'s
hello) and a put waits for members of the SyncStateSet (``sync_state_set.py``, which owns the set and the
confirmed offset consumers may read up to); with fewer members than minInSyncReplicas a put is refused
before it is stored (``too_few_in_sync``, as RocketMQ 5; a set that shrinks while a put is stored answers
it SLAVE_NOT_AVAILABLE). This service tells the set of every acknowledgement, and the set releases the
puts it completes.

Who may connect: with ``tls.server.mode`` permissive or enforcing the port serves TLS (mutual where
``tls.server.need.client.auth=require``; enforcing refuses plaintext slaves), and with ``aclEnable`` or an
accessKey set a slave must first prove the cluster's account (``ha_auth.py``). A connection that fails
either gets no commitlog byte: it is closed with one rate-limited log line.

Thread-safety: none; every method runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from spark_mq.common.config import BrokerConfig
from spark_mq.common.log_limit import LogLimiter
from spark_mq.common.tls import HANDSHAKE_TIMEOUT_S, accept_tls, server_context
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.ha.group_transfer import GroupTransfer
from spark_mq.store.ha.ha_auth import PeerRefused, admit, cluster_account
from spark_mq.store.ha.ha_connection import HAConnection
from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet
from spark_mq.store.results import PutStatus

log = logging.getLogger(__name__)
refused = LogLimiter(log)  # connections refused at the door, per peer host


class HAService:
    def __init__(self, config: BrokerConfig, commitlog: CommitLog, sync_state_set: BrokerSyncStateSet | None = None,
                 on_confirmed: Callable[[], None] = lambda: None) -> None:
        """``sync_state_set``: controller mode's set, whose members puts wait for; ``on_confirmed()``: its
        confirmed offset grew (held pulls may be answered now)."""
        self.config = config
        self.commitlog = commitlog
        self.sync_state_set = sync_state_set
        self.transfer = GroupTransfer()
        # replaced, never changed in place: a metrics scrape thread iterates it
        self.connections: frozenset[HAConnection] = frozenset()
        self._wake = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._bytes_sent_closed = 0  # by connections that ended (the total survives reconnects)
        self.write_refusal: str | None = None  # why sends are refused (a slave ahead of this master)
        self.ssl_context = server_context(config)
        self.account = cluster_account(config)
        self.auth_required = config.acl_enable or self.account is not None
        if sync_state_set is not None:
            sync_state_set.attach(commitlog.max_offset, lambda: ((c.slave_id, c.acked) for c in self.connections),
                                  self.transfer.ack, on_confirmed)

    async def start(self, port: int) -> int:
        """Listen on ``port`` (0: a free one); returns the port bound."""
        self._server = await asyncio.start_server(self._accept, self.config.listen_address, port)
        port = self._server.sockets[0].getsockname()[1]
        log.info("HA: serving slaves at %s:%d", self.config.listen_address, port)
        return port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[bool, int | None]:
        """TLS as configured, then the slave's proof: (admitted, the slave's first word if already read)."""
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            if self.ssl_context is not None:
                is_tls = await accept_tls(writer, self.ssl_context)
                if not is_tls and self.config.tls_server_mode == "enforcing":
                    raise PeerRefused("it does not speak TLS (tls.server.mode=enforcing)")
            first = await asyncio.wait_for(admit(reader, writer, self.account, self.auth_required),
                                           HANDSHAKE_TIMEOUT_S)
            return True, first
        except PeerRefused as e:
            refused.log(logging.WARNING, str(peer[0]), "refused", "HA: refusing a connection from %s:%s: %s",
                        peer[0], peer[1], e)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:  # ssl.SSLError is an OSError
            refused.log(logging.WARNING, str(peer[0]), "handshake", "HA: connection from %s:%s failed before "
                        "replicating: %s", peer[0], peer[1], getattr(e, "reason", None) or str(e) or type(e).__name__)
        writer.close()
        return False, None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            admitted, first = await self._admit(reader, writer)
        except asyncio.CancelledError:  # ``stop``: not raised, as below
            admitted, first = False, None
        if not admitted:
            self._tasks.discard(task)
            writer.close()
            return
        conn = HAConnection(reader, writer, self.commitlog, self.config.ha_transfer_batch_size,
                            self.config.ha_send_heartbeat_interval / 1000, self._wake, self._acked,
                            self._first_report, hello=self.sync_state_set is not None, first_word=first)
        self.connections = self.connections | {conn}
        try:
            # ``stop`` cancels this task; asyncio's server callback calls ``exception()`` on a task it
            # started, which raises for a cancelled one (a traceback in the log at every clean stop)
            with contextlib.suppress(asyncio.CancelledError):
                await conn.serve()
        finally:
            self.connections = self.connections - {conn}
            self._tasks.discard(task)
            self._bytes_sent_closed += conn.bytes_sent

    def _acked(self, offset: int) -> None:
        """A slave's report: release the puts it completes (in controller mode, the set works out which)."""
        if self.sync_state_set is None:
            self.transfer.ack(offset)
        else:
            self.sync_state_set.update()

    def _first_report(self, refusal: str | None) -> None:
        self.write_refusal = refusal

    def appended(self) -> None:
        """New commitlog bytes (a put): dated at once for every slave's lag in seconds (the end read before
        the clock, so a note never dates bytes before they were written; a note only when the transfers
        next look could be late by a busy loop's turn, and the bytes would look younger or, past every
        note, older than they are), and the transfers waiting for some woken."""
        end = self.commitlog.max_offset()
        now = time.monotonic()
        for conn in self.connections:
            conn.end_times.record(now, end)
        self._wake.set()

    def bytes_sent(self) -> int:
        """Commitlog bytes streamed to slaves since start, over every connection."""
        return self._bytes_sent_closed + sum(c.bytes_sent for c in self.connections)

    def runtime_info(self, now: float) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's replication figures: RocketMQ's ``masterPutWhere`` and
        ``slaveFallBehindMuch`` (bytes the most advanced slave lacks, absent without a slave), and
        ours: slaves connected and the same slave's lag in seconds."""
        info = {"masterPutWhere": str(self.commitlog.max_offset()), "haConnectedSlaves": str(len(self.connections))}
        best = min(self.connections, key=lambda c: c.lag_bytes(), default=None)
        if best is not None:
            _, behind, seconds = best.lag(now)
            info["slaveFallBehindMuch"] = str(behind)
            info["slaveFallBehindSeconds"] = f"{seconds:.3f}"
        return info

    def slave_ack_offset(self) -> int:
        """The highest offset a connected slave reported (-1 without one)."""
        return max((c.acked for c in self.connections), default=-1)

    def is_slave_ok(self, offset: int) -> bool:
        """A slave is connected and within haMaxGapNotInSync of ``offset`` (RocketMQ's isSlaveOK)."""
        acked = self.slave_ack_offset()
        return acked >= 0 and offset - acked < self.config.ha_max_gap_not_in_sync

    def too_few_in_sync(self) -> str | None:
        """Why no put can be acknowledged now, whatever it waits for (controller mode: a SyncStateSet smaller than
        minInSyncReplicas), so that it is refused before it is stored, as RocketMQ 5's IN_SYNC_REPLICAS_NOT_ENOUGH;
        None otherwise."""
        sss = self.sync_state_set
        if sss is None or len(sss.members) >= self.config.min_in_sync_replicas:
            return None
        return (f"in-sync replicas not enough: the SyncStateSet {sorted(sss.members)} is smaller than "
                f"minInSyncReplicas={self.config.min_in_sync_replicas} (the other replicas are down, cut off or "
                "behind); nothing was stored: send again once they are back in sync")

    async def replicated(self, offset: int, timeout_s: float) -> PutStatus:
        """Wait until a slave has every byte below ``offset`` (a SYNC_MASTER put's end)."""
        self._wake.set()
        if self.sync_state_set is not None:
            if self.too_few_in_sync() is not None:  # the set shrank while the put was being stored
                return PutStatus.SLAVE_NOT_AVAILABLE
            if self.sync_state_set.members_needed() <= 0:
                return PutStatus.PUT_OK
        elif not self.is_slave_ok(offset):
            return PutStatus.SLAVE_NOT_AVAILABLE
        fut = self.transfer.future(offset)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            log.warning("HA: no slave acknowledged commitlog offset %d within %.1f s (slave at %d)", offset,
                        timeout_s, self.slave_ack_offset())
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        return PutStatus.PUT_OK
