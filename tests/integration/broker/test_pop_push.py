"""The pop-based push consumer against a real broker: everything consumed exactly once when nothing fails,
more consumers than queues all working, a slow consumer not holding the queue (its messages renewed, not
redelivered), a failed message back after the retry delay, orderly consumption keeping each queue's order."""

from __future__ import annotations

import collections
import threading
import time

import pytest
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.pop_push_consumer import SyncPopPushConsumer

from ._pop_support import POP_CONF, send_numbered
from ._support import create_routed_topic

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return POP_CONF


class Seen:
    """What each consumer's listener was called with (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_consumer: dict[str, list[int]] = collections.defaultdict(list)
        self.attempts: dict[int, list[int]] = collections.defaultdict(list)

    def record(self, who: str, messages) -> None:
        with self.lock:
            for m in messages:
                self.by_consumer[who].append(int(m.body))
                self.attempts[int(m.body)].append(m.reconsume_times)

    def all(self) -> collections.Counter:
        with self.lock:
            return collections.Counter(n for ns in self.by_consumer.values() for n in ns)


def push(namesrv: str, group: str, topic: str, listener, **options) -> SyncPopPushConsumer:
    c = SyncPopPushConsumer(group, ClientConfig(namesrv, instance_name=unique("i")), poll_s=2.0, **options)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    return c


def test_consumes_everything_exactly_once_when_nothing_fails(broker, namesrv):
    topic, group, seen = unique("PopPush"), unique("pp"), Seen()
    create_routed_topic(broker, topic, 4)
    send_numbered(namesrv, topic, 400)
    consumers = [push(namesrv, group, topic, lambda ms, w=w: seen.record(w, ms) or True, consume_batch_size=4)
                 for w in ("a", "b")]
    try:
        wait_until(lambda: len(seen.all()) == 400, TIMEOUT_S, "400 messages consumed")
        time.sleep(2.5)  # longer than any redelivery would take (invisible 60 s: none is due, none may come)
    finally:
        for c in consumers:
            c.shutdown()
    counts = seen.all()
    assert set(counts) == set(range(400)) and set(counts.values()) == {1}


def test_more_consumers_than_queues_all_get_work(broker, namesrv):
    topic, group, seen = unique("PopPushShare"), unique("pp"), Seen()
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 90)

    def slowish(who):
        def listener(ms):
            time.sleep(0.05)
            seen.record(who, ms)
            return True
        return listener

    consumers = [push(namesrv, group, topic, slowish(w), consume_threads=2) for w in ("a", "b", "c")]
    try:
        wait_until(lambda: len(seen.all()) == 90, TIMEOUT_S, "90 messages consumed")
    finally:
        for c in consumers:
            c.shutdown()
    assert set(seen.all().values()) == {1}
    assert all(len(seen.by_consumer[w]) >= 5 for w in ("a", "b", "c")), {w: len(v) for w, v in
                                                                      seen.by_consumer.items()}


def test_a_slow_consumer_does_not_hold_the_queue_and_its_messages_are_renewed_not_redelivered(broker, namesrv):
    topic, group, seen = unique("PopPushSlow"), unique("pp"), Seen()
    create_routed_topic(broker, topic, 1)
    send_numbered(namesrv, topic, 60)
    slow_busy = threading.Event()

    def slow(ms):
        slow_busy.set()
        time.sleep(4.0)  # twice the invisible time: renewed while it runs
        seen.record("slow", ms)
        return True

    slow_consumer = push(namesrv, group, topic, slow, consume_threads=1, invisible_s=2.0, max_cached_messages=1)
    assert slow_busy.wait(TIMEOUT_S)
    fast_consumer = push(namesrv, group, topic, lambda ms: seen.record("fast", ms) or True, invisible_s=2.0)
    try:
        wait_until(lambda: len(seen.all()) == 60, TIMEOUT_S, "60 messages consumed")
        time.sleep(3.0)  # past the invisible time: a message the renewal missed would come back now
    finally:
        fast_consumer.shutdown()
        slow_consumer.shutdown()
    assert set(seen.all().values()) == {1}, [n for n, c in seen.all().items() if c > 1]
    # the fast consumer drained the queue while the slow one was on its first messages (4 s each)
    assert 1 <= len(seen.by_consumer["slow"]) <= 2, len(seen.by_consumer["slow"])


def test_a_failed_message_comes_back_after_the_retry_delay_and_orderly_keeps_each_queues_order(broker, namesrv):
    topic, group, seen = unique("PopPushRetry"), unique("pp"), Seen()
    create_routed_topic(broker, topic, 4)
    send_numbered(namesrv, topic, 20)
    failed_at: dict[int, float] = {}

    def fail_7_once(ms):
        if any(int(m.body) == 7 for m in ms) and 7 not in failed_at:
            failed_at[7] = time.monotonic()
            return False
        seen.record("a", ms)
        return True

    c = push(namesrv, group, topic, fail_7_once, retry_delay_s=1.0)
    try:
        wait_until(lambda: 7 in seen.all(), TIMEOUT_S, "message 7 consumed after its failure")
    finally:
        c.shutdown()
    assert seen.attempts[7] == [1]  # its second delivery, through the pop retry topic
    assert set(seen.all()) == set(range(20)) and set(seen.all().values()) == {1}

    topic, group, seen = unique("PopPushOrderly"), unique("pp"), Seen()
    create_routed_topic(broker, topic, 4)
    queue_of = send_numbered(namesrv, topic, 80, keyed=True)
    failed = threading.Event()

    def fail_once(ms):
        if any(int(m.body) == 41 for m in ms) and not failed.is_set():
            failed.set()  # retried in place: 45, 49, ... of its queue wait for it
            return False
        seen.record("a", ms)
        return True

    c = push(namesrv, group, topic, fail_once, orderly=True, consume_threads=4)
    try:
        wait_until(lambda: len(seen.all()) == 80, TIMEOUT_S, "80 messages consumed in order")
    finally:
        c.shutdown()
    order = seen.by_consumer["a"]
    for q in set(queue_of.values()):
        mine = [n for n in order if queue_of[n] == q]
        assert mine == sorted(mine) and len(mine) == 20
    assert failed.is_set()
