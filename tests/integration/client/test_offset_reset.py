"""An admin's offset reset (INVOKE_BROKER_TO_RESET_OFFSET) while the group's consumers run: the push and the
lite-pull consumer adopt the new offsets (RESET_CONSUMER_CLIENT_OFFSET) and consume again from there, instead
of committing their old offsets over the reset; a mistyped group or topic is a clear error."""

from __future__ import annotations

import threading
import time

import pytest
from servers import unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.producer import SyncProducer
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message
from spark_mq.remoting.codes import ResponseCode

from ._producer_support import create_topic

pytestmark = pytest.mark.timeout(60)
COMMIT_INTERVAL_S = 0.5  # the push consumer's offset commits


@pytest.fixture(scope="module")
def api():
    with SyncMQClientAPI(timeout=5.0) as client:
        yield client


@pytest.fixture(scope="module")
def admin(namesrv):
    with SyncAdmin(ClientConfig(namesrv, instance_name=unique("admin"))) as a:
        yield a


def old_cut_new(namesrv: str, broker, api, name: str) -> tuple[str, str, int]:
    """A new topic of two queues and a group name; old-0..old-3 sent, then new-0..new-3 after the returned
    cut time (ms), spread over the queues."""
    topic, group = unique(f"Reset{name}"), unique(f"reset_{name}")
    create_topic(api, namesrv, [broker], topic, queues=2)
    with SyncProducer(unique("reset_producer"), ClientConfig(namesrv, instance_name=unique("producer"))) as p:
        for i in range(4):
            p.send(Message(topic, b"x", keys=f"old-{i}"))
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(4):
            p.send(Message(topic, b"x", keys=f"new-{i}"))
    return topic, group, cut


def committed_total(api, broker: str, group: str, topic: str) -> int:
    return sum(max(api.query_consumer_offset(broker, group, topic, q) or 0, 0) for q in range(2))


def test_an_online_push_consumer_consumes_again_from_the_reset(namesrv, broker, api, admin):
    topic, group, cut = old_cut_new(namesrv, broker, api, "Push")
    seen: list[str] = []
    lock = threading.Lock()

    def listen(messages) -> bool:
        with lock:
            seen.extend(m.keys[0] for m in messages)
        return True

    # commits every COMMIT_INTERVAL_S, not the default 5 s: the test waits for them twice, and a commit of the old
    # offsets over the reset would land sooner (the check is the stricter for it)
    c = SyncPushConsumer(group, ClientConfig(namesrv, instance_name=unique("push"),
                                             persist_consumer_offset_interval_s=COMMIT_INTERVAL_S),
                         consume_from="first")
    try:
        c.subscribe(topic)
        c.register_listener(listen)
        c.start()
        wait_until(lambda: len(seen) == 8 and committed_total(api, broker.addr, group, topic) == 8, 15,
                   "the consumer to consume and commit all 8 messages")
        offsets = admin.reset_offsets_by_time(group, topic, cut)
        assert sum(offsets.values()) == 4  # each queue back to its first "new" message
        wait_until(lambda: len(seen) == 12, 15, "the consumer to consume the 4 new messages again")
        time.sleep(0.5)  # nothing more comes: the old messages are not redelivered
        assert sorted(seen[8:]) == [f"new-{i}" for i in range(4)]
        wait_until(lambda: committed_total(api, broker.addr, group, topic) == 8, 15, "the commits to catch up")
    finally:
        c.shutdown()


def test_an_online_lite_pull_consumer_polls_again_from_the_reset(namesrv, broker, api, admin):
    topic, group, cut = old_cut_new(namesrv, broker, api, "Lite")
    c = SyncLitePullConsumer(group, ClientConfig(namesrv, instance_name=unique("lite")), consume_from="first",
                             poll_timeout_s=0.3)
    try:
        c.subscribe(topic)
        c.start()
        seen: list[str] = []
        wait_until(lambda: seen.extend(m.keys[0] for m in c.poll()) or len(seen) == 8, 15, "8 messages polled")
        c.commit()
        assert committed_total(api, broker.addr, group, topic) == 8
        admin.reset_offsets_by_time(group, topic, cut)
        again: list[str] = []
        wait_until(lambda: again.extend(m.keys[0] for m in c.poll()) or len(again) >= 4, 15, "the new ones again")
        assert sorted(again) == [f"new-{i}" for i in range(4)]
        c.commit()  # what it persists is where it is now, not its offsets from before the reset
        assert committed_total(api, broker.addr, group, topic) == 8
    finally:
        c.shutdown()


def test_a_reset_with_no_consumer_online_and_the_errors(namesrv, broker, api, admin):
    topic, group, cut = old_cut_new(namesrv, broker, api, "Offline")
    for q in range(2):
        api.update_consumer_offset(broker.addr, group, topic, q, 4)
    assert sum(admin.reset_offsets_by_time(group, topic, cut).values()) == 4
    assert sum(admin.reset_offsets_by_time(group, topic, 0).values()) == 0
    assert committed_total(api, broker.addr, group, topic) == 0
    # not forced (RocketMQ's isForce=false): an offset only moves backwards, so these stay at 0
    assert sum(api.reset_offset_by_time(broker.addr, group, topic, cut, force=False).offset_table.values()) == 0
    assert committed_total(api, broker.addr, group, topic) == 0
    with pytest.raises(MQClientError) as e:
        admin.reset_offsets_by_time(unique("never_consumed"), topic, cut)
    assert e.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "no offsets" in str(e.value)
    # a topic the broker does not have (asked directly: the admin first needs a route)
    with pytest.raises(MQClientError) as e:
        api.reset_offset_by_time(broker.addr, group, unique("NoSuchTopic"), cut)
    assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
