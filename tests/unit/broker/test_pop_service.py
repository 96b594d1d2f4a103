"""PopService and ReviveService on a real MessageStore, in process, with an injected clock (nothing sleeps):
what the gRPC endpoint calls. Pops hand each message out once, acks close checkpoints, due checkpoints are
redelivered through the pop retry topic then the DLQ, a replay of the revive topic after a restart reopens
exactly the unacknowledged ones, and forward_to_dlq moves one message at once."""

from __future__ import annotations

import asyncio

import pytest
from unit_helpers import FakeClock, tiny_config

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.pop.revive import ReviveService
from spark_mq.broker.pop.service import PopError, PopService
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.processors.retry import RetryScheduler
from spark_mq.broker.processors.unserved_features import UnservedFeatures
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.message import Message
from spark_mq.common.perm import PERM_READ_WRITE
from spark_mq.common.unit.decode import decode_message
from spark_mq.remoting.bodies import SubscriptionGroupConfig, TopicConfig
from spark_mq.remoting.codes import ResponseCode
from spark_mq.store.config_file import CONSUMER_OFFSETS, DELAY_OFFSETS, SUBSCRIPTION_GROUPS, TOPICS

INVISIBLE_MS = 5_000


@pytest.fixture
def env(make_store, tmp_path):
    clock = FakeClock()
    store = make_store(clock=clock)
    topics = TopicConfigManager(tiny_config(tmp_path / "store"), store.config_file(TOPICS))
    topics.load()
    topics.upsert(TopicConfig("orders", 2, 2, PERM_READ_WRITE))
    groups = SubscriptionGroupManager(store.config_file(SUBSCRIPTION_GROUPS))
    groups.upsert(SubscriptionGroupConfig("g", retry_max_times=1))
    for i in range(6):
        store.put_message(Message("orders", str(i).encode()), i % 2)

    def broker() -> tuple[PopService, ReviveService]:
        """The pop parts of a broker (started anew: a restart replays the revive topic)."""
        offsets = ConsumerOffsetManager(store.config_file(CONSUMER_OFFSETS))
        pops = PopService(store, topics, groups, offsets, PullHoldService(),
                          Sql92Filters(False, UnservedFeatures("b", lambda feature: None)), broker_name="b",
                          cluster="c", switch_ms=1000, clock=clock)
        retry = RetryScheduler(store, topics, store.config_file(DELAY_OFFSETS), clock=clock)
        revive = ReviveService(pops, retry)
        revive.replay()
        return pops, revive

    return clock, broker


def pop(pops: PopService, n: int = 32, order: bool = False):
    return asyncio.run(pops.pop("g", "orders", -1, n, INVISIBLE_MS, order=order)).messages


def bodies(messages) -> list[int]:
    return sorted(int(decode_message(m.unit).body) for m in messages)


def test_pop_ack_revive_retry_then_dlq(env):
    clock, broker = env
    pops, revive = broker()
    first = pop(pops)
    assert bodies(first) == list(range(6)) and pop(pops) == []  # each once
    for m in first[:4]:
        asyncio.run(pops.ack("g", "orders", m.receipt))
    with pytest.raises(PopError) as e:
        asyncio.run(pops.ack("g", "orders", first[0].receipt))
    assert e.value.code == ResponseCode.NO_MESSAGE
    assert revive.revive_due(pops.now_ms()) == 0  # not due yet
    clock.advance(INVISIBLE_MS / 1000)
    assert revive.revive_due(pops.now_ms()) == 2
    again = pop(pops)
    assert bodies(again) == bodies(first[4:]) and {m.topic for m in again} == {"%RETRY%g_orders"}
    assert all(decode_message(m.unit).reconsume_times == 1 for m in again)
    clock.advance(INVISIBLE_MS / 1000)
    revive.revive_due(pops.now_ms())  # retryMaxTimes=1: to the DLQ now
    assert pop(pops) == [] and pops.store.get_max_offset("%DLQ%g", 0) == 2


def test_a_restart_reopens_exactly_the_unacknowledged_checkpoints(env):
    clock, broker = env
    pops, _ = broker()
    first = pop(pops)
    for m in first[:4]:
        asyncio.run(pops.ack("g", "orders", m.receipt))
    kept = asyncio.run(pops.change_invisible("g", "orders", first[4].receipt, 60_000))
    pops, revive = broker()  # the offsets file was never written: the replay moves the pop offset
    assert pop(pops) == []
    assert pops.checkpoints.in_flight("g", "orders", 0) + pops.checkpoints.in_flight("g", "orders", 1) == 2
    clock.advance(INVISIBLE_MS / 1000)
    assert revive.revive_due(pops.now_ms()) == 1  # first[5]; first[4] got 60 s more
    asyncio.run(pops.ack("g", "orders", kept.encode()))
    assert bodies(pop(pops)) == bodies(first[5:])


def test_forward_to_dlq_moves_one_in_flight_message_at_once(env):
    _, broker = env
    pops, revive = broker()
    m = pop(pops, 1)[0]
    asyncio.run(revive.forward_to_dlq("g", "orders", m.receipt))
    assert pops.store.get_max_offset("%DLQ%g", 0) == 1
    with pytest.raises(PopError):
        asyncio.run(pops.ack("g", "orders", m.receipt))


def test_orderly_pop_holds_a_queue_until_its_batch_is_acknowledged(env):
    clock, broker = env
    pops, _ = broker()
    batch = pop(pops, 2, order=True)
    queue = batch[0].queue_id
    assert {m.queue_id for m in batch} == {queue}
    others = pop(pops, 32, order=True)
    assert queue not in {m.queue_id for m in others}
    clock.advance(INVISIBLE_MS / 1000)  # not acknowledged: the same messages again
    assert [m.queue_offset for m in pop(pops, 2, order=True)] == [m.queue_offset for m in batch]
