"""The JSON config files kept beside the store under ``config/`` (RocketMQ's names), each a
``JsonConfigFile`` (atomic writes)."""

from __future__ import annotations

from spark_mq.common.json_file import JsonConfigFile

TOPICS = "topics.json"
SUBSCRIPTION_GROUPS = "subscriptionGroup.json"
CONSUMER_OFFSETS = "consumerOffset.json"
DELAY_OFFSETS = "delayOffset.json"
TIERED_OFFSETS = "tieredOffset.json"

__all__ = ["CONSUMER_OFFSETS", "DELAY_OFFSETS", "SUBSCRIPTION_GROUPS", "TIERED_OFFSETS", "TOPICS", "JsonConfigFile"]
