"""TopicConfigManager keeps only topics that follow the naming rule: adding one that breaks it
raises, and one left in topics.json by an older version is dropped at load with a warning."""

from __future__ import annotations

import logging

import pytest
from unit_helpers import tiny_config

from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.errors import InvalidNameError
from spark_mq.remoting.bodies import TopicConfig
from spark_mq.store.config_file import TOPICS, config_file


def manager(tmp_path) -> TopicConfigManager:
    root = tmp_path / "store"
    topics = TopicConfigManager(tiny_config(root), config_file(root, TOPICS))
    topics.load()
    return topics


@pytest.mark.parametrize("name", ["%RETRY%g/../../../victim", "../x", "", "a.b", "T" * 128])
def test_a_topic_that_breaks_the_rule_is_never_added(tmp_path, name):
    topics = manager(tmp_path)
    with pytest.raises(InvalidNameError):
        topics.upsert(TopicConfig(name))
    with pytest.raises(InvalidNameError):
        topics.ensure_retry_topic(name)
    assert name not in topics.topics and f"%RETRY%{name}" not in topics.topics


def test_an_illegal_topic_left_in_topics_json_is_dropped_at_load(tmp_path, caplog):
    topics = manager(tmp_path)
    assert topics.ensure_retry_topic("g")
    raw = topics.file.load()
    raw["topicConfigTable"]["%RETRY%g/../../../victim"] = {**raw["topicConfigTable"]["%RETRY%g"],
                                                          "topicName": "%RETRY%g/../../../victim"}
    topics.file.persist(raw)
    with caplog.at_level(logging.WARNING):
        again = manager(tmp_path)
    assert "%RETRY%g" in again.topics and "%RETRY%g/../../../victim" not in again.topics
    assert "dropped" in caplog.text and "%RETRY%g/../../../victim" in caplog.text
