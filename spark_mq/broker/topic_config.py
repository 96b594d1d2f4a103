"""Topic configs (``config/topics.json``, RocketMQ's TopicConfigManager layout).

Topics are created explicitly (UPDATE_AND_CREATE_TOPIC) or on first send when
``autoCreateTopicEnable`` is on; ``TBW102`` is the default topic RocketMQ clients route
unknown topics through, so it is registered with the inherit permission when auto-create is on.
Every topic name is checked against the naming rule (``common/names.py``) before it is added: a
topic is a directory under ``consumequeue/``. A name in ``topics.json`` that breaks the rule
(written by an older version) is dropped at load with a warning.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import json
import logging

from spark_mq.common.config import BrokerConfig
from spark_mq.common.delay_levels import parse_delay_levels
from spark_mq.common.errors import InvalidNameError
from spark_mq.common.names import AUTO_CREATE_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC, retry_topic, validate_topic
from spark_mq.common.perm import PERM_INHERIT, PERM_READ_WRITE
from spark_mq.remoting.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from spark_mq.store.config_file import JsonConfigFile

log = logging.getLogger(__name__)



class TopicConfigManager:
    def __init__(self, config: BrokerConfig, file: JsonConfigFile) -> None:
        self.config = config
        self.file = file
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion.now()

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            wrapper = TopicConfigSerializeWrapper.from_json(json.dumps(raw))
            self.topics = {name: tc for name, tc in wrapper.topic_config_table.items() if _loadable(name, tc)}
            self.data_version = wrapper.data_version
        system = [self.config.broker_cluster_name, self.config.broker_name]
        if self.config.auto_create_topic_enable:
            self.topics.setdefault(
                AUTO_CREATE_TOPIC,
                TopicConfig(AUTO_CREATE_TOPIC, self.config.default_topic_queue_nums,
                            self.config.default_topic_queue_nums, PERM_READ_WRITE | PERM_INHERIT),
            )
        for name in system:
            self.topics.setdefault(name, TopicConfig(name, 1, 1, PERM_INHERIT))
        # delayed messages wait in one queue per level (RocketMQ registers it the same way)
        levels = len(parse_delay_levels(self.config.message_delay_level))
        self.topics.setdefault(SCHEDULE_TOPIC, TopicConfig(SCHEDULE_TOPIC, levels, levels, PERM_READ_WRITE))
        self.topics.setdefault(TIMER_TOPIC, TopicConfig(TIMER_TOPIC, 1, 1, PERM_READ_WRITE))  # timer messages wait here

    def persist(self) -> None:
        wrapper = TopicConfigSerializeWrapper(self.topics, self.data_version)
        self.file.persist(json.loads(wrapper.to_json(standard=True)))

    def _changed(self) -> None:
        self.data_version = self.data_version.next()
        self.persist()

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def upsert(self, topic: TopicConfig) -> bool:
        """Create or update; returns whether anything changed. Raises InvalidNameError for a name
        that breaks the naming rule."""
        validate_topic(topic.topic_name)
        if self.topics.get(topic.topic_name) == topic:
            return False
        self.topics[topic.topic_name] = topic
        log.info("topic %s: %d read / %d write queues, perm %d", topic.topic_name, topic.read_queue_nums,
                 topic.write_queue_nums, topic.perm)
        self._changed()
        return True

    def delete(self, topic: str) -> bool:
        if self.topics.pop(topic, None) is None:
            return False
        self._changed()
        return True

    def create_on_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create ``topic`` on first send, as RocketMQ does through the default topic."""
        if not self.config.auto_create_topic_enable:
            return None
        base = self.topics.get(default_topic or AUTO_CREATE_TOPIC)
        if base is None or not base.perm & PERM_INHERIT:
            return None
        nums = max(1, min(queue_nums or self.config.default_topic_queue_nums, base.write_queue_nums))
        created = TopicConfig(topic, nums, nums, PERM_READ_WRITE)
        self.upsert(created)
        return created

    def ensure_system_topic(self, name: str) -> bool:
        """A broker-written topic (one queue, readable for inspection); True if created."""
        if name in self.topics:
            return False
        return self.upsert(TopicConfig(name, 1, 1, PERM_READ_WRITE))

    def ensure_retry_topic(self, group: str) -> bool:
        """``%RETRY%<group>`` (one queue) for a clustering consumer group; True if created. Raises
        InvalidNameError unless the retry topic is a valid name as a whole."""
        name = retry_topic(group)
        if name in self.topics:
            return False
        return self.upsert(TopicConfig(name, 1, 1, PERM_READ_WRITE))

    def replace(self, wrapper: TopicConfigSerializeWrapper) -> bool:
        """Take ``wrapper``'s topics and version as they are (a slave copying its master), persisted;
        False when the version is the one held already. A name that breaks the rule is dropped."""
        if wrapper.data_version == self.data_version:
            return False
        self.topics = {name: tc for name, tc in wrapper.topic_config_table.items() if _loadable(name, tc)}
        self.data_version = wrapper.data_version
        self.persist()
        return True

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.topics), self.data_version)


def _loadable(name: str, topic: TopicConfig) -> bool:
    """Whether a topic read from ``topics.json`` is kept: its name must follow the naming rule."""
    try:
        validate_topic(name)
        validate_topic(topic.topic_name)
    except InvalidNameError as e:
        log.warning("topics.json: topic %r dropped: %s", name, e)
        return False
    return True
