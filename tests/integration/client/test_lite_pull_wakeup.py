"""LitePullConsumer hands a message to a waiting ``poll`` as soon as its long-polling pull brings
it (each message is sent while the broker reports both queues' pulls held, and reaches the poll
within half the suspend timeout: woken, not timed out), one batch to one poll when several wait,
and ``[]`` to a poll whose timeout passes first. Real ``spark-mq namesrv`` / ``spark-mq broker``
processes."""

from __future__ import annotations

import asyncio
import time

from servers import LONG_SUSPEND_MS, unique, until_held, wait_until

from spark_mq.client.api import MQClientAPI
from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import LitePullConsumer
from spark_mq.client.producer import Producer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message

SUSPEND_S = LONG_SUSPEND_MS / 1000
ONE_OF_TWO_POLL_S = 3.0  # the poll left without the message returns [] after this


def test_poll_returns_each_message_promptly_and_one_batch_to_one_poll(cluster):
    topic = unique("lite_wakeup")
    with SyncMQClientAPI(timeout=5.0) as api:
        api.create_topic(cluster.broker, topic, 2, 2)
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic), what=f"route of {topic}")

    async def main():
        config = ClientConfig(cluster.namesrv, instance_name=unique("inst"))
        consumer = LitePullConsumer(unique("lite_wakeup"), config, consume_from="first", pull_suspend_s=SUSPEND_S)
        producer = await Producer(unique("lite_wakeup_producer"), config).start()
        api = MQClientAPI(timeout=5.0)
        await consumer.subscribe(topic)
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while len(consumer.assignment()) < 2:
                assert time.monotonic() < deadline, "the consumer never owned both queues"
                await asyncio.sleep(0.05)
            for i in range(10):
                polling = asyncio.ensure_future(consumer.poll(SUSPEND_S))
                await until_held(api, cluster.broker, 2)  # both queues' pulls, re-held after the last message
                await producer.send(Message(topic, f"m{i}".encode()))
                got = await asyncio.wait_for(polling, SUSPEND_S / 2)
                assert [m.body for m in got] == [f"m{i}".encode()]

            first, second = (asyncio.ensure_future(consumer.poll(ONE_OF_TWO_POLL_S)) for _ in range(2))
            await until_held(api, cluster.broker, 2)
            await producer.send(Message(topic, b"only one"))
            results = await asyncio.gather(first, second)
            assert sorted(len(r) for r in results) == [0, 1]
            assert [m.body for r in results for m in r] == [b"only one"]
        finally:
            await api.close()
            await producer.shutdown()
            await consumer.shutdown()

    asyncio.run(main())
