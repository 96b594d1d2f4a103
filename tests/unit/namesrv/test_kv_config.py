"""KV config survives a NameServer restart when it has a file, and stays in memory without."""

from __future__ import annotations

from pathlib import Path

from spark_mq.common.json_file import JsonConfigFile
from spark_mq.namesrv.kv_config import KVConfigManager


def test_kv_config_persists_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(JsonConfigFile(path))
    kv.put("ORDER_TOPIC_CONFIG", "Orders", "broker-a:8")
    kv.put("ns", "k", "v")
    kv.delete("ns", "k")

    again = KVConfigManager(JsonConfigFile(path))
    assert again.get("ORDER_TOPIC_CONFIG", "Orders") == "broker-a:8"
    assert again.get("ns", "k") is None
    assert again.namespace("ns") == {}


def test_kv_config_without_a_file_is_memory_only(tmp_path: Path) -> None:
    kv = KVConfigManager()
    kv.put("ns", "k", "v")
    assert kv.get("ns", "k") == "v"
    assert KVConfigManager().get("ns", "k") is None
    assert list(tmp_path.iterdir()) == []
