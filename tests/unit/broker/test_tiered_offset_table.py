"""The tiered offset table: persisted on every change (atomically), reloaded, idempotent, dropped
with its topic, unchanged when the write fails."""

from __future__ import annotations

import json

import pytest

from spark_mq.broker.tiered_offsets import TieredOffsetManager
from spark_mq.store.config_file import TIERED_OFFSETS, config_file


def test_set_persists_at_once_and_reloads(tmp_path):
    file = config_file(tmp_path, TIERED_OFFSETS)
    table = TieredOffsetManager(file)
    table.load()
    assert table.get("T", 0) == 0  # nothing archived yet
    assert table.set("T", 0, 40) and table.set("T", 3, 7) and table.set("U", 0, 1)
    assert json.loads((tmp_path / "config" / "tieredOffset.json").read_text()) == {
        "offsetTable": {"T": {"0": 40, "3": 7}, "U": {"0": 1}}}
    again = TieredOffsetManager(file)
    again.load()
    assert (again.get("T", 0), again.get("T", 3), again.get("T", 1), again.get("U", 0)) == (40, 7, 0, 1)


def test_same_offset_again_writes_nothing(tmp_path):
    table = TieredOffsetManager(config_file(tmp_path, TIERED_OFFSETS))
    assert table.set("T", 0, 5)
    path = tmp_path / "config" / "tieredOffset.json"
    path.unlink()
    assert not table.set("T", 0, 5)
    assert not path.exists()


def test_drop_topic_forgets_only_that_topic(tmp_path):
    file = config_file(tmp_path, TIERED_OFFSETS)
    table = TieredOffsetManager(file)
    table.set("T", 0, 5)
    table.set("U", 1, 6)
    table.drop_topic("T")
    table.drop_topic("never-there")
    reloaded = TieredOffsetManager(file)
    reloaded.load()
    assert (reloaded.get("T", 0), reloaded.get("U", 1)) == (0, 6)


def test_a_failed_write_changes_nothing(tmp_path):
    (tmp_path / "config").write_text("a file where the directory should be")
    table = TieredOffsetManager(config_file(tmp_path, TIERED_OFFSETS))
    with pytest.raises(OSError):
        table.set("T", 0, 5)
    assert table.get("T", 0) == 0
