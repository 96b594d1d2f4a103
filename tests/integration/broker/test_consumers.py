"""Consumer groups against a real broker: HEART_BEAT, DELETE_SUBSCRIPTIONGROUP, GET_CONSUMER_LIST_BY_GROUP,
GET_CONSUMER_CONNECTION_LIST, NOTIFY_CONSUMER_IDS_CHANGED, UNREGISTER_CLIENT, QUERY/UPDATE_CONSUMER_OFFSET
(across a restart) and LOCK_BATCH_MQ / UNLOCK_BATCH_MQ."""

from __future__ import annotations

import json
import threading

from servers import unique, wait_until

from spark_mq.remoting.bodies import (
    ConsumerData,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    SubscriptionData,
    SubscriptionGroupConfig,
)
from spark_mq.remoting.command import ROCKETMQ_VERSION

from ._support import pull_header, send_header


def heartbeat(api, addr, client_id, group, topic, model="CLUSTERING"):
    data = HeartbeatData(client_id, [ProducerData("itest_producer")], [
        ConsumerData(group, "CONSUME_PASSIVELY", model, "CONSUME_FROM_FIRST_OFFSET",
                     [SubscriptionData(topic, "*")])])
    return api.heartbeat(addr, data)


class Notifications:
    """Collects NOTIFY_CONSUMER_IDS_CHANGED groups a client receives (callback on its loop thread)."""

    def __init__(self, api) -> None:
        self.groups: list[str] = []
        self.brokers: list[str] = []
        self._cond = threading.Condition()
        api.on_consumer_ids_changed(self._on)

    def _on(self, group: str, broker: str) -> None:
        with self._cond:
            self.groups.append(group)
            self.brokers.append(broker)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 3.0) -> list[str]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.groups) >= count, timeout), (
                f"expected {count} notifications, got {self.groups}")
            return list(self.groups)


def test_heartbeat_join_unregister_and_disconnect_notify_members(broker, make_api):
    topic, group = unique("Members"), unique("cg")
    a, b, c = make_api(), make_api(), make_api()
    notes_a = Notifications(a)
    notes_b = Notifications(b)
    a.create_topic(broker.addr, topic, 2, 2)

    assert heartbeat(a, broker.addr, "10.0.0.1@a", group, topic) > 0
    assert a.get_consumer_list_by_group(broker.addr, group) == ["10.0.0.1@a"]
    notes_a.wait_for(1)  # its own joining changed the membership

    heartbeat(b, broker.addr, "10.0.0.1@b", group, topic)
    assert notes_a.wait_for(2) == [group, group]
    assert notes_a.brokers[-1] == broker.addr
    assert sorted(a.get_consumer_list_by_group(broker.addr, group)) == ["10.0.0.1@a", "10.0.0.1@b"]
    # a repeated heartbeat changes nothing: no notification
    heartbeat(b, broker.addr, "10.0.0.1@b", group, topic)

    heartbeat(c, broker.addr, "10.0.0.1@c", group, topic)
    notes_a.wait_for(3)
    assert sorted(a.get_consumer_list_by_group(broker.addr, group)) == ["10.0.0.1@a", "10.0.0.1@b", "10.0.0.1@c"]

    b.unregister_client(broker.addr, "10.0.0.1@b", "itest_producer", group)
    notes_a.wait_for(4)
    assert sorted(a.get_consumer_list_by_group(broker.addr, group)) == ["10.0.0.1@a", "10.0.0.1@c"]

    c.close()  # its connection closes: the broker forgets it and tells the rest
    notes_a.wait_for(5)
    assert a.get_consumer_list_by_group(broker.addr, group) == ["10.0.0.1@a"]
    assert set(notes_a.groups) == {group}
    assert notes_b.wait_for(2) == [group, group]  # b heard only while it was a member (b and c joining)


def test_consumer_connection_list_names_members_versions_and_subscriptions(broker, api):
    topic, group = unique("Conns"), unique("cg")
    api.create_topic(broker.addr, topic, 1, 1)
    assert api.get_consumer_connection_list(broker.addr, group) is None  # CONSUMER_NOT_ONLINE
    heartbeat(api, broker.addr, "10.0.0.1@conn", group, topic)
    found = api.get_consumer_connection_list(broker.addr, group)
    [member] = found.connection_set
    assert (member.client_id, member.language, member.version) == ("10.0.0.1@conn", "PYTHON", ROCKETMQ_VERSION)
    assert member.client_addr.startswith("127.0.0.1:")
    assert list(found.subscription_table) == [topic] and found.subscription_table[topic].sub_string == "*"
    assert (found.message_model, found.consume_from_where) == ("CLUSTERING", "CONSUME_FROM_FIRST_OFFSET")


def test_retry_topic_is_created_for_clustering_groups_only(broker, api, namesrv):
    topic, clustering, broadcasting = unique("Retry"), unique("cg_cl"), unique("cg_bc")
    api.create_topic(broker.addr, topic, 1, 1)
    heartbeat(api, broker.addr, "10.0.0.2@x", clustering, topic)
    heartbeat(api, broker.addr, "10.0.0.2@x", broadcasting, topic, model="BROADCASTING")
    table = api.get_all_topic_config(broker.addr).topic_config_table
    retry = table[f"%RETRY%{clustering}"]
    assert (retry.read_queue_nums, retry.write_queue_nums) == (1, 1)
    assert f"%RETRY%{broadcasting}" not in table
    # and the broker registers it with the NameServer
    route = wait_until(lambda: api.get_route_info(namesrv, f"%RETRY%{clustering}"), what="retry topic route")
    assert [b.broker_name for b in route.broker_datas] == [broker.name]


def test_consumer_offsets_round_trip_and_survive_a_restart(broker, make_api):
    topic, group, other = unique("Offsets"), unique("cg"), unique("cg")
    api = make_api()
    api.create_topic(broker.addr, topic, 4, 4)
    for q in range(4):
        for i in range(3):
            api.send_message(broker.addr, send_header(topic, q), f"{q}-{i}".encode())
    for q, off in ((0, 1), (1, 3), (3, 2)):
        api.update_consumer_offset(broker.addr, group, topic, q, off)
    api.update_consumer_offset(broker.addr, other, topic, 2, 1, oneway=True)
    assert [api.query_consumer_offset(broker.addr, group, topic, q) for q in range(4)] == [1, 3, 0, 2]
    # updates overwrite
    api.update_consumer_offset(broker.addr, group, topic, 0, 2)
    assert api.query_consumer_offset(broker.addr, group, topic, 0) == 2
    wait_until(lambda: api.query_consumer_offset(broker.addr, other, topic, 2) == 1, what="oneway commit")
    api.close()

    broker.restart()  # SIGTERM (exit 0, no abort file), then again on the same store and port
    saved = json.loads((broker.store / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert saved[f"{topic}@{group}"] == {"0": 2, "1": 3, "3": 2}
    assert saved[f"{topic}@{other}"] == {"2": 1}

    api = make_api()
    assert [api.query_consumer_offset(broker.addr, group, topic, q) for q in range(4)] == [2, 3, 0, 2]
    assert api.query_consumer_offset(broker.addr, other, topic, 2) == 1
    assert api.get_max_offset(broker.addr, topic, 0) == 3  # messages survived too


def test_delete_subscription_group_forgets_its_config_and_offsets(broker, api):
    topic, group, other = unique("DelGroup"), unique("cg"), unique("cg")
    api.create_topic(broker.addr, topic, 2, 2)
    for g in (group, other):
        api.update_subscription_group(broker.addr, SubscriptionGroupConfig(g))
        api.update_consumer_offset(broker.addr, g, topic, 0, 5)
    api.delete_subscription_group(broker.addr, group)
    assert group not in api.get_all_subscription_groups(broker.addr).subscription_group_table
    offsets = api.get_all_consumer_offsets(broker.addr).offset_table
    assert f"{topic}@{group}" not in offsets and offsets[f"{topic}@{other}"] == {0: 5}  # the other group stays
    assert api.get_all_subscription_groups(broker.addr).subscription_group_table[other].group_name == other
    api.delete_subscription_group(broker.addr, group)  # again: nothing left to delete, still answered


def test_lock_batch_mq_excludes_other_clients_until_unlocked(broker, make_api):
    topic, group = unique("Locks"), unique("cg")
    a, b = make_api(), make_api()
    a.create_topic(broker.addr, topic, 3, 3)
    mqs = [MessageQueue(topic, broker.name, q) for q in range(3)]
    heartbeat(a, broker.addr, "10.0.0.3@a", group, topic)
    heartbeat(b, broker.addr, "10.0.0.3@b", group, topic)

    assert sorted(a.lock_batch_mq(broker.addr, group, "10.0.0.3@a", mqs[:2])) == mqs[:2]
    assert a.lock_batch_mq(broker.addr, group, "10.0.0.3@a", mqs[:2]) == mqs[:2]  # renewal keeps them
    assert b.lock_batch_mq(broker.addr, group, "10.0.0.3@b", mqs) == [mqs[2]]  # only the free one
    # another group's locks are separate
    assert sorted(b.lock_batch_mq(broker.addr, unique("cg"), "10.0.0.3@b", mqs[:1])) == mqs[:1]

    # an unlock by a non-owner does nothing
    b.unlock_batch_mq(broker.addr, group, "10.0.0.3@b", mqs[:1])
    assert b.lock_batch_mq(broker.addr, group, "10.0.0.3@b", mqs[:1]) == []

    a.unlock_batch_mq(broker.addr, group, "10.0.0.3@a", mqs[:1])
    assert b.lock_batch_mq(broker.addr, group, "10.0.0.3@b", mqs[:1]) == mqs[:1]
    assert a.lock_batch_mq(broker.addr, group, "10.0.0.3@a", mqs) == [mqs[1]]

    a.unlock_batch_mq(broker.addr, group, "10.0.0.3@a", mqs[1:2], oneway=True)
    wait_until(lambda: b.lock_batch_mq(broker.addr, group, "10.0.0.3@b", mqs[1:2]) == mqs[1:2], 2.0,
               what="oneway unlock")


def test_pull_without_subscription_uses_the_heartbeat_subscription(broker, api):
    topic, group = unique("SubFromHeartbeat"), unique("cg")
    api.create_topic(broker.addr, topic, 1, 1)
    for i, tag in enumerate("abcab"):
        api.send_message(broker.addr, send_header(topic, 0, tags=tag), f"{tag}{i}".encode())
    data = HeartbeatData("10.0.0.4@s", [], [ConsumerData(group, subscription_data_set=[
        SubscriptionData(topic, "a || c")])])
    api.heartbeat(broker.addr, data)
    r = api.pull_message(broker.addr, pull_header(group, topic, 0, 0))  # no FLAG_SUBSCRIPTION
    assert [m.body for m in r.messages()] == [b"a0", b"c2", b"a3"]
    assert r.next_begin_offset == 5
