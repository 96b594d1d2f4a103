"""Consumer offset stores, as RocketMQ's ``OffsetStore``: where a consumer group's progress per
queue lives between pulls and across restarts.

- :class:`RemoteBrokerOffsetStore` (clustering): offsets live at each queue's broker
  (QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET), cached in memory between persists.
- :class:`LocalFileOffsetStore` (broadcasting): every consumer keeps its own offsets in
  ``~/.spark_mq_offsets/<clientId>/<group>/offsets.json``, written atomically.

An offset is the next offset to consume (one past the last consumed message); ``-1`` means
unknown (the group never committed one for the queue). ``update`` only touches memory;
``persist``/``persist_all`` write through.

Thread-safety: not thread-safe; every method runs on the client instance's event loop.
Coroutines may interleave at their awaits: memory is only read or written between awaits.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spark_mq.client.api import MQClientAPI
from spark_mq.common.errors import ClientError, MQClientError, RemotingError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.remoting.bodies import MessageQueue

if TYPE_CHECKING:
    from spark_mq.client.instance import ClientInstance

log = logging.getLogger(__name__)

UNKNOWN = -1
LOCAL_OFFSET_DIR = Path.home() / ".spark_mq_offsets"


class OffsetStore(Protocol):
    async def load(self) -> None:
        """Read persisted offsets into memory (a no-op for the broker store)."""

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Set the in-memory offset (``increase_only``: never move it back)."""

    async def read(self, mq: MessageQueue, from_store: bool) -> int:
        """The offset from memory, or (``from_store``) from the broker/file, caching it; -1 = unknown."""

    async def persist(self, mq: MessageQueue) -> None:
        """Write the queue's in-memory offset through (nothing if there is none)."""

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        """Write through the offsets of ``mqs``; forget in-memory offsets of every other queue."""

    def remove(self, mq: MessageQueue) -> None:
        """Forget the queue's in-memory offset."""

    def offsets(self) -> dict[MessageQueue, int]:
        """A copy of the in-memory offsets."""


class _MemoryTable:
    """The in-memory half every store shares."""

    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if increase_only and mq in self._table and self._table[mq] >= offset:
            return  # an absent offset is set whatever its value, as Java's putIfAbsent first
        self._table[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)

    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self._table)


async def query_committed_offset(api: MQClientAPI, addr: str, group: str, mq: MessageQueue, *,
                                 zero_if_not_found: bool = False, timeout: float | None = None) -> int | None:
    """QUERY_CONSUMER_OFFSET of ``group`` on ``mq``; None when the group has none.

    ``zero_if_not_found=False`` sends RocketMQ 5's ``setZeroIfNotFound=false``, so the broker says
    QUERY_NOT_FOUND for a new group instead of 0 (4.x brokers answer 0 while the queue still
    starts at 0, which makes CONSUME_FROM_LAST_OFFSET read the whole queue).
    """
    return await api.query_consumer_offset(addr, group, mq.topic, mq.queue_id, zero_if_not_found=zero_if_not_found,
                                           timeout=timeout)


async def broker_addr_of(instance: ClientInstance, mq: MessageQueue) -> str:
    """The master address of the queue's broker (a slave's while the route has no master), refreshing the
    topic's route once if unknown."""
    addr = instance.subscribe_addr(mq.broker_name)
    if addr is None:
        await instance.route(mq.topic, refresh=True)
        addr = instance.subscribe_addr(mq.broker_name)
    if addr is None:
        raise ClientError(f"broker {mq.broker_name} of {mq.topic}:{mq.queue_id} is not in the topic's route "
                          f"(is it running and registered with {instance.config.namesrv_addr}?)")
    return addr


class RemoteBrokerOffsetStore(_MemoryTable):
    """Clustering: the group's offsets at each queue's broker, cached in memory."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        return None

    async def read(self, mq: MessageQueue, from_store: bool) -> int:
        if not from_store:
            return self._table.get(mq, UNKNOWN)
        addr = await broker_addr_of(self.instance, mq)
        offset = await query_committed_offset(self.instance.api, addr, self.group, mq)
        if offset is None:
            return UNKNOWN
        self._table[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._table.get(mq)
        if offset is None or offset < 0:
            return
        addr = await broker_addr_of(self.instance, mq)
        await self.instance.api.update_consumer_offset(addr, self.group, mq.topic, mq.queue_id, offset)

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        failed = []
        for mq in sorted(self._table):
            if mq not in mqs:
                del self._table[mq]
                continue
            try:
                await self.persist(mq)
            except (RemotingError, MQClientError, ClientError) as e:
                failed.append(f"{mq.topic}:{mq.broker_name}:{mq.queue_id} ({e})")
        if failed:
            log.warning("group %s: persisting offsets failed for %s", self.group, "; ".join(failed))


class LocalFileOffsetStore(_MemoryTable):
    """Broadcasting: offsets of this consumer only, in a JSON file of its own.

    File layout: ``{"offsetTable": [{"topic": .., "brokerName": .., "queueId": .., "offset": ..}]}``.
    """

    def __init__(self, instance: ClientInstance, group: str, path: Path | None = None) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        self.path = path or LOCAL_OFFSET_DIR / _safe(instance.client_id) / _safe(group) / "offsets.json"
        self._file = JsonConfigFile(self.path)
        self._write_lock = asyncio.Lock()

    def _read_file(self) -> dict[MessageQueue, int]:
        data = self._file.load({"offsetTable": []})
        try:
            return {MessageQueue(e["topic"], e["brokerName"], int(e["queueId"])): int(e["offset"])
                    for e in data["offsetTable"]}
        except (KeyError, TypeError, ValueError) as e:
            raise ClientError(f"offset file {self.path} is malformed ({type(e).__name__}: {e}); "
                              f"fix or delete it") from None

    async def load(self) -> None:
        self._table.update(await asyncio.to_thread(self._read_file))

    async def read(self, mq: MessageQueue, from_store: bool) -> int:
        if not from_store:
            return self._table.get(mq, UNKNOWN)
        offset = (await asyncio.to_thread(self._read_file)).get(mq)
        if offset is None:
            return UNKNOWN
        self._table[mq] = offset
        return offset

    async def _write(self, table: dict[MessageQueue, int]) -> None:
        value = {"offsetTable": [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                                  "offset": offset} for mq, offset in sorted(table.items()) if offset >= 0]}
        async with self._write_lock:  # one rename at a time, in call order
            await asyncio.to_thread(self._file.persist, value)

    async def persist(self, mq: MessageQueue) -> None:
        if mq in self._table:
            await self._write(self._table)

    async def persist_all(self, mqs: set[MessageQueue]) -> None:
        for mq in [mq for mq in self._table if mq not in mqs]:
            del self._table[mq]
        await self._write(self._table)


def _safe(name: str) -> str:
    """A path component for a client id or group (no separators)."""
    return name.replace("/", "_").replace("\\", "_")
