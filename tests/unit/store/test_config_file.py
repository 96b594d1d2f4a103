"""JSON config files beside the store (topics, groups, offsets): atomic persist and load."""

from __future__ import annotations

import pytest

from spark_mq.common.errors import CorruptFileError
from spark_mq.store.config_file import CONSUMER_OFFSETS, JsonConfigFile

OFFSETS = {"offsetTable": {"TopicA@group1": {"0": 15, "1": 7}, "%RETRY%group1@group1": {"0": 0}}}


def test_persist_then_load_round_trip(tmp_path):
    f = JsonConfigFile(tmp_path / "config" / CONSUMER_OFFSETS)
    f.persist(OFFSETS)
    assert f.load() == OFFSETS
    assert JsonConfigFile(tmp_path / "config" / CONSUMER_OFFSETS).load() == OFFSETS  # a fresh reader too


def test_persist_replaces_and_leaves_no_temporary_file(tmp_path):
    f = JsonConfigFile(tmp_path / "topics.json")
    f.persist({"v": 1})
    f.persist({"v": 2, "unicode": "主题"})
    assert f.load() == {"v": 2, "unicode": "主题"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.json"]


def test_missing_file_gives_the_default(tmp_path):
    assert JsonConfigFile(tmp_path / "absent.json").load() is None
    assert JsonConfigFile(tmp_path / "absent.json").load(default={}) == {}


@pytest.mark.parametrize("text", ['{"offsetTable": {', "", "not json", '{"a": 1}}'])
def test_corrupt_json_names_the_file(tmp_path, text):
    path = tmp_path / CONSUMER_OFFSETS
    path.write_text(text)
    with pytest.raises(CorruptFileError) as e:
        JsonConfigFile(path).load()
    assert e.value.path == str(path)
    assert str(path) in str(e.value) and "invalid JSON" in str(e.value)
