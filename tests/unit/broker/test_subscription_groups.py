"""SubscriptionGroupManager persists every change with a new data version, a slave's ``replace``
takes a master's table only when the version differs, and names follow the rule; the bodies a
slave decodes refuse what is not RocketMQ's shape."""

from __future__ import annotations

import pytest

from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.common.errors import BodyError, InvalidNameError
from spark_mq.remoting.bodies import (
    ConsumerOffsetSerializeWrapper,
    DataVersion,
    DelayOffsetSerializeWrapper,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from spark_mq.store.config_file import SUBSCRIPTION_GROUPS, config_file


def manager(tmp_path) -> SubscriptionGroupManager:
    groups = SubscriptionGroupManager(config_file(tmp_path / "store", SUBSCRIPTION_GROUPS))
    groups.load()
    return groups


def test_a_group_is_persisted_with_a_new_version(tmp_path):
    groups = manager(tmp_path)
    before = groups.data_version
    groups.upsert(SubscriptionGroupConfig("g1", retry_max_times=3))
    assert groups.data_version.counter == before.counter + 1
    again = manager(tmp_path)
    assert again.groups == groups.groups and again.data_version == groups.data_version
    assert again.delete("g1") and not again.delete("g1")
    assert manager(tmp_path).groups == {}


def test_replace_takes_a_masters_table_only_when_its_version_differs(tmp_path):
    groups = manager(tmp_path)
    groups.upsert(SubscriptionGroupConfig("mine"))
    master = SubscriptionGroupWrapper({"theirs": SubscriptionGroupConfig("theirs")}, DataVersion(5, 9))
    assert groups.replace(master)
    assert set(groups.groups) == {"theirs"} and groups.data_version == DataVersion(5, 9)
    assert not groups.replace(SubscriptionGroupWrapper({}, DataVersion(5, 9)))
    assert set(manager(tmp_path).groups) == {"theirs"}


@pytest.mark.parametrize("name", ["", "../x", "g" * 300])
def test_a_group_that_breaks_the_rule_is_refused(tmp_path, name):
    groups = manager(tmp_path)
    with pytest.raises(InvalidNameError):
        groups.upsert(SubscriptionGroupConfig(name))
    assert groups.groups == {}


@pytest.mark.parametrize(("cls", "body"), [
    (ConsumerOffsetSerializeWrapper, b'{"offsetTable":{"t@g":{0:"x"}}}'),
    (ConsumerOffsetSerializeWrapper, b'{"offsetTable":{"t@g":[1]}}'),
    (DelayOffsetSerializeWrapper, b'{"offsetTable":{"a":1}}'),
    (SubscriptionGroupWrapper, b'{"subscriptionGroupTable":{"g":{"retryMaxTimes":1}}}'),
])
def test_a_body_not_in_rocketmqs_shape_is_a_body_error(cls, body):
    with pytest.raises(BodyError):
        cls.from_json(body)


def test_fastjson_integer_keys_are_read():
    assert ConsumerOffsetSerializeWrapper.from_json(b'{"offsetTable":{"t@g":{0:5,3:7}}}').offset_table == {
        "t@g": {0: 5, 3: 7}}
    assert DelayOffsetSerializeWrapper.from_json(b'{"offsetTable":{1:0,2:12}}').offset_table == {1: 0, 2: 12}
