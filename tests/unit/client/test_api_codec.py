"""MQClientAPI on the wire: RocketMQ's request codes and extFields, typed results and errors.

Broker requests go to a real RemotingServer on loopback that records every request and answers
with canned responses; NameServer requests go to a real NameServer started in-process.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest

from spark_mq.client import MQClientAPI, PullStatus, SendStatus, SyncMQClientAPI
from spark_mq.client.ids import uniq_keys
from spark_mq.common.config import NamesrvConfig
from spark_mq.common.errors import MQClientError, RemotingConnectError
from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.message_id import offset_msg_id
from spark_mq.common.properties import encode_properties
from spark_mq.common.unit.encode import encode_batch
from spark_mq.namesrv.controller import NamesrvController
from spark_mq.remoting.bodies import (
    ConsumerData,
    DataVersion,
    HeartbeatData,
    MessageQueue,
    OffsetWrapper,
    ProducerData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicOffset,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import (
    PullMessageRequestHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    build_pull_sys_flag,
)
from spark_mq.remoting.loop import LoopThread
from spark_mq.remoting.message_batch_codec import decode_batch_body
from spark_mq.remoting.server import RemotingServer

STORE_HOST = pack_host("127.0.0.1", 10911)
Reply = Callable[[RemotingCommand], RemotingCommand]


# --- a recording broker on loopback ---------------------------------------------------------


def ok(ext: dict | None = None, body: bytes = b"", code: int = ResponseCode.SUCCESS, remark: str | None = None):
    return lambda cmd: cmd.make_response(code, remark, ext, body)


def units(topic: str = "T", queue_id: int = 1, bodies=(b"a", b"bb"), queue_offset: int = 7) -> bytes:
    props = [encode_properties({"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"}) for i in range(len(bodies))]
    batch = MessageBatch.of(topic, queue_id, list(bodies), props, born_timestamp=1_700_000_000_000)
    return encode_batch(batch, 1000, queue_offset, 1_700_000_000_123, STORE_HOST).data


PULL_HEADER = {"suggestWhichBrokerId": "0", "nextBeginOffset": "9", "minOffset": "0", "maxOffset": "9"}
DEFAULT_REPLIES: dict[int, Reply] = {
    RequestCode.SEND_MESSAGE: ok({"msgId": "OFFSETID", "queueId": "3", "queueOffset": "41"}),
    RequestCode.SEND_MESSAGE_V2: ok({"msgId": "OFFSETID", "queueId": "3", "queueOffset": "41"}),
    RequestCode.SEND_BATCH_MESSAGE: ok({"msgId": "ID1,ID2", "queueId": "2", "queueOffset": "100"}),
    RequestCode.PULL_MESSAGE: ok(PULL_HEADER, units()),
    RequestCode.QUERY_CONSUMER_OFFSET: ok({"offset": "12"}),
    RequestCode.GET_MAX_OFFSET: ok({"offset": "99"}),
    RequestCode.GET_MIN_OFFSET: ok({"offset": "5"}),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: ok({"offset": "17"}),
    RequestCode.GET_EARLIEST_MSG_STORETIME: ok({"timestamp": "1700000000123"}),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: ok(body=b'{"consumerIdList":["10.0.0.1@1","10.0.0.2@2"]}'),
    RequestCode.QUERY_MESSAGE: ok({"indexLastUpdateTimestamp": "1", "indexLastUpdatePhyoffset": "2"}, units()),
    RequestCode.VIEW_MESSAGE_BY_ID: ok(body=units(bodies=(b"viewed",))),
    RequestCode.GET_BROKER_RUNTIME_INFO: ok(body=b'{"table":{"brokerVersion":"407","msgPutTotalTodayNow":"5"}}'),
    RequestCode.GET_TOPIC_STATS_INFO: ok(
        body=b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"lastUpdateTimestamp":9,"maxOffset":5,"minOffset":1}}}'),
    RequestCode.GET_CONSUME_STATS: ok(
        body=b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":8}}}'),
    RequestCode.LOCK_BATCH_MQ: ok(body=b'{"lockOKMQSet":[{"brokerName":"b","queueId":0,"topic":"T"}]}'),
}


class RecordingBroker:
    """Answers every RequestCode: a per-test reply if set, else a canned success; records requests."""

    def __init__(self, thread: LoopThread) -> None:
        self.thread = thread
        self.server = RemotingServer("127.0.0.1", 0, name="recording-broker")
        self.requests: list[RemotingCommand] = []
        self.replies: dict[int, Reply] = {}
        self.conns: list = []
        for code in RequestCode:
            self.server.register(code, self._serve)
        self.addr = f"127.0.0.1:{thread.run(self.server.start())}"

    async def _serve(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        self.requests.append(cmd)
        self.conns.append(conn)
        reply = self.replies.get(cmd.code) or DEFAULT_REPLIES.get(cmd.code) or ok()
        return reply(cmd)

    @property
    def last(self) -> RemotingCommand:
        return self.requests[-1]


@pytest.fixture(scope="module")
def loop_thread():
    thread = LoopThread("test-servers")
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def recording_broker(loop_thread):
    broker = RecordingBroker(loop_thread)
    yield broker
    loop_thread.run(broker.server.stop())


@pytest.fixture
def broker(recording_broker):
    recording_broker.replies.clear()
    recording_broker.requests.clear()
    recording_broker.conns.clear()
    return recording_broker


@pytest.fixture(scope="module")
def namesrv(loop_thread):
    async def start():
        controller = NamesrvController(NamesrvConfig(listen_port=0))
        await controller.start()
        return controller

    controller = loop_thread.run(start())
    yield controller.address
    loop_thread.run(controller.stop())


def call(method: str, *args, **kwargs):
    """One request through a fresh async MQClientAPI, as a test would make it."""
    async def main():
        async with MQClientAPI() as api:
            return await getattr(api, method)(*args, **kwargs)

    return asyncio.run(asyncio.wait_for(main(), 20))


# --- request codes and extFields, exactly as RocketMQ's MQClientAPIImpl sends them -------------

SEND_HEADER = SendMessageRequestHeader(
    producer_group="PG", topic="T", default_topic="TBW102", default_topic_queue_nums=4, queue_id=3, sys_flag=0,
    born_timestamp=1_700_000_000_000, flag=0, properties="UNIQ_KEY\x01ABCD\x02WAIT\x01true\x02", reconsume_times=0)
PULL_REQ = PullMessageRequestHeader(
    consumer_group="CG", topic="T", queue_id=1, queue_offset=7, max_msg_nums=32,
    sys_flag=build_pull_sys_flag(commit_offset=True, suspend=True, subscription=True), commit_offset=5,
    suspend_timeout_millis=1000, sub_version=123, subscription="*", expression_type="TAG")
MQS = [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)]

CASES = [
    ("send_message", (SEND_HEADER, b"body"), {}, RequestCode.SEND_MESSAGE,
     {"producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "3",
      "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
      "properties": "UNIQ_KEY\x01ABCD\x02WAIT\x01true\x02", "reconsumeTimes": "0", "unitMode": "false",
      "batch": "false"}),
    ("send_message_v2", (SEND_HEADER, b"body"), {}, RequestCode.SEND_MESSAGE_V2,
     {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
      "i": "UNIQ_KEY\x01ABCD\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false"}),
    ("pull_message", (PULL_REQ,), {}, RequestCode.PULL_MESSAGE,
     {"consumerGroup": "CG", "topic": "T", "queueId": "1", "queueOffset": "7", "maxMsgNums": "32", "sysFlag": "7",
      "commitOffset": "5", "suspendTimeoutMillis": "1000", "subVersion": "123", "subscription": "*",
      "expressionType": "TAG"}),
    ("unregister_client", ("10.0.0.1@1", "PG", "CG"), {}, RequestCode.UNREGISTER_CLIENT,
     {"clientID": "10.0.0.1@1", "producerGroup": "PG", "consumerGroup": "CG"}),
    ("get_consumer_list_by_group", ("CG",), {}, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}),
    ("query_consumer_offset", ("CG", "T", 2), {}, RequestCode.QUERY_CONSUMER_OFFSET,
     {"consumerGroup": "CG", "topic": "T", "queueId": "2"}),
    ("update_consumer_offset", ("CG", "T", 2, 77), {}, RequestCode.UPDATE_CONSUMER_OFFSET,
     {"consumerGroup": "CG", "topic": "T", "queueId": "2", "commitOffset": "77"}),
    ("get_max_offset", ("T", 2), {}, RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "2"}),
    ("get_min_offset", ("T", 2), {}, RequestCode.GET_MIN_OFFSET, {"topic": "T", "queueId": "2"}),
    ("search_offset_by_timestamp", ("T", 2, 1_700_000_000_000), {}, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
     {"topic": "T", "queueId": "2", "timestamp": "1700000000000"}),
    ("get_earliest_msg_storetime", ("T", 2), {}, RequestCode.GET_EARLIEST_MSG_STORETIME,
     {"topic": "T", "queueId": "2"}),
    ("query_message", ("T", "k1", 32, 10, 20), {}, RequestCode.QUERY_MESSAGE,
     {"topic": "T", "key": "k1", "maxNum": "32", "beginTimestamp": "10", "endTimestamp": "20"}),
    ("query_message", ("T", "ABCD", 1, 10, 20), {"unique_key": True}, RequestCode.QUERY_MESSAGE,
     {"topic": "T", "key": "ABCD", "maxNum": "1", "beginTimestamp": "10", "endTimestamp": "20",
      "_UNIQUE_KEY_QUERY": "true"}),
    ("view_message", (4096,), {}, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "4096"}),
    ("get_broker_runtime_info", (), {}, RequestCode.GET_BROKER_RUNTIME_INFO, {}),
    ("get_topic_stats_info", ("T",), {}, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}),
    ("get_consume_stats", ("CG", "T"), {}, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG", "topic": "T"}),
    ("get_consume_stats", ("CG",), {}, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG"}),
    ("create_topic", ("T", 4, 2), {}, RequestCode.UPDATE_AND_CREATE_TOPIC,
     {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "2", "perm": "6",
      "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}),
    ("delete_topic_in_broker", ("T",), {}, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "T"}),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "code", "ext"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_request_code_and_ext_fields(broker, method, args, kwargs, code, ext):
    call(method, broker.addr, *args, **kwargs)
    request = broker.last
    assert (request.code, request.ext_fields) == (code, ext)
    assert not request.is_oneway and request.language == "PYTHON"


def test_bodies_of_heartbeat_and_locks(broker):
    data = HeartbeatData("10.0.0.1@1", [ProducerData("PG")],
                         [ConsumerData("CG", subscription_data_set=[SubscriptionData("T", "a || b", ["a", "b"])])])
    assert call("heartbeat", broker.addr, data) == broker.last.version
    assert (broker.last.code, broker.last.ext_fields) == (RequestCode.HEART_BEAT, {})
    sent = json.loads(broker.last.body)
    assert sent["clientID"] == "10.0.0.1@1" and sent["producerDataSet"] == [{"groupName": "PG"}]
    assert sent["consumerDataSet"][0]["subscriptionDataSet"][0]["subString"] == "a || b"

    assert call("lock_batch_mq", broker.addr, "CG", "10.0.0.1@1", MQS) == [MessageQueue("T", "b", 0)]
    assert (broker.last.code, broker.last.ext_fields) == (RequestCode.LOCK_BATCH_MQ, {})
    assert json.loads(broker.last.body) == {
        "clientId": "10.0.0.1@1", "consumerGroup": "CG",
        "mqSet": [{"brokerName": "b", "queueId": 0, "topic": "T"}, {"brokerName": "b", "queueId": 1, "topic": "T"}]}
    call("unlock_batch_mq", broker.addr, "CG", "10.0.0.1@1", MQS[:1])
    assert broker.last.code == RequestCode.UNLOCK_BATCH_MQ
    assert json.loads(broker.last.body)["mqSet"] == [{"brokerName": "b", "queueId": 0, "topic": "T"}]


def test_oneway_requests_carry_the_oneway_flag(broker):
    async def main():
        async with MQClientAPI() as api:
            await api.update_consumer_offset(broker.addr, "CG", "T", 1, 9, oneway=True)
            await api.unlock_batch_mq(broker.addr, "CG", "c", MQS, oneway=True)
            await api.get_max_offset(broker.addr, "T", 0)  # a round trip: both oneways have arrived

    asyncio.run(main())
    offsets, unlock, _ = broker.requests
    assert offsets.is_oneway and offsets.code == RequestCode.UPDATE_CONSUMER_OFFSET
    assert offsets.ext_fields["commitOffset"] == "9"
    assert unlock.is_oneway and unlock.code == RequestCode.UNLOCK_BATCH_MQ


# --- typed results ----------------------------------------------------------------------------


def test_send_results_and_statuses(broker):
    result = call("send_message", broker.addr, SEND_HEADER, b"x")
    assert (result.status, result.msg_id, result.offset_msg_id, result.topic) == (
        SendStatus.SEND_OK, "ABCD", "OFFSETID", "T")
    assert (result.queue_id, result.queue_offset, result.transaction_id) == (3, 41, None)
    broker.replies[RequestCode.SEND_MESSAGE_V2] = ok(
        {"msgId": "OFFSETID", "queueId": "3", "queueOffset": "42", "MSG_REGION": "r1"},
        code=ResponseCode.FLUSH_DISK_TIMEOUT)
    result = call("send_message_v2", broker.addr, SEND_HEADER.to_v2(), b"x")
    assert (result.status, result.queue_offset, result.region_id) == (SendStatus.FLUSH_DISK_TIMEOUT, 42, "r1")
    for code, status in [(ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
                         (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE)]:
        broker.replies[RequestCode.SEND_MESSAGE] = ok({"msgId": "O", "queueId": "0", "queueOffset": "0"}, code=code)
        assert call("send_message", broker.addr, SEND_HEADER, b"x").status is status


def test_send_batch_encodes_the_batch_body_and_joins_uniq_keys(broker):
    keys = [k.decode() for k in uniq_keys(3).tolist()]
    messages = [Message("T", f"m{i}".encode(), tags="tg", keys=[f"k{i}"]) for i in range(3)]
    batch = MessageBatch.from_messages(messages, queue_id=2, uniq_keys=keys)
    result = call("send_batch", broker.addr, batch, "PG", broker_name="broker-a")
    request = broker.last
    assert request.code == RequestCode.SEND_BATCH_MESSAGE
    assert request.ext_fields == {
        "a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": str(int(batch.born_timestamps[0])),
        "h": "0", "i": "WAIT\x01true\x02", "j": "0", "k": "false", "m": "true", "n": "broker-a"}
    decoded = decode_batch_body(request.body, "T", 2, 0)
    assert decoded.bodies == [b"m0", b"m1", b"m2"] and decoded.properties == batch.properties
    assert result.msg_id == ",".join(keys) and result.msg_ids == keys
    assert result.offset_msg_ids == ["ID1", "ID2"] and result.broker_name == "broker-a"
    assert (result.queue_id, result.queue_offset) == (2, 100)
    no_keys = MessageBatch.of("T", 0, [b"x"])
    assert call("send_batch", broker.addr, no_keys, "PG").msg_id is None


@pytest.mark.parametrize(("code", "status"), [
    (ResponseCode.SUCCESS, PullStatus.FOUND), (ResponseCode.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
    (ResponseCode.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
    (ResponseCode.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL)])
def test_pull_statuses_are_values(broker, code, status):
    broker.replies[RequestCode.PULL_MESSAGE] = ok(PULL_HEADER, units() if code == ResponseCode.SUCCESS else b"",
                                                  code=code)
    result = call("pull_message", broker.addr, PULL_REQ)
    assert result.status is status
    assert (result.next_begin_offset, result.min_offset, result.max_offset, result.suggest_which_broker_id) == (
        9, 0, 9, 0)
    if status is PullStatus.FOUND:
        assert result.body == units() and list(result.unit_starts(check_crc=True)) == [0, len(units()) // 2]
        messages = result.messages(check_crc=True)
        assert [(m.topic, m.queue_id, m.queue_offset, m.body, m.keys) for m in messages] == [
            ("T", 1, 7, b"a", ["k0"]), ("T", 1, 8, b"bb", ["k1"])]
    else:
        assert result.body == b"" and result.messages() == []


def test_pull_waits_past_the_suspend_time(broker):
    async def held(cmd, conn):
        await asyncio.sleep(0.4)
        return cmd.make_response(ResponseCode.PULL_NOT_FOUND, None, PULL_HEADER)

    broker.server.register(RequestCode.PULL_MESSAGE, held)
    try:
        async def main():
            async with MQClientAPI(timeout=0.2) as api:  # less than the hold: the suspend time must be added
                return await api.pull_message(broker.addr, PULL_REQ)

        assert asyncio.run(main()).status is PullStatus.NO_NEW_MSG
    finally:
        broker.server.register(RequestCode.PULL_MESSAGE, broker._serve)


def test_lookups_decode_typed_values(broker):
    a = broker.addr
    assert call("get_consumer_list_by_group", a, "CG") == ["10.0.0.1@1", "10.0.0.2@2"]
    assert call("query_consumer_offset", a, "CG", "T", 0) == 12
    assert (call("get_max_offset", a, "T", 0), call("get_min_offset", a, "T", 0)) == (99, 5)
    assert call("search_offset_by_timestamp", a, "T", 0, 1) == 17
    assert call("get_earliest_msg_storetime", a, "T", 0) == 1_700_000_000_123
    assert [m.body for m in call("query_message", a, "T", "k", 32, 0, 1)] == [b"a", b"bb"]
    assert call("view_message", a, 1000).body == b"viewed"
    assert call("get_broker_runtime_info", a) == {"brokerVersion": "407", "msgPutTotalTodayNow": "5"}
    stats = call("get_topic_stats_info", a, "T")
    assert stats.offset_table == {MessageQueue("T", "b", 0): TopicOffset(1, 5, 9)}
    consume = call("get_consume_stats", a, "CG", "T")
    assert consume.offset_table == {MessageQueue("T", "b", 1): OffsetWrapper(10, 4, 8)} and consume.consume_tps == 1.5


def test_query_not_found_is_none_or_empty(broker):
    for code in (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                 RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
                 RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID):
        broker.replies[code] = ok(code=ResponseCode.QUERY_NOT_FOUND, remark="not found")
    a = broker.addr
    assert call("query_consumer_offset", a, "CG", "T", 0) is None
    assert call("get_max_offset", a, "T", 0) is None and call("get_min_offset", a, "T", 0) is None
    assert call("search_offset_by_timestamp", a, "T", 0, 1) is None
    assert call("get_earliest_msg_storetime", a, "T", 0) is None
    assert call("query_message", a, "T", "k", 32, 0, 1) == []
    assert call("view_message", a, 1000) is None


def test_view_message_by_id_decodes_the_offset_msg_id(broker):
    port = int(broker.addr.rsplit(":", 1)[1])
    msg_id = offset_msg_id(pack_host("127.0.0.1", port), 123_456_789_012)
    assert call("view_message_by_id", None, msg_id).body == b"viewed"  # address from the id itself
    assert broker.last.ext_fields == {"offset": "123456789012"}
    other = offset_msg_id(pack_host("10.9.9.9", 1), 5)
    assert call("view_message_by_id", broker.addr, other).body == b"viewed"  # an explicit address wins
    assert broker.last.ext_fields == {"offset": "5"}


def test_errors_name_request_address_code_remark_and_hint(broker):
    broker.replies[RequestCode.PULL_MESSAGE] = ok(code=ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                                  remark="the consumer's subscription not exist")
    with pytest.raises(MQClientError) as info:
        call("pull_message", broker.addr, PULL_REQ)
    err = info.value
    assert (err.code, err.addr, err.request) == (ResponseCode.SUBSCRIPTION_NOT_EXIST, broker.addr, "PULL_MESSAGE")
    text = str(err)
    for part in ("PULL_MESSAGE", broker.addr, "SUBSCRIPTION_NOT_EXIST (24)", "subscription not exist", "HEART_BEAT"):
        assert part in text
    broker.replies[RequestCode.GET_MAX_OFFSET] = ok(code=4242, remark="odd")
    with pytest.raises(MQClientError, match=r"GET_MAX_OFFSET to .* failed: code 4242 \(4242\): odd"):
        call("get_max_offset", broker.addr, "T", 0)
    broker.replies[RequestCode.SEND_MESSAGE] = ok(code=ResponseCode.SYSTEM_BUSY, remark="[PCBUSY] too many")
    with pytest.raises(MQClientError, match=r"SYSTEM_BUSY.*retry after"):
        call("send_message", broker.addr, SEND_HEADER, b"x")


def test_connection_refused_is_a_remoting_error():
    with pytest.raises(RemotingConnectError, match="cannot connect"):
        call("get_max_offset", "127.0.0.1:1", "T", 0)


def test_notify_consumer_ids_changed_reaches_callbacks(broker, loop_thread):
    async def main():
        async with MQClientAPI() as api:
            seen: list[tuple[str, str]] = []
            woke = asyncio.Event()

            @api.on_consumer_ids_changed
            def plain(group, addr):
                seen.append((group, addr))

            async def wake(group, addr):
                woke.set()

            api.on_consumer_ids_changed(wake)
            await api.heartbeat(broker.addr, HeartbeatData("c1"))  # opens the connection the broker will use
            conn = broker.conns[-1]
            note = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"})
            loop_thread.loop.call_soon_threadsafe(conn.send_oneway, note)
            await asyncio.wait_for(woke.wait(), 5)
            return seen

    assert asyncio.run(main()) == [("CG", f"127.0.0.1:{int(broker.addr.rsplit(':', 1)[1])}")]


# --- the NameServer, in-process -----------------------------------------------------------------


def broker_registration(name="broker-a", addr="127.0.0.1:10911", topics=("TopicA",)):
    header = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr, cluster_name="C1",
                                         ha_server_addr="127.0.0.1:10912", broker_id=0)
    table = {t: TopicConfig(t, 4, 4) for t in topics}
    return header, RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(int(time.time() * 1000), 1)))


@pytest.mark.parametrize("compressed", [False, True])
def test_namesrv_routes_round_trip(namesrv, compressed):
    async def main():
        async with MQClientAPI() as api:
            header, body = broker_registration(topics=("TopicA", f"TopicZ{compressed}"))
            result = await api.register_broker(namesrv, header, body, compressed=compressed)
            route = await api.get_route_info(namesrv, "TopicA")
            missing = await api.get_route_info(namesrv, "NoSuchTopic")
            cluster = await api.get_cluster_info(namesrv)
            topics = await api.get_all_topic_list(namesrv)
            by_cluster = await api.get_topics_by_cluster(namesrv, "C1")
            await api.delete_topic_in_namesrv(namesrv, f"TopicZ{compressed}")
            after = await api.get_route_info(namesrv, f"TopicZ{compressed}")
            return result, route, missing, cluster, topics, by_cluster, after

    result, route, missing, cluster, topics, by_cluster, after = asyncio.run(main())
    assert (result.master_addr, result.kv_table) == (None, {})
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 4, 6)]
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("C1", "broker-a", {0: "127.0.0.1:10911"})]
    assert missing is None and after is None
    assert cluster.cluster_addr_table == {"C1": ["broker-a"]}
    assert cluster.broker_addr_table["broker-a"].broker_addrs == {0: "127.0.0.1:10911"}
    assert {"TopicA", f"TopicZ{compressed}"} <= set(topics.topic_list)
    assert {"TopicA", f"TopicZ{compressed}"} <= set(by_cluster.topic_list)


def test_namesrv_unregister_broker_drops_its_routes(namesrv):
    with SyncMQClientAPI() as api:
        header, body = broker_registration("broker-u", "127.0.0.1:20911", ("TopicU",))
        api.register_broker(namesrv, header, body)
        assert api.get_route_info(namesrv, "TopicU") is not None
        api.unregister_broker(namesrv, "C1", "127.0.0.1:20911", "broker-u", 0)
        assert api.get_route_info(namesrv, "TopicU") is None
        assert "broker-u" not in api.get_cluster_info(namesrv).broker_addr_table


def test_namesrv_kv_config_round_trip(namesrv):
    with SyncMQClientAPI() as api:
        assert api.get_kv_config(namesrv, "NS", "k") is None
        assert api.get_kv_list_by_namespace(namesrv, "NS") is None
        api.put_kv_config(namesrv, "NS", "k", "v1")
        api.put_kv_config(namesrv, "NS", "k2", "v2")
        assert api.get_kv_config(namesrv, "NS", "k") == "v1"
        assert api.get_kv_list_by_namespace(namesrv, "NS") == {"k": "v1", "k2": "v2"}
        api.delete_kv_config(namesrv, "NS", "k")
        assert api.get_kv_config(namesrv, "NS", "k") is None


def test_broker_request_to_a_namesrv_says_so(namesrv):
    with SyncMQClientAPI() as api, pytest.raises(MQClientError, match=r"REQUEST_CODE_NOT_SUPPORTED.*not a NameServer"):
        api.get_max_offset(namesrv, "T", 0)


# --- the blocking facade --------------------------------------------------------------------


def test_sync_facade_from_threads(broker):
    from concurrent.futures import ThreadPoolExecutor

    with SyncMQClientAPI() as api:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda q: api.get_max_offset(broker.addr, "T", q), range(32)))
        assert results == [99] * 32
        assert api.pull_message(broker.addr, PULL_REQ).status is PullStatus.FOUND
        with pytest.raises(MQClientError):
            broker.replies[RequestCode.GET_MIN_OFFSET] = ok(code=ResponseCode.SYSTEM_ERROR, remark="boom")
            api.get_min_offset(broker.addr, "T", 0)
    api.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        api.get_max_offset(broker.addr, "T", 0)
