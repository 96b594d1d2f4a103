"""NamesrvProcessor handlers called directly: typed header errors and the route bytes we write."""

from __future__ import annotations

import asyncio

import pytest

from spark_mq.common.config import NamesrvConfig
from spark_mq.common.errors import HeaderError
from spark_mq.namesrv.kv_config import KVConfigManager
from spark_mq.namesrv.processor import NamesrvProcessor
from spark_mq.namesrv.route_info import RouteInfoManager
from spark_mq.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

HEADER = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "C", "haServerAddr": "", "brokerId": 0}
BODY = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4, 6, topic_sys_flag=3)},
                                                      DataVersion(1, 1))).to_json()


def processor() -> NamesrvProcessor:
    return NamesrvProcessor(RouteInfoManager(lambda: 0.0), KVConfigManager(None), NamesrvConfig())


def register(proc: NamesrvProcessor, **fields: object) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, {**HEADER, **fields}, BODY)
    return asyncio.run(proc.register_broker(cmd, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("crc", ["abc", "12x", "", "99999999999"])
def test_register_broker_rejects_a_body_crc32_that_is_not_an_int32(crc):
    with pytest.raises(HeaderError, match=r"RegisterBrokerRequestHeader \(REGISTER_BROKER\): field 'bodyCrc32'") as e:
        register(processor(), bodyCrc32=crc)
    assert e.value.field == "bodyCrc32"


def test_register_broker_checks_a_numeric_body_crc32():
    proc = processor()
    assert register(proc, bodyCrc32=12345).remark == "crc32 not match"
    assert proc.routes.pickup_topic_route("T") is None
    assert register(proc, bodyCrc32="0").code == ResponseCode.SUCCESS  # 0: not checked


def test_route_has_quoted_broker_ids_and_both_flag_names():
    proc = processor()
    register(proc)
    cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    resp = asyncio.run(proc.get_route_info(cmd, None))  # type: ignore[arg-type]
    assert resp.body == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"b","cluster":"C"}],'
        b'"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"topicSynFlag":3,'
        b'"topicSysFlag":3,"writeQueueNums":4}]}'
    )
