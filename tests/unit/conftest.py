"""Fixtures of the unit tests; plain helpers live in ``unit_helpers`` (importable from here on)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from unit_helpers import tiny_config

from spark_mq.store.message_store import MessageStore


@pytest.fixture
def make_store(tmp_path):
    """Start MessageStores on tiny files (disk usage pinned low); all are shut down afterwards."""
    opened: list[MessageStore] = []

    def make(root: Path | None = None, clock=None, **overrides) -> MessageStore:
        cfg = tiny_config(root or tmp_path / "store", **overrides)
        kwargs = {"clock": clock} if clock is not None else {}
        store = MessageStore(cfg, disk_ratio=lambda _p: 0.1, **kwargs).start()
        opened.append(store)
        return store

    yield make
    for s in opened:
        s.shutdown()
