"""Committed consumer offsets per ``topic@group`` and queue (``config/consumerOffset.json``,
RocketMQ's ConsumerOffsetManager layout ``{"offsetTable": {"topic@group": {"0": 42}}}``).

Commits land in memory; the file is rewritten atomically every few seconds and at shutdown.

Thread-safety: changed from the broker's event loop only; ``committed`` may be called from any
thread (the store's retention thread).
"""

from __future__ import annotations

from spark_mq.store.config_file import JsonConfigFile

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, file: JsonConfigFile) -> None:
        self.file = file
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def load(self) -> None:
        raw = self.file.load({}) or {}
        self.table = {k: {int(q): int(o) for q, o in v.items()} for k, v in raw.get("offsetTable", {}).items()}

    def persist(self) -> None:
        if self._dirty:
            self.file.persist({"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}})
            self._dirty = False

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 if the group never committed for this queue."""
        return self.table.get(self.key(topic, group), {}).get(queue_id, -1)

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

    def groups_of(self, topic: str) -> list[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return sorted(k[len(prefix):] for k in self.table if k.startswith(prefix))

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(self.key(topic, group), {}))

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        self.table[self.key(topic, group)] = dict(offsets)
        self._dirty = True

    def take(self, table: dict[str, dict[int, int]]) -> None:
        """Every ``topic@group`` of ``table`` replaces ours (RocketMQ's slave ``putAll``); keys only
        we hold are kept. Only a change marks the table dirty: a slave takes its master's table every
        sync round, mostly unchanged, and need not rewrite the file for that."""
        changed = {k: dict(v) for k, v in table.items() if self.table.get(k) != v}
        if changed:
            self.table.update(changed)
            self._dirty = True

    def drop_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for k in [k for k in self.table if k.startswith(prefix)]:
            del self.table[k]
            self._dirty = True
