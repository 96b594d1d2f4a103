"""What the broker does not serve yet is refused loudly (issue 17), against a real broker.

Transactional half messages: a prepared send (TRAN_MSG=true property or the PREPARED sysFlag,
single or batch, every send code) is answered NO_PERMISSION and nothing is stored or created;
END_TRANSACTION / CHECK_TRANSACTION_STATE answer REQUEST_CODE_NOT_SUPPORTED naming what is
missing. SQL92 subscriptions: a heartbeat, a pull or a CHECK_CLIENT_CONFIG carrying one is
answered SYSTEM_ERROR as RocketMQ answers with ``enablePropertyFilter`` off (the default; with it on
they are served: test_sql92_filters.py); our consumers surface that answer at ``subscribe``/``start``.
Tag subscriptions work as before.

These tests are to be replaced (not deleted silently) by the message-types issue's tests of the
real features.
"""

from __future__ import annotations

import dataclasses

import pytest
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.pull_consumer import SyncLitePullConsumer
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.errors import ConfigError, MQClientError, SendFailedError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.remoting.bodies import (
    EXPRESSION_SQL92,
    CheckClientRequestBody,
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
)
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import TRANSACTION_PREPARED_TYPE

from ._support import pull_header, send_header
from .test_admin import scrape

NOT_ENABLED = "transactional messages are not enabled on this broker"
SQL92_REMARK = "The broker does not support consumer to filter message by SQL92"
QUEUES = 4


@pytest.fixture
def raw():
    with SyncRemotingClient() as client:
        yield client


def refusals(broker, feature: str) -> float:
    return scrape(broker.metrics_url).get(("spark_mq_unserved_feature_refusals_total", (("feature", feature),)), 0)


def assert_empty(api, broker, topic: str) -> None:
    assert [api.get_max_offset(broker.addr, topic, q) for q in range(QUEUES)] == [0] * QUEUES


def test_prepared_sends_are_refused_on_every_send_code_and_nothing_is_stored(broker, api):
    topic, group = unique("TxRefused"), unique("tx_producer")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    before = refusals(broker, "transaction")

    prepared_prop = send_header(topic, 0, props={"TRAN_MSG": "true", "PGROUP": group}, group=group)
    prepared_flag = dataclasses.replace(send_header(topic, 1, group=group), sys_flag=TRANSACTION_PREPARED_TYPE)
    attempts = [
        lambda: api.send_message(broker.addr, prepared_prop, b"half by property"),
        lambda: api.send_message_v2(broker.addr, prepared_prop, b"half by property, v2"),
        lambda: api.send_message(broker.addr, prepared_flag, b"half by sysFlag"),
        lambda: api.send_message_v2(broker.addr, prepared_flag, b"half by sysFlag, v2"),
    ]
    # a batch with one prepared message among ordinary ones
    props = [encode_properties({"UNIQ_KEY": f"k{i}"}) for i in range(4)]
    props[2] = encode_properties({"UNIQ_KEY": "k2", "TRAN_MSG": "TRUE"})
    batch = MessageBatch.of(topic, 2, [b"a", b"b", b"c", b"d"], props)
    attempts.append(lambda: api.send_batch(broker.addr, batch, group))

    for attempt in attempts:
        with pytest.raises(MQClientError) as e:
            attempt()
        assert e.value.code == ResponseCode.NO_PERMISSION
        assert NOT_ENABLED in e.value.remark and "sending transaction message is forbidden" in e.value.remark
    assert_empty(api, broker, topic)
    assert refusals(broker, "transaction") == before + len(attempts)
    # logged once for the producer group, not once per request
    assert broker.server.log().count(f"from group {group}") == 1

    # ordinary sends (a TRAN_MSG=false property, a batch without it) keep working
    ok = send_header(topic, 0, props={"TRAN_MSG": "false"}, group=group)
    assert api.send_message(broker.addr, ok, b"ordinary").status == SendStatus.SEND_OK
    plain = MessageBatch.of(topic, 3, [b"TRAN_MSG\x01true in a body is not a property"] * 3)
    assert api.send_batch(broker.addr, plain, group).status == SendStatus.SEND_OK
    assert [api.get_max_offset(broker.addr, topic, q) for q in range(QUEUES)] == [1, 0, 0, 3]


def test_prepared_send_to_an_unknown_topic_creates_no_topic(broker, api):
    topic = unique("TxAutoCreate")
    with pytest.raises(MQClientError) as e:
        api.send_message(broker.addr, send_header(topic, -1, props={"TRAN_MSG": "true"}), b"half")
    assert e.value.code == ResponseCode.NO_PERMISSION
    assert topic not in api.get_all_topic_config(broker.addr).topic_config_table


def test_our_producer_with_the_flag_is_refused(namesrv, broker, api):
    topic = unique("TxClient")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what="the topic's route")
    with SyncProducer(unique("tx_client"), ClientConfig(namesrv_addr=namesrv)) as producer:
        with pytest.raises(SendFailedError, match=NOT_ENABLED) as e:
            producer.send(Message(topic, b"half", properties={"TRAN_MSG": "true"}))
        assert isinstance(e.value.__cause__, MQClientError) and e.value.__cause__.code == ResponseCode.NO_PERMISSION
        assert producer.send(Message(topic, b"whole")).status == SendStatus.SEND_OK
    assert sum(api.get_max_offset(broker.addr, topic, q) for q in range(QUEUES)) == 1


@pytest.mark.parametrize("code", [RequestCode.END_TRANSACTION, RequestCode.CHECK_TRANSACTION_STATE])
def test_transaction_requests_name_what_is_missing(broker, raw, code):
    fields = {"producerGroup": "g", "tranStateTableOffset": "0", "commitLogOffset": "0",
              "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "x", "transactionId": "x"}
    resp = raw.invoke(broker.addr, RemotingCommand.request(code, fields))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert NOT_ENABLED in resp.remark and code.name in resp.remark


def sql92_heartbeat(client_id: str, group: str, topic: str) -> HeartbeatData:
    sub = SubscriptionData(topic, "num >= 5 AND num < 10", expression_type=EXPRESSION_SQL92)
    return HeartbeatData(client_id, consumer_data_set=[ConsumerData(group, subscription_data_set=[sub])])


def test_sql92_subscriptions_get_an_error_not_silence(broker, api, raw):
    topic, group = unique("Sql92"), unique("sql92_group")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    for n in range(10):
        api.send_message(broker.addr, send_header(topic, 0, props={"num": str(n)}), b"m%d" % n)
    before = refusals(broker, "sql92")

    # a heartbeat carrying it
    with pytest.raises(MQClientError) as e:
        api.heartbeat(broker.addr, sql92_heartbeat(unique("cid"), group, topic))
    assert e.value.code == ResponseCode.SYSTEM_ERROR and SQL92_REMARK in e.value.remark

    # a pull carrying it in its header
    header = dataclasses.replace(pull_header(group, topic, 0, 0, subscription="num >= 5 AND num < 10"),
                                 expression_type=EXPRESSION_SQL92)
    with pytest.raises(MQClientError) as e:
        api.pull_message(broker.addr, header)
    assert e.value.code == ResponseCode.SYSTEM_ERROR and SQL92_REMARK in e.value.remark

    # a pull without one, by the group whose heartbeat registered SQL92
    with pytest.raises(MQClientError) as e:
        api.pull_message(broker.addr, pull_header(group, topic, 0, 0))
    assert e.value.code == ResponseCode.SYSTEM_ERROR and SQL92_REMARK in e.value.remark

    # CHECK_CLIENT_CONFIG, as a Java consumer sends it before it starts
    body = CheckClientRequestBody(unique("cid"), group,
                                  SubscriptionData(topic, "num > 1", expression_type=EXPRESSION_SQL92)).to_json()
    resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body))
    assert resp.code == ResponseCode.SYSTEM_ERROR and SQL92_REMARK in resp.remark
    tag_body = CheckClientRequestBody(unique("cid"), group, SubscriptionData(topic, "a || b")).to_json()
    resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, tag_body))
    assert resp.code == ResponseCode.SUCCESS
    assert refusals(broker, "sql92") == before + 4


def test_tag_subscriptions_keep_working(broker, api):
    topic, group = unique("TagStill"), unique("tag_group")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    for i, tag in enumerate(["a", "b", "c", "a"]):
        api.send_message(broker.addr, send_header(topic, 0, tags=tag), b"t%d" % i)
    hb = HeartbeatData(unique("cid"), consumer_data_set=[
        ConsumerData(group, subscription_data_set=[SubscriptionData(topic, "a || c")])])
    api.heartbeat(broker.addr, hb)
    result = api.pull_message(broker.addr, pull_header(group, topic, 0, 0, subscription="a || c"))
    assert result.status == PullStatus.FOUND
    assert [m.body for m in result.messages() if m.tags in ("a", "c")] == [b"t0", b"t2", b"t3"]
    # the registered subscription filters a pull that carries none
    registered = api.pull_message(broker.addr, pull_header(group, topic, 0, 0))
    assert registered.status == PullStatus.FOUND
    assert {m.tags for m in registered.messages()} <= {"a", "c"}


def test_our_consumers_surface_the_refusal_at_subscribe(namesrv, broker, api):
    """With enablePropertyFilter off (the default), our consumers' SQL92 subscribe fails with the
    broker's reason (CHECK_CLIENT_CONFIG), and an unknown expression type is refused up front."""
    topic = unique("Sql92Off")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    cfg = ClientConfig(namesrv_addr=namesrv)
    with SyncLitePullConsumer(unique("lite_sql"), cfg) as lite:
        with pytest.raises(MQClientError, match=SQL92_REMARK) as e:
            lite.subscribe(topic, "num >= 5", expression_type=EXPRESSION_SQL92)
        assert e.value.code == ResponseCode.SYSTEM_ERROR
        with pytest.raises(ConfigError, match="expression_type must be"):
            lite.subscribe(topic, "num >= 5", expression_type="SQL")
    push = SyncPushConsumer(unique("push_sql"), cfg)
    try:
        push.subscribe(topic, "num >= 5", expression_type=EXPRESSION_SQL92)
        push.register_listener(lambda msgs: True)
        with pytest.raises(MQClientError, match=SQL92_REMARK):
            push.start()
    finally:
        push.shutdown()
