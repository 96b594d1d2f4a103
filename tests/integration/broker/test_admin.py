"""Offsets, lookups, topic administration, statistics and metrics against a real broker (and the
NameServer it registers with)."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import LONG_SUSPEND_MS, unique, until_held, wait_until

from spark_mq.client.api import MQClientAPI
from spark_mq.client.ids import uniq_key
from spark_mq.client.results import PullStatus
from spark_mq.common.errors import MQClientError
from spark_mq.remoting.bodies import (
    DataVersion,
    MessageQueue,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import RegisterBrokerRequestHeader

from ._support import pull_header, send_header


def send_n(api, addr, topic, queue_id, n, **kw):
    return [api.send_message(addr, send_header(topic, queue_id, **kw), f"{topic}-{queue_id}-{i}".encode())
            for i in range(n)]


def test_min_max_offsets_earliest_time_and_search_by_time(broker, api):
    topic = unique("Offsets")
    api.create_topic(broker.addr, topic, 2, 2)
    assert (api.get_min_offset(broker.addr, topic, 0), api.get_max_offset(broker.addr, topic, 0)) == (0, 0)
    results = []
    for i in range(3):  # three groups of messages, apart in time
        results += send_n(api, broker.addr, topic, 0, 2)
        if i < 2:
            time.sleep(0.05)
    assert api.get_max_offset(broker.addr, topic, 0) == 6
    assert api.get_min_offset(broker.addr, topic, 0) == 0
    assert api.get_max_offset(broker.addr, topic, 1) == 0
    stored = api.pull_message(broker.addr, pull_header("g", topic, 0, 0)).messages()
    times = [m.store_timestamp for m in stored]
    assert times == sorted(times)
    assert api.get_earliest_msg_storetime(broker.addr, topic, 0) == times[0]

    search = lambda ts: api.search_offset_by_timestamp(broker.addr, topic, 0, ts)  # noqa: E731
    assert search(times[0] - 60_000) == 0
    assert search(times[-1] + 60_000) == 6
    for k in (2, 4):  # the first message of a later group (strictly after the previous one)
        if times[k] > times[k - 1]:
            assert search(times[k]) == k
    assert search(times[0]) == 0
    last = times[-1]
    first_of_last = min(i for i, t in enumerate(times) if t == last)
    assert search(last) == first_of_last


def test_query_message_by_key_and_uniq_key_in_a_time_window(broker, api):
    topic = unique("Query")
    key, uk = unique("order"), uniq_key()
    r1 = api.send_message(broker.addr, send_header(topic, 0, keys=f"{key} other"), b"keyed-1")
    r2 = api.send_message(broker.addr, send_header(topic, 1, keys=key, uniq_key=uk), b"keyed-2")
    api.send_message(broker.addr, send_header(topic, 1, keys="unrelated"), b"noise")
    now = int(time.time() * 1000)
    hits = api.query_message(broker.addr, topic, key, 32, now - 60_000, now + 60_000)
    assert sorted(m.body for m in hits) == [b"keyed-1", b"keyed-2"]
    assert {m.queue_id for m in hits} == {r1.queue_id, r2.queue_id}
    by_uniq = api.query_message(broker.addr, topic, uk, 32, now - 60_000, now + 60_000, unique_key=True)
    assert [m.body for m in by_uniq] == [b"keyed-2"]
    assert api.query_message(broker.addr, topic, key, 1, now - 60_000, now + 60_000)[0].body in (b"keyed-1",
                                                                                                    b"keyed-2")
    # outside the window, in another topic, or an unknown key: nothing
    assert api.query_message(broker.addr, topic, key, 32, now - 3_600_000, now - 600_000) == []
    assert api.query_message(broker.addr, topic, key, 32, now + 600_000, now + 3_600_000) == []
    assert api.query_message(broker.addr, unique("OtherTopic"), key, 32, 0, now + 60_000) == []
    assert api.query_message(broker.addr, topic, unique("nokey"), 32, 0, now + 60_000) == []


def test_view_message_by_id_and_by_offset(broker, api):
    topic = unique("View")
    (r,) = send_n(api, broker.addr, topic, 0, 1, tags="v")
    m = api.view_message_by_id(broker.addr, r.offset_msg_id)
    assert (m.topic, m.body, m.tags) == (topic, f"{topic}-0-0".encode(), "v")
    assert api.view_message_by_id(None, r.offset_msg_id).physical_offset == m.physical_offset  # host from the id
    assert api.view_message(broker.addr, m.physical_offset).body == m.body
    with pytest.raises(MQClientError) as e:
        api.view_message(broker.addr, 1 << 40)
    assert e.value.code == ResponseCode.SYSTEM_ERROR


def test_create_update_and_delete_topic_reach_the_namesrv(broker, api, namesrv):
    topic = unique("Admin")
    api.create_topic(broker.addr, topic, 3, 5)
    cfg = api.get_all_topic_config(broker.addr).topic_config_table[topic]
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (3, 5, 6)

    def route_queues():
        route = api.get_route_info(namesrv, topic)
        if route is None or not route.queue_datas:
            return None
        (qd,) = route.queue_datas
        return qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, qd.perm

    assert wait_until(route_queues, what="topic route") == (broker.name, 3, 5, 6)
    route = api.get_route_info(namesrv, topic)
    assert [(b.broker_name, b.broker_addrs) for b in route.broker_datas] == [(broker.name, {0: broker.addr})]

    api.create_topic(broker.addr, topic, 8, 8, perm=4)  # update: more queues, read-only
    assert wait_until(lambda: route_queues() == (broker.name, 8, 8, 4), what="updated route")
    with pytest.raises(MQClientError) as e:
        api.send_message(broker.addr, send_header(topic, 0), b"read-only")
    assert e.value.code == ResponseCode.NO_PERMISSION

    version = api.get_all_topic_config(broker.addr).data_version
    api.delete_topic_in_broker(broker.addr, topic)
    after = api.get_all_topic_config(broker.addr)
    assert topic not in after.topic_config_table
    assert after.data_version.counter > version.counter
    with pytest.raises(MQClientError) as e:
        api.pull_message(broker.addr, pull_header("g", topic, 0, 0))
    assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
    api.delete_topic_in_namesrv(namesrv, topic)
    assert api.get_route_info(namesrv, topic) is None


def test_deleted_topic_starts_empty_when_created_again(broker, api):
    topic = unique("Recreate")
    api.create_topic(broker.addr, topic, 1, 1)
    send_n(api, broker.addr, topic, 0, 3)
    api.delete_topic_in_broker(broker.addr, topic)
    assert api.get_max_offset(broker.addr, topic, 0) == 0
    api.create_topic(broker.addr, topic, 1, 1)
    assert api.pull_message(broker.addr, pull_header("g", topic, 0, 0)).status == PullStatus.NO_NEW_MSG


def test_topic_config_and_stats(broker, api):
    topic = unique("Stats")
    api.create_topic(broker.addr, topic, 3, 3)
    send_n(api, broker.addr, topic, 0, 4)
    send_n(api, broker.addr, topic, 2, 1)
    table = api.get_all_topic_config(broker.addr).topic_config_table
    assert {"TBW102", topic} <= set(table)
    stats = api.get_topic_stats_info(broker.addr, topic).offset_table
    assert {mq: (o.min_offset, o.max_offset) for mq, o in stats.items()} == {
        MessageQueue(topic, broker.name, 0): (0, 4),
        MessageQueue(topic, broker.name, 1): (0, 0),
        MessageQueue(topic, broker.name, 2): (0, 1),
    }
    now = int(time.time() * 1000)
    assert now - 60_000 < stats[MessageQueue(topic, broker.name, 0)].last_update_timestamp <= now
    assert stats[MessageQueue(topic, broker.name, 1)].last_update_timestamp == 0
    with pytest.raises(MQClientError) as e:
        api.get_topic_stats_info(broker.addr, unique("Missing"))
    assert e.value.code == ResponseCode.TOPIC_NOT_EXIST


def test_consume_stats_lag_after_a_partial_consume(broker, api):
    topic, group = unique("Lag"), unique("cg")
    api.create_topic(broker.addr, topic, 2, 2)
    send_n(api, broker.addr, topic, 0, 5)
    send_n(api, broker.addr, topic, 1, 3)
    # nothing committed yet: as RocketMQ, consumer offsets 0 (the whole queue is lag) for a named topic...
    before = api.get_consume_stats(broker.addr, group, topic).offset_table
    assert {mq.queue_id: (w.broker_offset, w.consumer_offset) for mq, w in before.items()} == {0: (5, 0), 1: (3, 0)}
    with pytest.raises(MQClientError) as e:  # ...and for all topics of an unknown group: not online
        api.get_consume_stats(broker.addr, group)
    assert e.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    r = api.pull_message(broker.addr, pull_header(group, topic, 0, 0, max_nums=2))
    api.update_consumer_offset(broker.addr, group, topic, 0, r.next_begin_offset)
    api.update_consumer_offset(broker.addr, group, topic, 1, 3)
    stats = api.get_consume_stats(broker.addr, group, topic)
    lag = {mq.queue_id: (w.broker_offset, w.consumer_offset, w.broker_offset - w.consumer_offset)
           for mq, w in stats.offset_table.items()}
    assert lag == {0: (5, 2, 3), 1: (3, 3, 0)}
    assert stats.offset_table[MessageQueue(topic, broker.name, 0)].last_timestamp > 0
    assert stats.consume_tps > 0  # 2 messages pulled by the group within the last minute
    all_topics = api.get_consume_stats(broker.addr, group)  # no topic: every topic of the group
    assert {mq.topic for mq in all_topics.offset_table} == {topic}


def test_broker_runtime_info(broker, api):
    send_n(api, broker.addr, unique("Runtime"), 0, 2)
    info = api.get_broker_runtime_info(broker.addr)
    for key in ("brokerVersionDesc", "msgPutTotalTodayNow", "msgGetTotalTodayNow", "commitLogMinOffset",
                "commitLogMaxOffset", "commitLogDiskRatio", "dispatchBehindMessages", "pullHoldWaiters",
                "bootTimestamp", "flushDiskType", "storeWritable"):
        assert key in info, key
    assert int(info["msgPutTotalTodayNow"]) >= 2
    assert int(info["commitLogMaxOffset"]) > int(info["commitLogMinOffset"]) >= 0
    assert 0 <= float(info["commitLogDiskRatio"]) <= 1
    assert info["flushDiskType"] == "ASYNC_FLUSH" and info["storeWritable"] == "true"


def test_unknown_request_code_is_not_supported(broker, api):
    with SyncRemotingClient() as raw:
        resp = raw.invoke(broker.addr, RemotingCommand.request(9999, {}))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in resp.remark
    assert api.get_max_offset(broker.addr, "TBW102", 0) == 0  # still serving


def test_namesrv_routes_and_cluster_info_show_the_broker(broker, api, namesrv):
    topic = unique("Route")
    api.create_topic(broker.addr, topic, 2, 2)
    route = wait_until(lambda: api.get_route_info(namesrv, topic), what="route")
    assert route.broker_datas[0].broker_addrs == {0: broker.addr}
    assert route.broker_datas[0].cluster == "DefaultCluster"
    cluster = api.get_cluster_info(namesrv)
    assert broker.name in cluster.cluster_addr_table["DefaultCluster"]
    assert cluster.broker_addr_table[broker.name].broker_addrs == {0: broker.addr}
    assert topic in api.get_all_topic_list(namesrv).topic_list
    assert topic in api.get_topics_by_cluster(namesrv, "DefaultCluster").topic_list


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_prometheus_metrics(broker, api):
    import asyncio

    topic, other = unique("Metrics"), unique("MetricsOther")
    results = send_n(api, broker.addr, topic, 0, 7)
    send_n(api, broker.addr, other, 0, 2)
    m = scrape(broker.metrics_url)
    assert m[("spark_mq_messages_in_total", (("topic", topic),))] == 7
    assert m[("spark_mq_messages_in_total", (("topic", other),))] == 2
    pulled = api.pull_message(broker.addr, pull_header("g", topic, 0, 0))
    assert len(pulled.messages()) == len(results) == 7
    assert m[("spark_mq_bytes_in_total", (("topic", topic),))] == len(pulled.body)  # whole commitlog units
    assert m[("spark_mq_store_put_seconds_count", ())] >= 9
    assert m[("spark_mq_store_put_seconds_bucket", (("le", "+Inf"),))] >= 9
    assert 0 < m[("spark_mq_disk_used_ratio", ())] <= 1
    after_pull = scrape(broker.metrics_url)
    assert after_pull[("spark_mq_messages_out_total", (("topic", topic),))] == 7
    assert after_pull[("spark_mq_long_poll_waiters", ())] == 0

    async def held_waiters():
        async with MQClientAPI(timeout=5.0) as a:
            held_topic = unique("MetricsHeld")
            await a.create_topic(broker.addr, held_topic, 2, 2)
            pulls = [asyncio.ensure_future(a.pull_message(broker.addr, pull_header("g", held_topic, q, 0,
                                                                                   suspend_ms=LONG_SUSPEND_MS)))
                     for q in range(2)]
            await until_held(a, broker.addr, 2)  # the runtime info's pullHoldWaiters
            waiting = await asyncio.to_thread(scrape, broker.metrics_url)
            for q in range(2):
                await a.send_message(broker.addr, send_header(held_topic, q), b"release")
            await asyncio.gather(*pulls)
            return waiting[("spark_mq_long_poll_waiters", ())]

    assert asyncio.run(held_waiters()) == 2
    assert scrape(broker.metrics_url)[("spark_mq_long_poll_waiters", ())] == 0


@pytest.mark.parametrize("compressed", [False, True], ids=["json", "compressed"])
def test_namesrv_registration_and_kv_config_through_the_client(namesrv, api, compressed):
    """The NameServer request codes our client sends for admin tools (the broker sends its own)."""
    name, topic, addr = unique("fake-broker"), unique("FakeTopic"), "127.0.0.1:1"
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({topic: TopicConfig(topic, 2, 3)}, DataVersion(1, 1)))
    header = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr, cluster_name="FakeCluster",
                                         ha_server_addr="127.0.0.1:2", broker_id=0)
    result = api.register_broker(namesrv, header, body, compressed=compressed)
    assert result.master_addr is None
    (qd,) = api.get_route_info(namesrv, topic).queue_datas
    assert (qd.broker_name, qd.read_queue_nums, qd.write_queue_nums) == (name, 2, 3)
    api.unregister_broker(namesrv, "FakeCluster", addr, name, 0)
    assert api.get_route_info(namesrv, topic) is None

    ns = unique("ns")
    assert api.get_kv_config(namesrv, ns, "k") is None
    assert api.get_kv_list_by_namespace(namesrv, ns) is None
    api.put_kv_config(namesrv, ns, "k", "v1")
    api.put_kv_config(namesrv, ns, "k2", "v2")
    assert api.get_kv_config(namesrv, ns, "k") == "v1"
    assert api.get_kv_list_by_namespace(namesrv, ns) == {"k": "v1", "k2": "v2"}
    api.delete_kv_config(namesrv, ns, "k")
    assert api.get_kv_config(namesrv, ns, "k") is None
