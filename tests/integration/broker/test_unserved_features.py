"""What the broker does not serve yet is refused loudly (issue 17), against a real broker.

SQL92 subscriptions: a heartbeat, a pull or a CHECK_CLIENT_CONFIG carrying one is answered
SYSTEM_ERROR as RocketMQ answers with ``enablePropertyFilter`` off (the default; with it on they are
served: test_sql92_filters.py); our consumers surface that answer at ``subscribe``/``start``. Tag
subscriptions work as before.

These tests are to be replaced (not deleted silently) by the message-types issue's tests of the
real features; the transaction refusals were, by tests/integration/broker/test_transactions.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.results import PullStatus
from spark_mq.common.errors import ConfigError, MQClientError
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

from ._support import create_routed_topic, mapped, pull_header, send_header
from .test_admin import scrape

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
    assert "libarrow" not in mapped(broker.server.pid)  # the filter engine stays out of a broker with it off


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
    create_routed_topic(broker, topic, QUEUES)  # routed: a subscribe without a route is checked by no broker
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
