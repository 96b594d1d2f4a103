"""Committed consumer offsets per ``topic@group`` and queue (``config/consumerOffset.json``,
RocketMQ's ConsumerOffsetManager layout ``{"offsetTable": {"topic@group": {"0": 42}}}``).

Commits land in memory; the file is rewritten atomically every few seconds and at shutdown.

On a slave, what clients commit is also kept aside (``for_master``, persisted beside the table as
``offsetsForMaster``) until its master has been offered it: clients commit to a slave only while
they cannot reach the master, and the master takes each such offset only where it is ahead of its
own (``advance``; see SlaveSynchronize and docs/operations.md, "Master and slave (replication)").

A master with replicas also writes every change to its offset log (``journal``, see offset_log.py), so that
a slave promoted after a commit was answered knows it.

Thread-safety: changed from the broker's event loop only; ``committed`` may be called from any
thread (the store's retention thread).
"""

from __future__ import annotations

from typing import Protocol

from spark_mq.store.config_file import JsonConfigFile

TOPIC_GROUP_SEPARATOR = "@"
FOR_MASTER_KEY = "offsetsForMaster"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # the broker's own groups: not journaled (derived from their own logs)
COMMIT, RESET, DROP = "c", "r", "d"

OffsetChange = tuple[str, str, int, int]
"""(kind, ``topic@group``, queue id, offset): a COMMIT (a replay keeps it only where it is ahead), a RESET (taken
as is) or a DROP of the whole ``topic@group`` (queue id and offset -1)."""


class OffsetJournal(Protocol):
    def note(self, changes: list[OffsetChange]) -> None: ...

    async def recorded(self) -> bool: ...

    def confirmed(self, key: str, queue_id: int, offset: int) -> int: ...


def _ints(raw: dict[str, dict[str, int]]) -> dict[str, dict[int, int]]:
    return {k: {int(q): int(o) for q, o in v.items()} for k, v in raw.items()}


def _strs(table: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {k: {str(q): o for q, o in v.items()} for k, v in table.items()}


class ConsumerOffsetManager:
    def __init__(self, file: JsonConfigFile, slave: bool = False) -> None:
        self.file = file
        self.table: dict[str, dict[int, int]] = {}
        # a slave's: offsets clients committed here that its master has not been offered yet
        self.for_master: dict[str, dict[int, int]] | None = {} if slave else None
        self.journal: OffsetJournal | None = None  # a master's offset log, once it replayed it
        self._dirty = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def load(self) -> None:
        raw = self.file.load({}) or {}
        self.table = _ints(raw.get("offsetTable", {}))
        if self.for_master is not None:
            self.for_master = _ints(raw.get(FOR_MASTER_KEY, {}))

    def persist(self) -> None:
        if self._dirty:
            content = {"offsetTable": _strs(self.table)}
            if self.for_master:
                content[FOR_MASTER_KEY] = _strs(self.for_master)
            self.file.persist(content)
            self._dirty = False

    def _note(self, changes: list[OffsetChange]) -> None:
        if self.journal is not None and changes:
            self.journal.note(changes)

    async def recorded(self) -> bool:
        """Whether the changes so far are in the offset log on the replicas sends wait for (True without one)."""
        return self.journal is None or await self.journal.recorded()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A client's commit."""
        key = self.key(topic, group)
        if self.of_key(key, queue_id) != offset and not group.startswith(SYSTEM_GROUP_PREFIX):
            self._note([(COMMIT, key, queue_id, offset)])
        self.table.setdefault(key, {})[queue_id] = offset
        if self.for_master is not None:
            self.for_master.setdefault(key, {})[queue_id] = offset
        self._dirty = True

    def offered(self, sent: dict[str, dict[int, int]]) -> None:
        """A slave's master has been offered ``sent`` (a copy of ``for_master``): those entries are done,
        but for queues committed again since (their new offsets wait for the next offer)."""
        assert self.for_master is not None
        for key, offsets in sent.items():
            mine = self.for_master.get(key, {})
            for queue_id, offset in offsets.items():
                if mine.get(queue_id) == offset:
                    del mine[queue_id]
                    self._dirty = True
            if not mine:
                self.for_master.pop(key, None)

    def advance(self, table: dict[str, dict[int, int]]) -> int:
        """A master takes the offsets its slave's clients committed there: each replaces ours only
        where it is ahead (or we have none); returns how many it took."""
        taken = [(COMMIT, key, queue_id, offset) for key, offsets in table.items()
                 for queue_id, offset in offsets.items() if offset > self.of_key(key, queue_id)]
        self._note(taken)
        for _, key, queue_id, offset in taken:
            self.table.setdefault(key, {})[queue_id] = offset
        self._dirty = self._dirty or bool(taken)
        return len(taken)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 if the group never committed for this queue."""
        return self.of_key(self.key(topic, group), queue_id)

    def of_key(self, key: str, queue_id: int) -> int:
        return self.table.get(key, {}).get(queue_id, -1)

    def answer(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset a consumer is told: ``query`` as far as the offset log is on the replicas sends
        wait for, so that no master elected later answers less than a consumer was told."""
        offset = self.query(group, topic, queue_id)
        return offset if self.journal is None else self.journal.confirmed(self.key(topic, group), queue_id, offset)

    def committed(self, topic: str, queue_id: int) -> dict[str, int]:
        """The committed offset of every group with one for the queue: what forced retention must
        not delete past. (``list`` copies the table in one step under the GIL, so a commit on the
        event loop meanwhile cannot break the iteration.)"""
        prefix = topic + TOPIC_GROUP_SEPARATOR
        out = {}
        for key, offsets in list(self.table.items()):
            if key.startswith(prefix):
                offset = offsets.get(queue_id)
                if offset is not None:
                    out[key[len(prefix):]] = offset
        return out

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        key = self.key(topic, group)
        self._note([(DROP, key, -1, -1), *((RESET, key, q, o) for q, o in offsets.items())])
        self.table[key] = dict(offsets)
        self._dirty = True

    def replay(self, changes: list[OffsetChange]) -> int:
        """Apply changes read back from the offset log, in order; returns how many moved an offset."""
        moved = 0
        for kind, key, queue_id, offset in changes:
            if kind == DROP:
                moved += self.table.pop(key, None) is not None
            elif kind == RESET or offset > self.of_key(key, queue_id):
                moved += self.table.setdefault(key, {}).get(queue_id) != offset
                self.table[key][queue_id] = offset
        self._dirty = self._dirty or moved > 0
        return moved

    def take(self, table: dict[str, dict[int, int]]) -> None:
        """Every ``topic@group`` of ``table`` replaces ours (RocketMQ's slave ``putAll``); keys only
        we hold are kept. Only a change marks the table dirty: a slave takes its master's table every
        sync round, mostly unchanged, and need not rewrite the file for that."""
        changed = {k: dict(v) for k, v in table.items() if self.table.get(k) != v}
        if changed:
            self.table.update(changed)
            self._dirty = True

    def drop_group(self, group: str) -> int:
        """Forget every committed offset of ``group``; how many topics it had offsets of."""
        suffix = TOPIC_GROUP_SEPARATOR + group
        keys = [k for k in self.table if k.endswith(suffix)]
        self._note([(DROP, k, -1, -1) for k in keys])
        for k in keys:
            del self.table[k]
            if self.for_master is not None:
                self.for_master.pop(k, None)
        self._dirty = self._dirty or bool(keys)
        return len(keys)

    def drop_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        keys = [k for k in self.table if k.startswith(prefix)]
        self._note([(DROP, k, -1, -1) for k in keys])
        for k in keys:
            del self.table[k]
            self._dirty = True
        if self.for_master is not None:
            for k in [k for k in self.for_master if k.startswith(prefix)]:
                del self.for_master[k]
