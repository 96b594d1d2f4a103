"""``Admin`` / ``SyncAdmin`` against a real NameServer and broker: every method."""

from __future__ import annotations

import time

import pytest
from servers import unique

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.ids import uniq_keys
from spark_mq.client.queue_pull import pull_header
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ClientError, RemotingError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.perm import PERM_READ
from spark_mq.remoting.bodies import SUB_ALL, MessageQueue


@pytest.fixture(scope="module")
def admin(cluster):
    with SyncAdmin(ClientConfig(cluster.namesrv)) as a:
        yield a


@pytest.fixture(scope="module")
def api():
    with SyncMQClientAPI(timeout=5.0) as a:
        yield a


def send(api, broker: str, topic: str, queue_id: int, bodies: list[str], keys: str | None = None,
         tag: str | None = None):
    """Send ``bodies`` to one queue in one batch; returns the SendResult."""
    messages = [Message(topic, b.encode(), tags=tag, keys=keys) for b in bodies]
    batch = MessageBatch.from_messages(messages, queue_id, [k.decode() for k in uniq_keys(len(messages))])
    return api.send_batch(broker, batch, "admin-test-producer")


def test_create_list_update_delete_topic(admin, cluster):
    topic = unique("AdminTopic")
    assert admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4) == [cluster.broker]
    assert topic in admin.list_topics()
    route = admin.route(topic)
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(4, 4)]
    # update on one broker: fewer queues, read-only
    assert admin.create_topic(topic, broker_addr=cluster.broker, read_queue_nums=2, write_queue_nums=2,
                              perm=PERM_READ, order=True, wait_s=0) == [cluster.broker]
    deadline = time.monotonic() + 5
    while admin.route(topic).queue_datas[0].write_queue_nums != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    q = admin.route(topic).queue_datas[0]
    assert (q.read_queue_nums, q.write_queue_nums, q.perm) == (2, 2, PERM_READ)
    assert len(admin.topic_stats(topic).queues) == 2

    assert admin.delete_topic(topic) == [cluster.broker]
    assert topic not in admin.list_topics()
    assert admin.route(topic) is None
    assert topic not in api_topics(cluster)


def api_topics(cluster) -> list[str]:
    with SyncMQClientAPI() as api:
        return list(api.get_all_topic_config(cluster.broker).topic_config_table)


def test_create_topic_in_unknown_cluster_fails(admin):
    with pytest.raises(ClientError, match="cluster 'NoSuchCluster' is not registered"):
        admin.create_topic(unique("T"), cluster="NoSuchCluster")


def test_brokers_report_runtime(admin, api, cluster):
    brokers = admin.brokers()
    assert len(brokers) == 1
    b = brokers[0]
    assert (b.addr, b.broker_id, b.error) == (cluster.broker, 0, None)
    assert b.cluster and b.broker_name
    assert b.version and b.topic_count >= 1
    assert 0 <= b.commitlog_min_offset <= b.commitlog_max_offset
    assert 0.0 <= b.disk_ratio <= 1.0
    # the put and get totals count what this test sends and pulls
    topic = unique("RuntimeTopic")
    admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    send(api, cluster.broker, topic, 0, ["a", "b", "c"])
    pulled = api.pull_message(cluster.broker, pull_header("runtime_reader", MessageQueue(topic, b.broker_name, 0),
                                                          0, 32, SUB_ALL))
    assert len(pulled.messages()) == 3
    (after,) = admin.brokers()
    assert (after.msg_put_total - b.msg_put_total, after.msg_get_total - b.msg_get_total) == (3, 3)


def test_topic_stats(admin, api, cluster):
    topic = unique("StatsTopic")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    before = int(time.time() * 1000)
    send(api, cluster.broker, topic, 1, ["a", "b", "c"])
    stats = admin.topic_stats(topic)
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in stats.queues] == [(0, 0, 0), (1, 0, 3)]
    assert stats.total_messages == 3
    assert stats.queues[1].last_update_timestamp >= before - 1000
    with pytest.raises(ClientError, match="not known to the NameServers"):
        admin.topic_stats(unique("Missing"))


def test_group_progress_and_lag(admin, api, cluster):
    topic, group = unique("LagTopic"), unique("lag_group")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    send(api, cluster.broker, topic, 0, [f"m{i}" for i in range(5)])
    send(api, cluster.broker, topic, 1, [f"n{i}" for i in range(3)])
    # never committed: the broker reports the topic's queues from offset 0; no topic: nothing to report
    assert admin.group_progress(group, topic).total_lag == 8
    assert admin.group_progress(group).queues == []
    api.update_consumer_offset(cluster.broker, group, topic, 0, 2)
    progress = admin.group_progress(group, topic)
    got = [(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in progress.queues]
    assert got == [(0, 5, 2, 3), (1, 3, 0, 3)]
    assert progress.total_lag == 6
    assert progress.queues[0].last_timestamp > 0
    # without a topic: every topic the group has offsets for
    assert [q.topic for q in admin.group_progress(group).queues] == [topic, topic]


def test_reset_offsets_by_time(admin, api, cluster):
    topic, group = unique("ResetTopic"), unique("reset_group")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    send(api, cluster.broker, topic, 0, ["old1", "old2"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    send(api, cluster.broker, topic, 0, ["new1"])
    api.update_consumer_offset(cluster.broker, group, topic, 0, 3)
    offsets = admin.reset_offsets_by_time(group, topic, cut)
    name = admin.route(topic).broker_datas[0].broker_name
    assert offsets == {MessageQueue(topic, name, 0): 2, MessageQueue(topic, name, 1): 0}
    assert api.query_consumer_offset(cluster.broker, group, topic, 0) == 2
    assert admin.group_progress(group, topic).total_lag == 1
    # a time past every message: the max offsets
    assert set(admin.reset_offsets_by_time(group, topic, int(time.time() * 1000) + 60_000).values()) == {3, 0}


def test_query_by_key_newest_first_and_window(admin, api, cluster):
    topic = unique("QueryTopic")
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    send(api, cluster.broker, topic, 0, ["first"], keys="order-1")
    time.sleep(1.1)  # index entries keep seconds: a window between the two needs a second's gap
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    send(api, cluster.broker, topic, 1, ["second"], keys="order-1 other", tag="t")
    send(api, cluster.broker, topic, 1, ["unrelated"], keys="order-2")
    found = admin.query_by_key(topic, "order-1")
    assert [f.message.body for f in found] == [b"second", b"first"]
    assert found[0].message.tags == "t" and found[0].broker_name
    assert [f.message.body for f in admin.query_by_key(topic, "order-1", begin_ms=middle)] == [b"second"]
    assert [f.message.body for f in admin.query_by_key(topic, "order-1", end_ms=middle)] == [b"first"]
    assert [f.message.body for f in admin.query_by_key(topic, "order-1", max_num=1)] == [b"second"]
    assert admin.query_by_key(topic, "no-such-key") == []


def test_view_message_by_offset_id_and_uniq_key(admin, api, cluster):
    topic = unique("ViewTopic")
    admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    result = send(api, cluster.broker, topic, 0, ["x", "y"])
    offset_id, uniq = result.offset_msg_ids[1], result.msg_ids[1]
    hit = admin.view_message(offset_id)
    assert hit.message.body == b"y" and hit.msg_id == offset_id and hit.uniq_key == uniq
    by_uniq = admin.view_message(uniq, topic)
    assert by_uniq.message.body == b"y" and by_uniq.msg_id == offset_id
    # an offset past the commitlog's end on a real broker: nothing there
    assert admin.view_message(offset_id[:16] + f"{10**12:016X}") is None
    with pytest.raises(ClientError, match="give its topic"):
        admin.view_message("7F000001" + "00000001" + "0" * 16)  # 127.0.0.1:1 - no broker there
    with pytest.raises(ClientError, match="is not an offsetMsgId"):
        admin.view_message("7F000001" + "00010000" + "0" * 16)  # port 65536


def test_unreachable_namesrv_is_a_remoting_error():
    with SyncAdmin(ClientConfig("127.0.0.1:1")) as admin, pytest.raises(RemotingError, match="no NameServer answered"):
        admin.list_topics()
