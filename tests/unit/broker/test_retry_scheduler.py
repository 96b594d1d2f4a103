"""RetryScheduler (CONSUMER_SEND_MSG_BACK) on a real MessageStore: delay levels, retry and DLQ
topics, properties and reconsume times of the copies, and pending redeliveries kept across a
restart in delayOffset.json. The clock is injected; nothing sleeps."""

from __future__ import annotations

import pytest
from unit_helpers import FakeClock, tiny_config

from spark_mq.broker.processors.retry import (
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
    RetryScheduler,
    SendBackError,
    parse_delay_levels,
)
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.client.results import decode_units_list
from spark_mq.common.message import Message
from spark_mq.common.properties import UNIQ_KEY
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader
from spark_mq.store.config_file import DELAY_OFFSETS, TOPICS


def read_all(store, topic):
    result = store.get_messages(topic, 0, 0, 100)
    return decode_units_list(result.data) if result.data else []


@pytest.fixture
def env(make_store, tmp_path):
    clock = FakeClock()
    store = make_store(clock=clock)
    topics = TopicConfigManager(tiny_config(tmp_path / "store"), store.config_file(TOPICS))
    topics.load()
    stored: list[tuple[str, int, int]] = []

    def scheduler() -> RetryScheduler:
        s = RetryScheduler(store, topics, store.config_file(DELAY_OFFSETS), on_stored=lambda *a: stored.append(a),
                           clock=clock)
        s.load()
        return s

    return store, topics, clock, scheduler, stored


def back(offset, group="g", level=0, max_times=None, origin=None):
    return ConsumerSendMsgBackRequestHeader(offset=offset, group=group, delay_level=level, origin_topic="orders",
                                            origin_msg_id=origin, max_reconsume_times=max_times)


def test_parse_delay_levels():
    assert parse_delay_levels("1s 5s 1m 2h 1d") == [1000, 5000, 60_000, 7_200_000, 86_400_000]
    with pytest.raises(ValueError):
        parse_delay_levels("1s 5x")


def test_redelivery_waits_for_its_level_and_survives_a_restart(env):
    store, topics, clock, scheduler, stored = env
    put = store.put_message(Message("orders", b"payload", tags="TagA", keys="k1"), 0, uniq_key="U1")
    offset = int(put.physical_offsets[0])
    s = scheduler()
    entry = s.send_back(back(offset))  # level 0: 3 + reconsumeTimes(0) = level 3 = 10 s
    assert entry.due_ms == s.now_ms() + 10_000 and entry.topic == "%RETRY%g"
    assert topics.get("%RETRY%g") is not None
    clock.advance(9.9)
    assert s.deliver_due() == 0

    restarted = scheduler()  # a new broker reads the pending entry back from delayOffset.json
    assert list(restarted.pending.values()) == [entry]
    clock.advance(0.2)
    assert restarted.deliver_due() == 1
    assert stored == [("%RETRY%g", 0, 1)]
    (copy,) = read_all(store, "%RETRY%g")
    assert copy.body == b"payload" and copy.reconsume_times == 1
    assert copy.properties[RETRY_TOPIC] == "orders" and copy.properties[ORIGIN_MESSAGE_ID] == "U1"
    assert copy.properties["TAGS"] == "TagA" and copy.properties[UNIQ_KEY] == "U1"
    assert not restarted.pending and not scheduler().pending  # delivered entries are gone from the file


def test_second_failure_keeps_the_first_topic_and_uses_the_next_level(env):
    store, _, clock, scheduler, _ = env
    offset = int(store.put_message(Message("orders", b"p"), 0).physical_offsets[0])
    s = scheduler()
    s.send_back(back(offset, level=1))
    clock.advance(1.0)
    assert s.deliver_due() == 1
    (first,) = read_all(store, "%RETRY%g")
    entry = s.send_back(back(first.physical_offset))  # 3 + 1 = level 4 = 30 s
    assert entry.due_ms == s.now_ms() + 30_000 and entry.reconsume_times == 2
    clock.advance(30)
    s.deliver_due()
    second = read_all(store, "%RETRY%g")[1]
    assert second.properties[RETRY_TOPIC] == "orders" and second.reconsume_times == 2


def test_past_max_reconsume_times_goes_to_the_dlq_at_once(env):
    store, topics, clock, scheduler, _ = env
    offset = int(store.put_message(Message("orders", b"p"), 0).physical_offsets[0])
    s = scheduler()
    s.send_back(back(offset, level=1, max_times=1))
    clock.advance(1)
    s.deliver_due()
    (retry,) = read_all(store, "%RETRY%g")
    entry = s.send_back(back(retry.physical_offset, level=1, max_times=1))  # reconsumeTimes 1 >= 1
    assert entry.topic == "%DLQ%g" and not s.pending
    (dead,) = read_all(store, "%DLQ%g")
    assert dead.body == b"p" and dead.reconsume_times == 2 and dead.properties[RETRY_TOPIC] == "orders"
    assert topics.get("%DLQ%g").read_queue_nums == 1
    s.send_back(back(offset, level=-1))  # a negative level: straight to the DLQ
    assert len(read_all(store, "%DLQ%g")) == 2


def test_unknown_offset_is_refused(env):
    _, _, _, scheduler, _ = env
    with pytest.raises(SendBackError):
        scheduler().send_back(back(10_000_000))
