"""Filter pushdown of ``spark.read.format("spark_mq")`` against a real NameServer and broker: each pushed
filter cuts the bytes the broker serves (its Prometheus ``spark_mq_bytes_out`` of the topic) and never the
answer, which is compared row by row (every column) with the same query read without pushdown
(``spark.sql.python.filterPushdown.enabled=false``, Spark's default, where Spark filters every row)."""

from __future__ import annotations

import datetime as dt
import time
import urllib.request

import pytest
from conftest import Cluster, create_topic
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual, Not, StringContains
from servers import unique

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.common.message import Message
from spark_mq.spark.pushdown import INDEX_MAX_HITS, Pushed, push_filters

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
QUEUES = 4
PHASES = 3  # sends separated in time, so a store-time window can hold one of them
PER_PHASE = 600
BODY = 300  # bytes: bodies dominate what a pull serves
TAGS = ("tagA", "tagB", "tagC")
SOLO_KEY = "solo-3"  # the one key of some messages (so `keys = 'solo-3'` holds for them)


@pytest.fixture(scope="module")
def topic(cluster) -> str:
    """PHASES × PER_PHASE messages over QUEUES queues: tags cycle (every 7th has none), every 3rd has the single
    key ``solo-<i % 10>``, the others two keys, one of them ``solo-3 other`` (the index finds it for
    ``solo-3`` but ``keys = 'solo-3'`` does not hold)."""
    name = unique("pushdown")
    create_topic(cluster, name, QUEUES)
    with SyncProducer(unique("pushdown_pg"), ClientConfig(cluster.namesrv)) as producer:
        for phase in range(PHASES):
            for i in range(phase * PER_PHASE, (phase + 1) * PER_PHASE):
                keys = [f"solo-{i % 10}"] if i % 3 == 0 else [f"k{i}", "other"] if i % 3 == 1 else ["solo-3", "x"]
                producer.send(Message(name, f"{i:08d}".encode().ljust(BODY, b"."),
                                      tags=TAGS[i % 3] if i % 7 else None, keys=keys))
            time.sleep(0.05)  # the next phase is stored at later ms
    return name


def _bytes_out(cluster: Cluster, topic: str) -> float:
    with urllib.request.urlopen(cluster.broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "spark_mq_bytes_out_total" and s.labels.get("topic") == topic)


def _read(spark, cluster: Cluster, topic: str, where, *, pushdown: bool, **options):
    """(rows sorted by queue and offset, bytes the broker served for them)."""
    spark.conf.set(PUSHDOWN_CONF, str(pushdown).lower())
    try:
        reader = spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        before = _bytes_out(cluster, topic)
        rows = reader.load().where(where).orderBy("queue_id", "queue_offset").collect()
        return rows, _bytes_out(cluster, topic) - before
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


def _compare(spark, cluster, topic, where, **options):
    """(rows, bytes pushed, bytes not pushed), asserting both reads give the same rows."""
    pushed, pushed_bytes = _read(spark, cluster, topic, where, pushdown=True, **options)
    plain, plain_bytes = _read(spark, cluster, topic, where, pushdown=False, **options)
    assert pushed == plain
    return pushed, pushed_bytes, plain_bytes


def test_push_filters_keeps_what_the_brokers_cannot_answer():
    t = dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.timezone.utc)  # 1.5 ms past the second
    filters = [EqualTo(("tags",), "a"), In(("tags",), ("a", "b")), GreaterThan(("store_timestamp",), t),
               LessThanOrEqual(("store_timestamp",), t), EqualTo(("queue_id",), 2), In(("broker_name",), ("b1",)),
               EqualTo(("keys",), "k"), Not(EqualTo(("tags",), "c")), StringContains(("keys",), "k"),
               EqualTo(("tags",), "a || b"), EqualTo(("store_timestamp",), dt.datetime(2026, 1, 1))]
    pushed, kept = push_filters(filters)
    second_ms = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 1000
    assert pushed == Pushed(tags=frozenset({"a"}), begin_ms=second_ms + 1, end_ms=second_ms + 2,
                            queue_ids=frozenset({2}), brokers=frozenset({"b1"}), key="k")
    # time and keys stay with Spark as well (rounded / a superset); the unpushable ones by reference
    assert [id(f) for f in kept] == [id(filters[i]) for i in (2, 3, 6, 7, 8, 9, 10)]
    assert pushed.tag_expression("*") == "a"
    assert Pushed(tags=frozenset({"b", "c"})).tag_expression("a||b") == "b"
    assert Pushed(tags=frozenset({"c"})).tag_expression("a || b") is None


def test_tags_pushed_to_the_broker(spark, cluster, topic):
    rows, pushed, plain = _compare(spark, cluster, topic, F.col("tags") == "tagA")
    assert {r.tags for r in rows} == {"tagA"} and len(rows) > 0
    assert pushed < plain / 2  # a third of the messages carry tagA

    rows, pushed, plain = _compare(spark, cluster, topic, F.col("tags").isin("tagB", "tagC"))
    assert {r.tags for r in rows} == {"tagB", "tagC"}
    assert pushed < plain * 0.8


def test_tags_intersect_with_the_tags_option(spark, cluster, topic):
    rows, pushed, plain = _compare(spark, cluster, topic, F.col("tags").isin("tagB", "tagC"), tags="tagA || tagB")
    assert {r.tags for r in rows} == {"tagB"}
    assert pushed < plain  # the option alone pulls tagA too
    rows, pushed, _ = _compare(spark, cluster, topic, F.col("tags") == "tagC", tags="tagA")
    assert rows == [] and pushed == 0


def test_store_time_window_reads_about_the_window(spark, cluster, topic):
    spark.conf.unset(PUSHDOWN_CONF)
    times = (spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic).load()
             .select("body", "store_timestamp").collect())
    middle = sorted(r.store_timestamp for r in times if PER_PHASE <= int(r.body[:8]) < 2 * PER_PHASE)
    begin = middle[0].replace(tzinfo=dt.timezone.utc)
    end = middle[-1].replace(tzinfo=dt.timezone.utc)
    where = (F.col("store_timestamp") >= F.lit(begin)) & (F.col("store_timestamp") <= F.lit(end))
    rows, pushed, plain = _compare(spark, cluster, topic, where)
    assert sorted(int(r.body[:8]) for r in rows) == list(range(PER_PHASE, 2 * PER_PHASE))
    assert pushed < plain / 2  # one phase of three, give or take the ms at its edges


def test_queue_and_broker_prune_partitions(spark, cluster, topic):
    rows, pushed, plain = _compare(spark, cluster, topic, F.col("queue_id").isin(1, 2))
    assert {r.queue_id for r in rows} == {1, 2}
    assert pushed < plain * 0.75
    rows, pushed, _ = _compare(spark, cluster, topic, F.col("broker_name") == "no-such-broker")
    assert rows == [] and pushed == 0


def test_keys_read_through_the_index(spark, cluster, topic):
    rows, pushed, plain = _compare(spark, cluster, topic, F.col("keys") == SOLO_KEY)
    assert len(rows) == PHASES * PER_PHASE // 30 and {r.keys for r in rows} == {SOLO_KEY}
    assert plain > 0 and pushed == 0  # no pull at all: QUERY_MESSAGE served the candidates
    # with the other pushed filters applied to the index's hits
    queue_id = rows[0].queue_id
    where = (F.col("keys") == SOLO_KEY) & (F.col("tags") == "tagA") & (F.col("queue_id") == queue_id)
    rows, pushed, _ = _compare(spark, cluster, topic, where)
    assert pushed == 0 and len(rows) > 0 and {(r.tags, r.queue_id) for r in rows} == {("tagA", queue_id)}


def test_a_key_the_index_cannot_list_whole_is_pulled(spark, cluster):
    """More messages carry the key than one QUERY_MESSAGE returns (INDEX_MAX_HITS): the broker's queues are
    pulled instead, and the answer stays whole."""
    name = unique("pushdown_crowded")
    create_topic(cluster, name, QUEUES)
    count = INDEX_MAX_HITS + 100
    with SyncProducer(unique("pushdown_pg"), ClientConfig(cluster.namesrv)) as producer:
        for start in range(0, count, 100):
            producer.send([Message(name, f"{i}".encode(), keys=["crowded"]) for i in range(start, start + 100)])
    rows, pushed, plain = _compare(spark, cluster, name, F.col("keys") == "crowded")
    assert len(rows) == count and pushed == plain > 0


def test_filters_the_brokers_cannot_answer_stay_with_spark(spark, cluster, topic):
    where = (F.col("tags") != "tagB") & (F.col("queue_offset") % 2 == 0) & F.col("keys").contains("solo")
    rows, pushed, plain = _compare(spark, cluster, topic, where)
    assert len(rows) > 0 and pushed == plain
