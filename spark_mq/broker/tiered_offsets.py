"""Archived-up-to offsets per topic queue (``config/tieredOffset.json``, laid out as the consumer
offsets: ``{"offsetTable": {"topic": {"0": 42}}}``): queue offsets [0, offset) of the queue are
in the tiered archive. Offload jobs advance them (UPDATE_TIERED_OFFSET); with tieredStoreEnable
the store's retention keeps every commitlog file holding messages at or past them.

A watermark never moves back, so every accepted change is written (atomically) before it is
acknowledged: a crash cannot undo what an offload job was told.

A master serves its whole table (GET_ALL_TIERED_OFFSET, the file's layout as the body); a slave takes
it from there (``replace``, by its SlaveSynchronize) and takes no watermark of its own.

Thread-safety: changed from the broker's event loop only; ``get`` may be called from any thread
(the store's retention thread): the table is replaced, never changed in place.
"""

from __future__ import annotations

import json
from typing import Any

from spark_mq.store.config_file import JsonConfigFile

Table = dict[str, dict[int, int]]  # topic -> queue id -> archived-up-to offset


def decode_table(raw: Any) -> Table:
    """The table of the file's layout ``{"offsetTable": {"topic": {"0": 42}}}`` (the file, or a master's
    GET_ALL_TIERED_OFFSET body); ValueError/TypeError/AttributeError when it is not of that layout."""
    return {str(t): {int(q): int(o) for q, o in v.items()} for t, v in (raw or {}).get("offsetTable", {}).items()}


def encode_table(table: Table) -> dict[str, Any]:
    return {"offsetTable": {t: {str(q): o for q, o in v.items()} for t, v in table.items()}}


class TieredOffsetManager:
    def __init__(self, file: JsonConfigFile) -> None:
        self.file = file
        self.table: Table = {}

    def load(self) -> None:
        self.table = decode_table(self.file.load({}))

    def _write(self, table: Table) -> None:
        """Write ``table`` and only then make it current: a failed write changes nothing."""
        self.file.persist(encode_table(table))
        self.table = table

    def to_json(self) -> bytes:
        """GET_ALL_TIERED_OFFSET's body: the whole table in the file's layout."""
        return json.dumps(encode_table(self.table), sort_keys=True).encode()

    def replace(self, table: Table) -> bool:
        """A slave's copy of its master's ``table``, persisted; False (nothing written) when it has it
        already. Raises OSError if the file cannot be written."""
        if table == self.table:
            return False
        self._write(table)
        return True

    def get(self, topic: str, queue_id: int) -> int:
        """The queue's archived-up-to offset, 0 if nothing was ever archived."""
        return self.table.get(topic, {}).get(queue_id, 0)

    def set(self, topic: str, queue_id: int, offset: int) -> bool:
        """Record ``offset`` (the caller checked that it does not move back) and persist it; False
        when it was recorded already (nothing written). Raises OSError if the file cannot be written."""
        if self.table.get(topic, {}).get(queue_id) == offset:
            return False
        self._write({**self.table, topic: {**self.table.get(topic, {}), queue_id: offset}})
        return True

    def drop_topic(self, topic: str) -> None:
        """Forget a deleted topic (its queue offsets start again from 0 if it is created again)."""
        if topic in self.table:
            self._write({t: v for t, v in self.table.items() if t != topic})
