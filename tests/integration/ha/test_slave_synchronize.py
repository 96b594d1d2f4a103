"""A slave copies its master's metadata (RocketMQ's SlaveSynchronize): topic configs, subscription
groups, consumer offsets and delay offsets, from real master and slave processes; and the master's
GET_ALL_* answers are RocketMQ's bodies, read here with a plain JSON reader (not our body classes)."""

from __future__ import annotations

import json
import re

import pytest
from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader

SYNC_INTERVAL_MS = 500  # the slave's slaveSynchronizeInterval in these tests
SYNC_TIMEOUT_S = 20.0
_INT_KEY = re.compile(r'([{,])(-?\d+):')


def fastjson_loads(body: bytes) -> dict:
    """fastjson's output (integer map keys unquoted) read with the standard library."""
    return json.loads(_INT_KEY.sub(r'\1"\2":', body.decode()))


@pytest.fixture
def remoting():
    client = SyncRemotingClient()
    yield client
    client.close()


@pytest.fixture
def synced_pair(ha_pair, tmp_path, namesrv):
    """An ASYNC_MASTER and its slave, the slave copying metadata every SYNC_INTERVAL_MS."""
    pair = ha_pair("ASYNC_MASTER", with_slave=False)
    pair.start_slave(tmp_path, namesrv, f"slaveSynchronizeInterval={SYNC_INTERVAL_MS}\n")
    return pair


def get_all(remoting, addr: str, code: int) -> dict:
    resp = remoting.invoke(addr, RemotingCommand.request(code), 5.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return fastjson_loads(resp.body)


def create_group(remoting, addr: str, group: str, retry_max_times: int) -> None:
    body = json.dumps({"groupName": group, "consumeEnable": False, "retryMaxTimes": retry_max_times}).encode()
    resp = remoting.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body),
                           5.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_a_topic_created_only_on_the_master_appears_on_the_slave(synced_pair, api, namesrv):
    pair = synced_pair
    topic = unique("HaMeta")
    api.create_topic(pair.master.addr, topic, 3, 2)

    def on_slave():
        return api.get_all_topic_config(pair.slave.addr).topic_config_table.get(topic)

    tc = wait_until(on_slave, SYNC_TIMEOUT_S, "the master's topic to appear on the slave")
    assert (tc.read_queue_nums, tc.write_queue_nums) == (3, 2)
    # persisted by the slave, in its own config directory
    saved = json.loads((pair.slave.store / "config" / "topics.json").read_text())
    assert topic in saved["topicConfigTable"]


def test_a_consumer_offset_committed_on_the_master_appears_on_the_slave(synced_pair, api):
    pair = synced_pair
    topic, group = unique("HaMeta"), unique("g")
    api.create_topic(pair.master.addr, topic, 2, 2)
    api.update_consumer_offset(pair.master.addr, group, topic, 1, 42)
    wait_until(lambda: api.query_consumer_offset(pair.slave.addr, group, topic, 1, zero_if_not_found=False) == 42,
               SYNC_TIMEOUT_S, "the master's committed offset on the slave")
    api.update_consumer_offset(pair.master.addr, group, topic, 1, 57)  # later commits follow too
    wait_until(lambda: api.query_consumer_offset(pair.slave.addr, group, topic, 1, zero_if_not_found=False) == 57,
               SYNC_TIMEOUT_S, "the master's next committed offset on the slave")


def test_a_subscription_group_created_on_the_master_appears_on_the_slave(synced_pair, remoting):
    pair = synced_pair
    group = unique("g")
    create_group(remoting, pair.master.addr, group, 3)

    def on_slave():
        return get_all(remoting, pair.slave.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)[
            "subscriptionGroupTable"].get(group)

    config = wait_until(on_slave, SYNC_TIMEOUT_S, "the master's subscription group on the slave")
    assert (config["groupName"], config["consumeEnable"], config["retryMaxTimes"]) == (group, False, 3)
    saved = json.loads((pair.slave.store / "config" / "subscriptionGroup.json").read_text())
    assert saved["subscriptionGroupTable"][group]["retryMaxTimes"] == 3


def test_a_redelivery_pending_on_the_master_is_held_by_the_slave(synced_pair, api, remoting):
    pair = synced_pair
    topic, group = unique("HaMeta"), unique("g")
    api.create_topic(pair.master.addr, topic, 1, 1)
    sent = api.send_batch(pair.master.addr, MessageBatch.of(topic, 0, [b"later"], [b""]), "ha_producer")
    assert sent.status == SendStatus.SEND_OK
    _, offset = parse_offset_msg_id(sent.offset_msg_ids[0])
    back = ConsumerSendMsgBackRequestHeader(offset=offset, group=group, delay_level=18, origin_topic=topic)  # 2 h
    resp = remoting.invoke(pair.master.addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                                                     back.to_ext_fields()), 5.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    def on_slave():
        path = pair.slave.store / "config" / "delayOffset.json"
        return (path.exists() and json.loads(path.read_text())["pendingRetries"]) or None

    [entry] = wait_until(on_slave, SYNC_TIMEOUT_S, "the master's pending redelivery in the slave's delayOffset.json")
    assert (entry["physOffset"], entry["topic"], entry["retryTopic"]) == (offset, f"%RETRY%{group}", topic)


def test_a_slave_keeps_what_it_took_when_its_master_goes_away(synced_pair, api):
    pair = synced_pair
    topic, group = unique("HaMeta"), unique("g")
    api.create_topic(pair.master.addr, topic, 2, 2)
    api.update_consumer_offset(pair.master.addr, group, topic, 0, 9)
    wait_until(lambda: api.query_consumer_offset(pair.slave.addr, group, topic, 0, zero_if_not_found=False) == 9
               and topic in api.get_all_topic_config(pair.slave.addr).topic_config_table,
               SYNC_TIMEOUT_S, "the master's topic and offset on the slave")
    pair.master.stop()
    wait_until(lambda: "slave sync: master" in pair.slave.log() and "unreachable" in pair.slave.log(),
               SYNC_TIMEOUT_S, "a sync round against the stopped master")
    assert topic in api.get_all_topic_config(pair.slave.addr).topic_config_table
    assert api.query_consumer_offset(pair.slave.addr, group, topic, 0, zero_if_not_found=False) == 9
    assert "Traceback" not in pair.slave.log()


def test_the_masters_get_all_answers_are_rocketmqs_bodies(ha_pair, api, remoting):
    pair = ha_pair("ASYNC_MASTER", with_slave=False)
    addr = pair.master.addr
    topic, group = unique("HaMeta"), unique("g")
    api.create_topic(addr, topic, 2, 2)
    api.update_consumer_offset(addr, group, topic, 0, 7)
    create_group(remoting, addr, group, 5)

    topics = get_all(remoting, addr, RequestCode.GET_ALL_TOPIC_CONFIG)  # TopicConfigSerializeWrapper
    assert topics["topicConfigTable"][topic]["writeQueueNums"] == 2
    assert set(topics["dataVersion"]) >= {"timestamp", "counter"}

    groups = get_all(remoting, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)  # SubscriptionGroupWrapper
    assert set(groups["dataVersion"]) >= {"timestamp", "counter"}
    assert groups["subscriptionGroupTable"][group] == {
        "groupName": group, "consumeEnable": False, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
        "retryQueueNums": 1, "retryMaxTimes": 5, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True, "consumeMessageOrderly": False,
    }

    resp = remoting.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), 5.0)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert f'"{topic}@{group}":{{0:7}}' in resp.body.decode()  # ConsumerOffsetSerializeWrapper, fastjson's int keys
    assert fastjson_loads(resp.body)["offsetTable"][f"{topic}@{group}"] == {"0": 7}

    delay = get_all(remoting, addr, RequestCode.GET_ALL_DELAY_OFFSET)  # DelayOffsetSerializeWrapper
    assert delay["offsetTable"] == {}
