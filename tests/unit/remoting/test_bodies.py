"""JSON bodies: fastjson's exact output, its quirks, the C++ client's forms, round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.common.errors import BodyError
from spark_mq.remoting import bodies as b
from spark_mq.remoting.fastjson import ObjectKey, dumps, loads

# A GET_ROUTEINFO_BY_TOPIC body as a 4.x NameServer sent it (apache/rocketmq issue #1445, whitespace removed)
JAVA_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"172.168.0.104:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":0,'
    b'"writeQueueNums":4}]}'
)
# GET_BROKER_CLUSTER_INFO as a NameServer sent it (apache/rocketmq issue #3369)
JAVA_CLUSTER = (
    b'{"brokerAddrTable":{"broker_37_master":{"brokerAddrs":{0:"172.16.16.37:10911"},"brokerName":"broker_37_master",'
    b'"cluster":"37_cluster"}},"clusterAddrTable":{"37_cluster":["broker_37_master"]}}'
)
# GET_TOPIC_STATS_INFO as a broker sent it (apache/rocketmq issue #3389, two of its entries)
JAVA_TOPIC_STATS = (
    b'{"offsetTable":{{"brokerName":"rocketmq-broker-a","queueId":2,"topic":"test"}:{"lastUpdateTimestamp":0,'
    b'"maxOffset":0,"minOffset":0},{"brokerName":"rocketmq-broker-a","queueId":3,"topic":"test"}:'
    b'{"lastUpdateTimestamp":1700000000000,"maxOffset":12,"minOffset":3}}}'
)
# HEART_BEAT from C++ client 1.0.1/2.0 (HeartbeatData.h: jsoncpp FastWriter, enum ordinals, subVersion as a string)
CPP_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"cg",'
    b'"messageModel":1,"subscriptionDataSet":[{"codeSet":[97,98],"subString":"a || b","subVersion":"1700000000000",'
    b'"tagsSet":["a","b"],"topic":"t"}]}],"producerDataSet":[{"groupName":"pg"}]}\n'
)
# HEART_BEAT from a Java client (fastjson: enum names, sorted properties)
JAVA_HEARTBEAT = (
    b'{"clientID":"10.0.0.6@99","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
    b'"consumeType":"CONSUME_ACTIVELY","groupName":"cg","messageModel":"BROADCASTING","subscriptionDataSet":'
    b'[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000001,'
    b'"tagsSet":[],"topic":"t"}],"unitMode":false}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)


def test_route_from_java_namesrv_decodes_and_is_reproduced_byte_for_byte():
    route = b.TopicRouteData.from_json(JAVA_ROUTE)
    assert route.broker_datas == [b.BrokerData("DefaultCluster", "broker-a", {0: "172.168.0.104:10911"})]
    assert route.queue_datas == [b.QueueData("broker-a", 4, 4, 6, 0)]
    assert route.order_topic_conf is None
    assert route.to_json() == JAVA_ROUTE


def test_route_standard_form_quotes_keys_and_reads_back():
    route = b.TopicRouteData.from_json(JAVA_ROUTE)
    std = route.to_json(standard=True)
    assert b'"brokerAddrs":{"0":"172.168.0.104:10911"}' in std
    json.loads(std)  # valid JSON
    assert b.TopicRouteData.from_json(std) == route


def test_route_as_cpp_test_builds_it_and_4_9_sys_flag_name():
    cpp = (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10091","1":"127.0.0.2:10092"},"brokerName":"b"}],'
        b'"orderTopicConf":"","queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSysFlag":3,'
        b'"writeQueueNums":8}]}'
    )
    route = b.TopicRouteData.from_json(cpp)
    assert route.broker_datas[0].broker_addrs == {0: "127.0.0.1:10091", 1: "127.0.0.2:10092"}
    assert route.broker_datas[0].cluster == ""
    assert route.queue_datas[0].topic_syn_flag == 3


def test_cluster_info_from_java():
    info = b.ClusterInfo.from_json(JAVA_CLUSTER)
    assert info.broker_addr_table["broker_37_master"].broker_addrs == {0: "172.16.16.37:10911"}
    assert info.cluster_addr_table == {"37_cluster": ["broker_37_master"]}
    assert info.to_json() == JAVA_CLUSTER


def test_topic_stats_with_object_keys():
    stats = b.TopicStatsTable.from_json(JAVA_TOPIC_STATS)
    mq = b.MessageQueue("test", "rocketmq-broker-a", 3)
    assert stats.offset_table[mq] == b.TopicOffset(3, 12, 1700000000000)
    assert len(stats.offset_table) == 2
    assert stats.to_json() == JAVA_TOPIC_STATS
    assert b.TopicStatsTable.from_json(stats.to_json(standard=True)) == stats


def test_consume_stats_form():
    stats = b.ConsumeStats({b.MessageQueue("t", "b", 0): b.OffsetWrapper(10, 7, 1700000000000)}, 2.5)
    assert stats.to_json() == (
        b'{"consumeTps":2.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:'
        b'{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000}}}'
    )
    assert b.ConsumeStats.from_json(stats.to_json()) == stats
    assert b.ConsumeStats.from_json(b'{"offsetTable":{},"consumeTps":0}').consume_tps == 0.0


def test_reset_offset_body_as_java_and_as_the_cpp_client_read_it():
    body = b.ResetOffsetBody({b.MessageQueue("t", "b", 1): 5, b.MessageQueue("t", "b", 0): 0})
    assert body.to_json() == (b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:5,'
                              b'{"brokerName":"b","queueId":0,"topic":"t"}:0}}')
    assert b.ResetOffsetBody.from_json(body.to_json()) == body
    assert b.ResetOffsetBody.from_json(body.to_json(standard=True)) == body
    # RocketMQ's ResetOffsetBodyForC: a list, as jsoncpp cannot read object keys
    assert body.to_json_for_cpp() == (b'{"offsetTable":[{"brokerName":"b","offset":0,"queueId":0,"topic":"t"},'
                                      b'{"brokerName":"b","offset":5,"queueId":1,"topic":"t"}]}')


def test_cpp_heartbeat():
    hb = b.HeartbeatData.from_json(CPP_HEARTBEAT)
    assert hb.client_id == "10.0.0.5@4242"
    assert hb.producer_data_set == [b.ProducerData("pg")]
    (cd,) = hb.consumer_data_set
    assert (cd.consume_type, cd.message_model, cd.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    (sub,) = cd.subscription_data_set
    assert (sub.topic, sub.sub_string, sub.tags_set, sub.code_set) == ("t", "a || b", ["a", "b"], [97, 98])
    assert sub.sub_version == 1700000000000 and sub.expression_type == "TAG" and not sub.class_filter_mode


def test_cpp_producer_only_heartbeat_has_no_consumer_set():
    hb = b.HeartbeatData.from_json(b'{"clientID":"x@1","producerDataSet":[{"groupName":"pg"}]}\n')
    assert hb.consumer_data_set == []


def test_java_heartbeat_round_trips_byte_for_byte():
    hb = b.HeartbeatData.from_json(JAVA_HEARTBEAT)
    assert hb.consumer_data_set[0].consume_type == "CONSUME_ACTIVELY"
    assert hb.to_json() == JAVA_HEARTBEAT


def test_lock_batch_bodies():
    cpp_request = b'{"clientId":"c@1","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":1,"topic":"t"}]}\n'
    req = b.LockBatchRequestBody.from_json(cpp_request)
    assert req.mq_set == [b.MessageQueue("t", "b", 1)]
    assert b.UnlockBatchRequestBody.from_json(cpp_request).consumer_group == "g"
    resp = b.LockBatchResponseBody([b.MessageQueue("t", "b", 1)])
    assert resp.to_json() == b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"t"}]}'
    assert b.LockBatchResponseBody.from_json(b'{"lockOKMQSet":[]}').lock_ok_mq_set == []


def test_consumer_list_topic_list_kv_table():
    body = b.GetConsumerListByGroupResponseBody(["a@1", "b@2"])
    assert body.to_json() == b'{"consumerIdList":["a@1","b@2"]}'
    assert b.TopicList(["t1"], None).to_json() == b'{"topicList":["t1"]}'
    assert b.TopicList.from_json(b'{"brokerAddr":"1.2.3.4:10911","topicList":["a"]}').broker_addr == "1.2.3.4:10911"
    kv = b.KVTable({"brokerVersion": "399", "msgPutTotalTodayNow": "0"})
    assert kv.to_json() == b'{"table":{"brokerVersion":"399","msgPutTotalTodayNow":"0"}}'
    assert b.BrokerRuntimeInfo.from_json(kv.to_json()) == kv


def test_topic_config_wrapper_and_register_body():
    wrapper = b.TopicConfigSerializeWrapper(
        {"t": b.TopicConfig("t", 4, 4, 6)}, b.DataVersion(timestamp=1700000000000, counter=3)
    )
    assert wrapper.to_json() == (
        b'{"dataVersion":{"counter":3,"timestamp":1700000000000},"topicConfigTable":{"t":{"order":false,"perm":6,'
        b'"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"t","topicSysFlag":0,"writeQueueNums":4}}}'
    )
    body = b.RegisterBrokerBody(wrapper, [])
    assert b.RegisterBrokerBody.from_json(body.to_json()) == body
    packed = body.encode_compressed()
    assert b.RegisterBrokerBody.decode_compressed(packed) == body
    assert b.body_crc32(b"abc") == 0x352441C2 & 0x7FFFFFFF
    with pytest.raises(BodyError):
        b.RegisterBrokerBody.decode_compressed(b"not deflate")
    with pytest.raises(BodyError):
        b.RegisterBrokerBody.decode_compressed(packed[:-3])


HOSTILE = ["g/../../../x", "..", "", "/abs", "a b", "T" * 128]


@pytest.mark.parametrize("name", HOSTILE)
def test_request_bodies_refuse_names_that_break_the_rule(name):
    """Groups and topics of HEART_BEAT, LOCK/UNLOCK_BATCH_MQ and REGISTER_BROKER bodies follow the naming rule."""
    subscribing = b.ConsumerData("g", subscription_data_set=[b.SubscriptionData(name)])
    bodies = [
        (b.HeartbeatData, b.HeartbeatData("c", [b.ProducerData(name)])),
        (b.HeartbeatData, b.HeartbeatData("c", [], [b.ConsumerData(name)])),
        (b.HeartbeatData, b.HeartbeatData("c", [], [subscribing])),
        (b.LockBatchRequestBody, b.LockBatchRequestBody(name, "c", [])),
        (b.LockBatchRequestBody, b.LockBatchRequestBody("g", "c", [b.MessageQueue(name, "broker-a", 0)])),
        (b.UnlockBatchRequestBody, b.UnlockBatchRequestBody("g", "c", [b.MessageQueue("t", name, 0)])),
        (b.RegisterBrokerBody, b.RegisterBrokerBody(b.TopicConfigSerializeWrapper({name: b.TopicConfig(name)}))),
    ]
    for cls, body in bodies:
        with pytest.raises(BodyError, match="naming rule"):
            cls.from_json(body.to_json())
    compressed = b.RegisterBrokerBody(b.TopicConfigSerializeWrapper({name: b.TopicConfig(name)})).encode_compressed()
    if " " not in name and name:  # the compressed layout splits on blanks: those fail as a bad layout
        with pytest.raises(BodyError, match="naming rule"):
            b.RegisterBrokerBody.decode_compressed(compressed)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"[]",
        b'{"clientID":5.5}',
        b'{"clientID":"x","consumerDataSet":[{"groupName":"g","consumeType":7}]}',
        b'{"clientID":"x","consumerDataSet":{}}',
        b'{"clientID":"x","producerDataSet":[{"groupName":null}]}',
        b'{"clientID":"x"} trailing',
        b"\xff\xfe",
        b'{0:{1:{"a":}}}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_malformed_bodies_raise_body_error(data):
    with pytest.raises(BodyError):
        b.HeartbeatData.from_json(data)


def test_route_with_bad_broker_id_key():
    with pytest.raises(BodyError, match="brokerAddrs"):
        b.TopicRouteData.from_json(b'{"brokerDatas":[{"brokerAddrs":{"master":"x"},"brokerName":"b"}]}')


def test_reader_quirks():
    assert loads(b'{0:"a",-1:"b"}') == {0: "a", -1: "b"}
    assert loads(b'{ {"b":1,"a":2} : [1, {3:"x"}] }') == {ObjectKey((("a", 2), ("b", 1))): [1, {3: "x"}]}
    assert loads('{"é":"\\u00e9\\n"}'.encode()) == {"é": "é\n"}
    with pytest.raises(BodyError):
        loads(b'{{"a":{"b":1}}:1}')  # an object key holding an object cannot be hashed


def test_writer_escapes_like_json():
    text = 'q"\\\n\x01é'
    assert json.loads(dumps({"k": text})) == {"k": text}
    assert dumps({"k": text}) == '{"k":"q\\"\\\\\\n\\u0001é"}'.encode()


_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(
    st.lists(
        st.builds(
            b.BrokerData,
            _names,
            _names,
            st.dictionaries(st.integers(0, 10), _names, max_size=3),
        ),
        max_size=3,
    ),
    st.lists(st.builds(b.QueueData, _names, st.integers(0, 64), st.integers(0, 64), st.integers(0, 7)), max_size=3),
    st.booleans(),
)
def test_route_round_trip(broker_datas, queue_datas, standard):
    route = b.TopicRouteData(queue_datas, broker_datas)
    assert b.TopicRouteData.from_json(route.to_json(standard)) == route


@given(
    st.dictionaries(
        st.builds(b.MessageQueue, _names, _names, st.integers(0, 1000)),
        st.builds(b.OffsetWrapper, st.integers(0, 2**62), st.integers(-1, 2**62), st.integers(0, 2**42)),
        max_size=5,
    ),
    st.booleans(),
)
def test_consume_stats_round_trip(table, standard):
    stats = b.ConsumeStats(table, 0.0)
    assert b.ConsumeStats.from_json(stats.to_json(standard)) == stats


@given(st.binary(max_size=200))
def test_fuzzed_bytes_only_raise_body_error(data):
    for cls in (b.HeartbeatData, b.TopicRouteData, b.ConsumeStats, b.LockBatchRequestBody):
        try:
            cls.from_json(data)
        except BodyError:
            pass


@given(st.text(alphabet='{}[]:,"0123 abn-\\', max_size=60))
def test_fuzzed_json_like_text_only_raises_body_error(text):
    for cls in (b.TopicRouteData, b.TopicStatsTable, b.ClusterInfo):
        try:
            cls.from_json(text.encode())
        except BodyError:
            pass


@pytest.mark.parametrize(
    "data",
    [
        b'{"filterServerTable":{"a":5}}',
        b'{"filterServerTable":{"a":{"b":1}}}',
        b'{"queueDatas":[{"brokerName":"b","readQueueNums":"x","writeQueueNums":1,"perm":6}]}',
        b'{"brokerDatas":[{"brokerAddrs":{0:7},"brokerName":"b"}]}',
        b'{"brokerDatas":[{"brokerAddrs":[],"brokerName":"b"}]}',
        b'{"brokerDatas":[{"brokerAddrs":{' + b"1" * 5000 + b':"a"},"brokerName":"b"}]}',
    ],
)
def test_wrongly_typed_route_parts_raise_body_error(data):
    with pytest.raises(BodyError):
        b.TopicRouteData.from_json(data)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
        max_leaves=12,
    )
)
def test_any_json_value_decodes_or_raises_body_error(value):
    # standard JSON of any shape, with RocketMQ property names mixed in
    if isinstance(value, dict):
        value = {**value, "brokerDatas": value.get(""), "offsetTable": value.get(""), "clientID": value.get("")}
    data = json.dumps(value).encode()
    for cls in (b.HeartbeatData, b.TopicRouteData, b.ConsumeStats, b.ClusterInfo, b.TopicConfigSerializeWrapper):
        try:
            cls.from_json(data)
        except BodyError:
            pass
