"""RouteInfoManager against a fake clock: registration rules, eviction, removal cascades."""

from __future__ import annotations

from spark_mq.namesrv.route_info import RouteInfoManager
from spark_mq.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def topics(*names: str, queues: int = 4) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, queues, queues, 6) for n in names}


def test_eviction_after_expiry_only():
    clock = Clock()
    evicted: list[str] = []
    rim = RouteInfoManager(clock, broker_expiry=120, on_evict=lambda addr, conn: evicted.append(addr))
    rim.register_broker("C", "a:1", "ba", 0, "", DataVersion(1, 1), topics("T"))
    rim.register_broker("C", "b:1", "bb", 0, "", DataVersion(1, 1), topics("T", "U"))
    clock.now += 100
    rim.register_broker("C", "b:1", "bb", 0, "", DataVersion(1, 1), topics("T", "U"))  # heartbeat
    clock.now += 20.5
    assert rim.scan_not_active_brokers() == ["a:1"] and evicted == ["a:1"]
    route = rim.pickup_topic_route("T")
    assert [b.broker_name for b in route.broker_datas] == ["bb"]
    assert rim.cluster_table == {"C": {"bb"}}
    clock.now += 120.5
    assert rim.scan_not_active_brokers() == ["b:1"]
    assert rim.pickup_topic_route("T") is None and rim.all_topics() == [] and rim.cluster_table == {}


def test_queue_data_changes_only_with_data_version():
    rim = RouteInfoManager(Clock())
    rim.register_broker("C", "a:1", "ba", 0, "", DataVersion(1, 1), topics("T", queues=4))
    rim.register_broker("C", "a:1", "ba", 0, "", DataVersion(1, 1), topics("T", queues=8))  # same version: ignored
    assert rim.pickup_topic_route("T").queue_datas[0].write_queue_nums == 4
    rim.register_broker("C", "a:1", "ba", 0, "", DataVersion(1, 2), topics("T", queues=8))
    assert rim.pickup_topic_route("T").queue_datas[0].write_queue_nums == 8


def test_slave_topics_ignored_and_address_moves_between_ids():
    rim = RouteInfoManager(Clock())
    rim.register_broker("C", "m:1", "b", 0, "m:2", DataVersion(1, 1), topics("T"))
    res = rim.register_broker("C", "s:1", "b", 1, "", DataVersion(1, 1), topics("SlaveOnly"))
    assert (res.master_addr, res.ha_server_addr) == ("m:1", "m:2")
    assert rim.pickup_topic_route("SlaveOnly") is None
    rim.register_broker("C", "s:1", "b", 0, "", DataVersion(1, 1), None)  # slave promoted
    assert rim.broker_table["b"].broker_addrs == {0: "s:1"}


def test_connection_close_evicts_its_brokers():
    rim = RouteInfoManager(Clock())
    conn = object()
    rim.register_broker("C", "a:1", "ba", 0, "", DataVersion(), topics("T"), conn)
    assert rim.on_connection_closed(object()) == []
    assert rim.on_connection_closed(conn) == ["a:1"] and rim.pickup_topic_route("T") is None


def test_bare_wrapper_and_old_flag_name_are_read():
    body = RegisterBrokerBody.from_json(
        b'{"dataVersion":{"counter":2,"timestamp":9},"topicConfigTable":{"T":{"topicName":"T","readQueueNums":2,'
        b'"writeQueueNums":3,"perm":4,"topicSynFlag":1}}}')
    wrapper = body.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(9, 2)
    assert wrapper.topic_config_table["T"] == TopicConfig("T", 2, 3, 4, topic_sys_flag=1)
