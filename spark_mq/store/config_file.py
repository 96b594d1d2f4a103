"""The JSON config files kept beside the store under ``config/`` (RocketMQ's names), each a
``JsonConfigFile`` (atomic writes)."""

from __future__ import annotations

from pathlib import Path

from spark_mq.common.json_file import JsonConfigFile
from spark_mq.store.store_paths import CONFIG_DIR, store_path

TOPICS = "topics.json"
SUBSCRIPTION_GROUPS = "subscriptionGroup.json"
CONSUMER_OFFSETS = "consumerOffset.json"
DELAY_OFFSETS = "delayOffset.json"
TIERED_OFFSETS = "tieredOffset.json"
TIMER_CHECKPOINT = "timercheck.json"

__all__ = ["CONFIG_DIR", "CONSUMER_OFFSETS", "DELAY_OFFSETS", "SUBSCRIPTION_GROUPS", "TIERED_OFFSETS",
           "TIMER_CHECKPOINT", "TOPICS", "JsonConfigFile", "config_file"]


def config_file(store_root: Path, name: str) -> JsonConfigFile:
    """``<storePathRootDir>/config/<name>``: usable before the store is opened (the broker loads
    the tiered offsets its store's retention consults)."""
    return JsonConfigFile(store_path(store_root, CONFIG_DIR, name))
