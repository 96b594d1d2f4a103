"""``GroupMembership`` — the one group-membership engine of PushConsumer, LitePullConsumer and the
Spark driver — against a real NameServer and broker: two members split a topic's queues, a queue
locked by one cannot be locked by the other, a hand-over commits before it unlocks (and a failed
commit keeps the lock), renewal keeps what is held, and leaving releases everything."""

from __future__ import annotations

import asyncio

from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.group_membership import GroupMembership
from spark_mq.client.instance import ClientInstance
from spark_mq.client.rebalance import allocate_average
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.remoting.bodies import ConsumerData, SubscriptionData
from spark_mq.remoting.codes import ResponseCode

from ._producer_support import create_topic

QUEUES = 4


async def join(namesrv: str, group: str, topic: str) -> GroupMembership:
    instance = ClientInstance(ClientConfig(namesrv, instance_name=unique("member")))
    await instance.start()
    instance.register_consumer(group, lambda: ConsumerData(group, "CONSUME_ACTIVELY",
                                                           subscription_data_set=[SubscriptionData(topic)]),
                               lambda: None)
    await instance.route(topic)
    await instance.heartbeat_all()
    return GroupMembership(instance, group, allocate_average)


def test_two_members_split_lock_hand_over_and_leave(namesrv, broker):
    topic, group = unique("Membership"), unique("membership_group")
    with SyncMQClientAPI() as api:  # routed before the members join: they look the topic up once
        create_topic(api, namesrv, [broker], topic, QUEUES)

    async def scenario() -> None:
        a = await join(namesrv, group, topic)
        b = await join(namesrv, group, topic)
        try:
            mine_a, mine_b = await a.allocate(topic), await b.allocate(topic)
            assert mine_a is not None and mine_b is not None
            assert len(mine_a) == len(mine_b) == QUEUES // 2 and not set(mine_a) & set(mine_b)
            everything = sorted([*mine_a, *mine_b])

            assert await a.lock(everything) == set(everything)
            assert await b.lock(mine_b) == set()  # a holds them all
            assert await a.renew() == set() and a.held == set(everything)

            # a failed commit keeps the lock (b must wait for the expiry, not read a stale offset)
            async def failing() -> None:
                raise MQClientError(ResponseCode.SYSTEM_ERROR, "boom", broker.addr, "UPDATE_CONSUMER_OFFSET")
            assert not await a.hand_over(mine_b[:1], failing)
            assert await b.lock(mine_b[:1]) == set()

            committed: list[str] = []

            async def commit() -> None:
                assert await b.lock(mine_b[1:]) == set(), "unlocked before the commit"
                committed.append("done")
            assert await a.hand_over(mine_b[1:], commit)
            assert committed == ["done"]
            assert await b.lock(mine_b[1:]) == set(mine_b[1:])
            assert set(mine_b[1:]).isdisjoint(a.held)

            await a.leave()
            assert a.held == set()
            assert await b.lock(mine_a) == set(mine_a)  # released by leaving
            assert await b.allocate(topic) is not None
        finally:
            await a.instance.close()
            await b.leave()
            await b.instance.close()

    asyncio.run(scenario())


def test_allocation_is_unknown_without_a_route(namesrv, broker):
    async def scenario() -> None:
        topic = unique("NoSuchTopic")
        m = await join(namesrv, unique("g"), topic)
        try:
            assert await m.allocate(topic) is None
        finally:
            await m.leave()
            await m.instance.close()

    asyncio.run(scenario())


def test_broadcasting_members_get_every_queue(namesrv, broker):
    topic = unique("Broadcast")
    with SyncMQClientAPI() as api:  # routed before the members join: they look the topic up once
        create_topic(api, namesrv, [broker], topic, QUEUES)

    async def scenario() -> None:
        m = await join(namesrv, unique("bc"), topic)
        m.clustering = False  # as a broadcasting PushConsumer makes it
        try:
            assert len(await m.allocate(topic) or []) == QUEUES
        finally:
            await m.leave()
            await m.instance.close()

    asyncio.run(scenario())
