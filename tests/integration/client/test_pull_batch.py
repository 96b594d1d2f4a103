"""``PullConsumer.pull_batch`` against real ``spark-mq namesrv`` / ``spark-mq broker`` processes: the
columns equal what ``pull`` decodes message by message, with the same offsets and tag filter, for
a pull large enough to take the vectorised split (and to arrive in many socket reads)."""

from __future__ import annotations

import pytest
from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI

from .test_pull_consumers import make_topic, send


@pytest.fixture(scope="module")
def api():
    with SyncMQClientAPI(timeout=5.0) as a:
        yield a


def test_pull_batch_columns_equal_pulled_messages(api, cluster):
    topic = make_topic(api, cluster, 2)
    n = 3000
    tags = [("Aa", "BB", None)[i % 3] for i in range(n)]  # "Aa" and "BB" share a Java hash code
    bodies = [f"body-{i}-" + "x" * (i % 200) for i in range(n)]
    for lo in range(0, n, 1000):
        send(api, cluster, topic, 1, bodies[lo : lo + 1000], tags[lo : lo + 1000])
    with SyncPullConsumer(unique("batch_group"), ClientConfig(cluster.namesrv, instance_name=unique("inst"))) as c:
        c.start()
        q = c.fetch_queues(topic)[1]
        for expression in ("*", "Aa", "BB || nope"):
            by_object = c.pull(q, 0, n, expression)
            by_column = c.pull_batch(q, 0, n, expression)
            assert by_column.status == by_object.status == PullStatus.FOUND
            assert (by_column.next_begin_offset, by_column.min_offset, by_column.max_offset) == (
                by_object.next_begin_offset, by_object.min_offset, by_object.max_offset)
            batch = by_column.batch
            assert batch.messages() == by_object.messages
            assert batch.bodies == [m.body for m in by_object.messages]
            assert batch.queue_offsets.tolist() == [m.queue_offset for m in by_object.messages]
            assert batch.tags == [m.tags for m in by_object.messages]
        assert len(c.pull_batch(q, 0, n).batch) == n
        assert c.pull_batch(q, 0, n, "Aa").batch.bodies == [b.encode() for b, t in zip(bodies, tags, strict=True)
                                                            if t == "Aa"]
        empty = c.pull_batch(q, n, 32)
        assert empty.status == PullStatus.NO_NEW_MSG and len(empty.batch) == 0
