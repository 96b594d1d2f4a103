"""Subscription group configs (``config/subscriptionGroup.json``, RocketMQ's SubscriptionGroupManager
layout: a SubscriptionGroupWrapper).

Groups are created or updated by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and removed by
DELETE_SUBSCRIPTIONGROUP; a slave replaces its table with its master's. Every change is written at
once (atomically) and moves the data version, which is how a slave tells that there is news.

Thread-safety: used from the broker's event loop only.
"""

from __future__ import annotations

import json
import logging

from spark_mq.common.names import validate_group
from spark_mq.remoting.bodies import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper
from spark_mq.store.config_file import JsonConfigFile

log = logging.getLogger(__name__)


class SubscriptionGroupManager:
    def __init__(self, file: JsonConfigFile) -> None:
        self.file = file
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion.now()

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            wrapper = SubscriptionGroupWrapper.from_json(json.dumps(raw))
            self.groups, self.data_version = wrapper.subscription_group_table, wrapper.data_version

    def persist(self) -> None:
        self.file.persist(json.loads(self.wrapper().to_json(standard=True)))

    def _changed(self) -> None:
        self.data_version = self.data_version.next()
        self.persist()

    def find(self, group: str) -> SubscriptionGroupConfig:
        """``group``'s config, or RocketMQ's defaults for a group never configured (RocketMQ creates it on
        first use; we store only what an admin set)."""
        return self.groups.get(group) or SubscriptionGroupConfig(group)

    def upsert(self, group: SubscriptionGroupConfig) -> None:
        """Create or update; raises InvalidNameError for a name that breaks the naming rule."""
        validate_group(group.group_name)
        self.groups[group.group_name] = group
        log.info("subscription group %s: consumeEnable %s, retryMaxTimes %d, consumeMessageOrderly %s",
                 group.group_name, group.consume_enable, group.retry_max_times, group.consume_message_orderly)
        self._changed()

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self._changed()
        return True

    def replace(self, wrapper: SubscriptionGroupWrapper) -> bool:
        """Take ``wrapper``'s table and version as they are (a slave copying its master); False when
        the version is the one held already."""
        if wrapper.data_version == self.data_version:
            return False
        self.groups, self.data_version = dict(wrapper.subscription_group_table), wrapper.data_version
        self.persist()
        return True

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(dict(self.groups), self.data_version)
