"""``spark.readStream.format("spark_mq")`` against a real NameServer and broker: exactly the produced
messages reach the sink (no loss, no duplicates) across backlogs, concurrent producing, stop/restart
from the checkpoint, admission control and broker-side offset commits."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from chispa import assert_df_equality
from conftest import QUEUES, Producer, create_topic
from servers import unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.spark.stream import allocate_budget

QUERY_TIMEOUT_S = 60
BROKER = "broker-a"


@pytest.fixture
def topic(cluster):
    name = unique("spark_stream")
    create_topic(cluster, name)
    return name


@pytest.fixture
def producer(cluster, topic):
    p = Producer(cluster, topic)
    yield p
    p.close()


def _stream(spark, cluster, topic, **options):
    reader = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
              .option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select("queue_id", "queue_offset", "uniq_key", "body")


def _to_parquet(df, tmp_path, **trigger):
    return (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "chk")).trigger(**trigger).start())


def _drain(spark, cluster, topic, tmp_path, **options) -> None:
    query = _to_parquet(_stream(spark, cluster, topic, **options), tmp_path, availableNow=True)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None


def _assert_output_is(spark, tmp_path, rows) -> None:
    out = spark.read.parquet(str(tmp_path / "out"))
    got = [tuple(r) for r in out.collect()]
    assert len(got) == len(rows), f"{len(got)} rows in the sink, {len(rows)} produced"
    assert {r[2] for r in got} == {r[2] for r in rows}  # the same message ids, none twice (lengths agree)
    expected = spark.createDataFrame(sorted(rows), out.schema)
    assert_df_equality(out.orderBy("queue_id", "queue_offset"), expected)


def test_allocate_budget_is_fair_and_never_over():
    k = [(BROKER, i) for i in range(4)]
    assert allocate_budget({k[0]: 10, k[1]: 10}, 100) == {k[0]: 10, k[1]: 10}
    assert allocate_budget(dict.fromkeys(k, 1000), 1000) == dict.fromkeys(k, 250)
    # a small backlog leaves its share to the others
    assert allocate_budget({k[0]: 10, k[1]: 1000, k[2]: 1000, k[3]: 0}, 1000) == {k[0]: 10, k[1]: 495, k[2]: 495,
                                                                                  k[3]: 0}
    # the units that do not divide go to the biggest backlogs
    got = allocate_budget({k[0]: 5, k[1]: 7, k[2]: 9}, 10)
    assert sum(got.values()) == 10 and got == {k[0]: 3, k[1]: 3, k[2]: 4}
    assert allocate_budget({k[0]: 5}, 0) == {k[0]: 0}
    rng = random.Random(7)
    for _ in range(200):
        backlog = {key: rng.choice([0, rng.randint(0, 50), rng.randint(0, 5000)]) for key in k}
        budget = rng.randint(1, 6000)
        got = allocate_budget(backlog, budget)
        assert sum(got.values()) == min(budget, sum(backlog.values()))
        assert all(0 <= got[q] <= backlog[q] for q in k)


def test_backlog_available_now_exact(spark, cluster, topic, producer, tmp_path):
    producer.send(800)
    assert {r[0] for r in producer.rows} == set(range(QUEUES))
    _drain(spark, cluster, topic, tmp_path)
    _assert_output_is(spark, tmp_path, producer.rows)


def _produce_in_background(producer: Producer, seconds: float) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.send(50, batch=25)
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_produce_while_running_then_drain(spark, cluster, topic, producer, tmp_path):
    producer.send(100)
    thread = _produce_in_background(producer, 4.0)
    query = _to_parquet(_stream(spark, cluster, topic), tmp_path, processingTime="500 milliseconds")
    thread.join()
    # stopped after its first batch: a query stopped inside its very first batch is refused on restart by
    # Spark 4.2 (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY; seen at load 12-15, as in the test below)
    wait_until(lambda: query.lastProgress is not None, timeout=60, what="the query's first batch")
    query.stop()
    assert query.exception() is None
    _drain(spark, cluster, topic, tmp_path)
    _assert_output_is(spark, tmp_path, producer.rows)


def test_stop_and_restart_from_checkpoint(spark, cluster, topic, producer, tmp_path):
    rng = random.Random(7)  # fixed stop delays: a failure replays them (where batches end still varies)
    producer.send(200)
    thread = _produce_in_background(producer, 5.0)
    for _ in range(3):
        query = _to_parquet(_stream(spark, cluster, topic, maxMessagesPerTrigger="300"), tmp_path,
                            processingTime="200 milliseconds")
        # the random stop falls after the run's first batch: a query stopped inside its very first
        # batch (offsets/0 written, no commit yet) was refused on restart by Spark 4.2 once in CI
        # (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY); see the session note of issue 7
        wait_until(lambda q=query: q.lastProgress is not None, timeout=60, what="the query's first batch")
        time.sleep(rng.uniform(0.0, 2.0))
        query.stop()
        assert query.exception() is None
    thread.join()
    _drain(spark, cluster, topic, tmp_path)
    _assert_output_is(spark, tmp_path, producer.rows)


def test_max_messages_per_trigger(spark, cluster, topic, producer, tmp_path):
    producer.send(5000, batch=500)
    sizes: list[int] = []

    def record(df, batch_id):
        sizes.append(df.count())

    query = (_stream(spark, cluster, topic, maxMessagesPerTrigger="1000").writeStream.foreachBatch(record)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    nonempty = [s for s in sizes if s]
    assert sum(nonempty) == 5000
    assert max(nonempty) <= 1000 and len(nonempty) >= 5, sizes


def test_commit_to_broker(spark, cluster, topic, producer, tmp_path):
    """Spark commits a batch's end offsets to the source when it plans the next batch: so once a batch ending
    at the max offsets is done and one more message arrives, the group's offsets on the broker are those."""
    group = unique("spark_stream_group")
    producer.send(400)
    with SyncMQClientAPI() as api:
        ends = {f"{BROKER}:{q}": api.get_max_offset(cluster.broker.addr, topic, q) for q in range(QUEUES)}
        assert sum(ends.values()) == 400
        query = _to_parquet(_stream(spark, cluster, topic, group=group, maxMessagesPerTrigger="150"), tmp_path,
                            processingTime="200 milliseconds")
        try:
            wait_until(lambda: any(json.loads(p["sources"][0]["endOffset"]) == {topic: ends}
                                   for p in query.recentProgress),
                       timeout=30, what="a batch ending at the max offsets")
            producer.send(1)

            def committed():
                return {f"{BROKER}:{q}": api.query_consumer_offset(cluster.broker.addr, group, topic, q)
                        for q in range(QUEUES)}

            wait_until(lambda: committed() == ends, timeout=30, what=f"the group's offsets to be {ends}")
        finally:
            query.stop()
    assert query.exception() is None


def test_queues_added_later_are_read_from_earliest(spark, cluster, tmp_path):
    """A topic expanded while the query runs: the new queues' messages are all read (from earliest)."""
    topic = unique("spark_stream_grow")
    create_topic(cluster, topic, queues=2)
    before = Producer(cluster, topic)
    try:
        before.send(200, batch=50)
    finally:
        before.close()
    _drain(spark, cluster, topic, tmp_path)
    create_topic(cluster, topic, queues=QUEUES)
    with SyncMQClientAPI() as api:
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic).queue_datas[0].read_queue_nums == QUEUES,
                   what="the expanded route")
    after = Producer(cluster, topic)
    try:
        after.send(400, batch=50)
    finally:
        after.close()
    assert {r[0] for r in after.rows} == set(range(QUEUES))
    _drain(spark, cluster, topic, tmp_path)
    _assert_output_is(spark, tmp_path, before.rows + after.rows)
