"""Several topics in one ``spark_mq`` read (``topic`` as a list, ``topicPattern``), offsets JSON keyed
by topic (and the older single-topic form still loading), read windows by store timestamp,
``minPartitions`` and ``minMessagesPerTrigger`` / ``maxTriggerDelay`` — against a real NameServer and
broker, compared with what was produced."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import Producer, create_topic
from pyspark.sql.streaming.datasource import ReadAllAvailable
from servers import unique, wait_until

from spark_mq.arrow.queues import matching_topics
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.stream import SparkMQStreamReader

QUERY_TIMEOUT_S = 60
BROKER = "broker-a"
COLUMNS = ("topic", "queue_id", "queue_offset", "uniq_key", "body")


def _topic_with(cluster, name: str, queues: int, messages: int) -> list[tuple]:
    """Create ``name`` and produce ``messages`` to it; the produced rows as ``COLUMNS``."""
    create_topic(cluster, name, queues)
    return _produce(cluster, name, messages)


def _produce(cluster, name: str, messages: int, batch: int = 1) -> list[tuple]:
    """``messages`` sends of one message by default: the producer spreads them over the queues in turn."""
    producer = Producer(cluster, name)
    try:
        producer.send(messages, batch=batch)
    finally:
        producer.close()
    return [(name, *row) for row in producer.rows]


def _read(spark, cluster, **options):
    reader = spark.read.format("spark_mq").option("namesrv", cluster.namesrv)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select(*COLUMNS).collect())


def _stream(spark, cluster, **options):
    reader = spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select(*COLUMNS)


def _drain(spark, cluster, tmp_path: Path, **options) -> None:
    query = (_stream(spark, cluster, **options).writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None


def _wait_rows(spark, query, name: str, n: int) -> None:
    """Until memory table ``name`` of ``query`` has ``n`` rows; fails at once if the query died, and
    with its last progress on timeout."""
    def done() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return spark.table(name).count() == n

    try:
        wait_until(done, timeout=QUERY_TIMEOUT_S, interval=0.2, what=f"{n} rows in {name}")
    except BaseException:
        print(f"{spark.table(name).count()} rows; last progress: {query.lastProgress}")
        raise


def _sink_rows(spark, tmp_path: Path) -> list[tuple]:
    return _rows(spark.read.parquet(str(tmp_path / "out")))


def _ends(rows: list[tuple], queues: dict[str, int]) -> dict[str, dict[str, int]]:
    """The end offsets of new topics (``queues``: topic -> queue count) after ``rows``, keyed by topic."""
    count = Counter((r[0], r[1]) for r in rows)
    return {t: {f"{BROKER}:{q}": count[(t, q)] for q in range(n)} for t, n in queues.items()}


@pytest.fixture(scope="module")
def two_topics(cluster) -> tuple[str, str, list[tuple]]:
    prefix = unique("spark_mt")
    a, b = f"{prefix}_a", f"{prefix}_b"
    rows = _topic_with(cluster, a, 4, 40) + _topic_with(cluster, b, 2, 26)
    return a, b, sorted(rows)


def test_batch_reads_a_list_of_topics(spark, cluster, two_topics):
    a, b, produced = two_topics
    df = _read(spark, cluster, topic=f"{a}, {b}")
    assert _rows(df) == produced  # each row carries its own topic
    assert dict(Counter(r[0] for r in _rows(df))) == {a: 40, b: 26}
    # offsets keyed by topic: a window of each (b's queue 1 left out: from earliest to latest)
    start = json.dumps({a: {f"{BROKER}:0": 3, f"{BROKER}:2": 5}, b: {f"{BROKER}:0": 4}})
    end = json.dumps({a: {f"{BROKER}:0": 8}, b: {f"{BROKER}:0": 9}})
    got = _rows(_read(spark, cluster, topic=f"{a},{b}", startingOffsets=start, endingOffsets=end))
    windows = {(a, 0): (3, 8), (a, 2): (5, 10**9), (b, 0): (4, 9)}  # the other queues: all of them
    want = [r for r in produced if windows.get((r[0], r[1]), (0, 10**9))[0] <= r[2]
            < windows.get((r[0], r[1]), (0, 10**9))[1]]
    assert got == want


def test_batch_reads_the_topics_a_pattern_matches(spark, cluster, two_topics):
    a, _, produced = two_topics
    prefix = a[:-2]
    assert _rows(_read(spark, cluster, topicPattern=f"{prefix}_[ab]")) == produced
    assert _rows(_read(spark, cluster, topicPattern=f"{a}|x")) == [r for r in produced if r[0] == a]
    assert _rows(_read(spark, cluster, topicPattern=f"{prefix}_")) == [], "the whole name must match"


def test_a_pattern_never_matches_system_topics(cluster, two_topics):
    a, b, _ = two_topics
    retry, dlq = f"%RETRY%{unique('spark_mt_g')}", f"%DLQ%{unique('spark_mt_g')}"
    create_topic(cluster, retry, 1)
    create_topic(cluster, dlq, 1)
    with SyncMQClientAPI() as api:
        listed = set(api.get_all_topic_list(cluster.namesrv).topic_list)
        assert {retry, dlq, a, b} <= listed
        matched = matching_topics(api, [cluster.namesrv], ".*")
        assert {a, b} <= set(matched) and not {retry, dlq, "TBW102"} & set(matched)
        assert matching_topics(api, [cluster.namesrv], "%.*") == []


def test_key_pushdown_over_two_topics_reads_each_topics_index(spark, cluster):
    """``keys = 'k'`` pushed to the brokers' key index (QUERY_MESSAGE names one topic): each topic's
    hits, the same rows as Spark filtering every row."""
    prefix = unique("spark_mtk")
    topics = [f"{prefix}_a", f"{prefix}_b"]
    with SyncProducer(unique("spark_mtk_pg"), ClientConfig(cluster.namesrv)) as producer:
        for topic in topics:
            create_topic(cluster, topic, 2)
            for i in range(20):
                producer.send(Message(topic, f"{topic}-{i}".encode(), keys=["shared-k"] if i % 4 == 0 else [f"k{i}"]))

    def read(pushdown: bool) -> list[tuple]:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", str(pushdown).lower())
        try:
            return _rows(_read(spark, cluster, topic=",".join(topics)).where("keys = 'shared-k'"))
        finally:
            spark.conf.unset("spark.sql.python.filterPushdown.enabled")

    pushed = read(True)
    assert Counter(r[0] for r in pushed) == {topics[0]: 5, topics[1]: 5}
    assert pushed == read(False)


def test_stream_of_two_topics_is_exact_and_journals_offsets_by_topic(spark, cluster, tmp_path):
    a, b = unique("spark_mts_a"), unique("spark_mts_b")
    rows = _topic_with(cluster, a, 4, 120) + _topic_with(cluster, b, 2, 50)
    _drain(spark, cluster, tmp_path, topic=f"{a},{b}", startingOffsets="earliest", maxMessagesPerTrigger="60")
    rows += _produce(cluster, a, 30) + _produce(cluster, b, 21)
    _drain(spark, cluster, tmp_path, topic=f"{a},{b}", startingOffsets="earliest", maxMessagesPerTrigger="60")
    assert _sink_rows(spark, tmp_path) == sorted(rows)
    last = max((p for p in (tmp_path / "chk" / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    journaled = json.loads(last.read_text().splitlines()[-1])
    assert journaled == _ends(rows, {a: 4, b: 2})


def test_group_stream_of_two_topics_commits_each_topic(spark, cluster):
    """Group mode: the member takes each topic's queues (allocation per topic) and commits both."""
    a, b = unique("spark_mtg_a"), unique("spark_mtg_b")
    group = unique("spark_mtg_group")
    rows = _topic_with(cluster, a, 4, 40) + _topic_with(cluster, b, 2, 30)
    name = unique("mtg_q")
    query = (_stream(spark, cluster, topic=f"{a},{b}", group=group, startingOffsets="earliest").writeStream
             .format("memory").queryName(name).trigger(processingTime="200 milliseconds").start())
    try:
        _wait_rows(spark, query, name, 70)
        rows += _produce(cluster, a, 1)  # one more trigger: the batch before it is committed to the brokers
        with SyncMQClientAPI() as api:
            def committed() -> dict[str, dict[str, int | None]]:
                return {t: {f"{BROKER}:{q}": api.query_consumer_offset(cluster.broker.addr, group, t, q)
                            for q in range(n)} for t, n in ((a, 4), (b, 2))}

            wait_until(lambda: committed() == _ends(rows, {a: 4, b: 2}), timeout=30,
                       what="the group's offsets of both topics at the broker")
        _wait_rows(spark, query, name, 71)
        assert _rows(spark.table(name)) == sorted(rows)
    finally:
        query.stop()
    assert query.exception() is None


def test_pattern_stream_reads_a_topic_created_later_from_earliest(spark, cluster):
    """startingOffsets=latest (the stream default) for the topics matching at the start; a topic that
    starts matching later joins at its earliest offset, so nothing written to it before it was seen is
    skipped. Topics that do not match are not read."""
    prefix = unique("spark_mtp")
    first, later, other = f"{prefix}_first", f"{prefix}_later", f"x{prefix}_other"
    skipped = _topic_with(cluster, first, 2, 10)  # before the query: latest skips them
    name = unique("mtp_q")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")  # progress of empty triggers too
    try:
        query = (_stream(spark, cluster, topicPattern=f"{prefix}_.*").writeStream.format("memory").queryName(name)
                 .trigger(processingTime="200 milliseconds").start())
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        wait_until(lambda: query.lastProgress is not None, timeout=QUERY_TIMEOUT_S, what="the query's first trigger")
        rows = _produce(cluster, first, 30)
        _wait_rows(spark, query, name, 30)
        rows += _topic_with(cluster, later, 4, 44)
        _topic_with(cluster, other, 2, 10)
        rows += _produce(cluster, first, 6)
        _wait_rows(spark, query, name, 80)
        rows += _produce(cluster, later, 8)
        _wait_rows(spark, query, name, 88)
        assert _rows(spark.table(name)) == sorted(rows)
        assert not set(skipped) & set(_rows(spark.table(name)))
    finally:
        query.stop()
    assert query.exception() is None


def _ranges(reader: SparkMQStreamReader, start: dict, end: dict) -> list[tuple]:
    return sorted((p.value.topic, p.value.queue_id, p.value.start, p.value.end) for p in reader.partitions(start, end))


def test_group_member_takes_a_topic_its_pattern_matches_later(cluster):
    """The reader as Spark drives it (no Spark), in group mode with a pattern: a topic created after
    the start is subscribed to, locked, joins at its earliest offsets and is committed like the first."""
    prefix = unique("spark_mtgp")
    first, later = f"{prefix}_1", f"{prefix}_2"
    group = unique("spark_mtgp_group")
    rows = _topic_with(cluster, first, 2, 10)
    reader = SparkMQStreamReader(SourceOptions.parse(
        {"namesrv": cluster.namesrv, "topicPattern": f"{prefix}_.*", "group": group, "startingOffsets": "earliest",
         "rebalanceIntervalMs": "200"}, streaming=True))
    everything = ReadAllAvailable()
    try:
        start = reader.initialOffset()
        assert start == {first: {f"{BROKER}:0": 0, f"{BROKER}:1": 0}}
        rows += _topic_with(cluster, later, 2, 6)
        end = reader.latestOffset(start, everything)
        assert end == {**_ends([r for r in rows if r[0] == first], {first: 2}),
                       later: {f"{BROKER}:0": 0, f"{BROKER}:1": 0}}, "the new topic joins at its earliest"
        assert _ranges(reader, start, end) == [(first, 0, 0, 5), (first, 1, 0, 5)]
        start, end = end, reader.latestOffset(end, everything)
        assert end == _ends(rows, {first: 2, later: 2})
        assert _ranges(reader, start, end) == [(later, 0, 0, 3), (later, 1, 0, 3)]
        reader.commit(end)
        with SyncMQClientAPI() as api:
            assert {t: {f"{BROKER}:{q}": api.query_consumer_offset(cluster.broker.addr, group, t, q)
                        for q in range(2)} for t in (first, later)} == _ends(rows, {first: 2, later: 2})
    finally:
        reader.stop()


def test_single_topic_checkpoint_in_the_old_offsets_form_resumes(spark, cluster, tmp_path):
    """A checkpoint written before several topics journaled ``{"<broker>:<queueId>": n}``: rewrite this
    query's offset files into that form, and the restarted query reads on from them exactly."""
    topic = unique("spark_mt_old")
    rows = _topic_with(cluster, topic, 4, 60)
    _drain(spark, cluster, tmp_path, topic=topic, startingOffsets="earliest")
    offsets = tmp_path / "chk" / "offsets"
    for path in [p for p in offsets.iterdir() if p.name.isdigit()]:
        lines = path.read_text().splitlines()
        keyed = json.loads(lines[-1])
        assert list(keyed) == [topic]
        path.write_text("\n".join([*lines[:-1], json.dumps(keyed[topic])]))
        (offsets / f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old content
    rows += _produce(cluster, topic, 24)
    _drain(spark, cluster, tmp_path, topic=topic, startingOffsets="earliest")
    assert _sink_rows(spark, tmp_path) == sorted(rows)


def _stored(df) -> list[tuple]:
    """(queue_id, queue_offset, store time in ms) of each row."""
    return sorted(tuple(r) for r in df.selectExpr("queue_id", "queue_offset", "unix_millis(store_timestamp)").collect())


def test_by_timestamp_windows_select_exactly_the_messages_stored_in_them(spark, cluster):
    topic = unique("spark_mt_time")
    create_topic(cluster, topic, 2)
    for _ in range(8):  # several store times: one send of 10 at a time
        _produce(cluster, topic, 10, batch=10)
        time.sleep(0.01)
    stored = _stored(_read(spark, cluster, topic=topic))
    times = sorted({ts for *_, ts in stored})
    assert len(times) >= 4
    t1, t2 = times[len(times) // 4], times[3 * len(times) // 4]

    def window(**options) -> list[tuple]:
        return _stored(_read(spark, cluster, topic=topic, **options))

    want = [r for r in stored if t1 <= r[2] < t2]
    assert want and len(want) < len(stored)
    per_queue = json.dumps({topic: {f"{BROKER}:0": t1, f"{BROKER}:1": t1}})
    ends = json.dumps({topic: {f"{BROKER}:0": t2, f"{BROKER}:1": t2}})
    assert window(startingOffsetsByTimestamp=per_queue, endingOffsetsByTimestamp=ends) == want
    assert window(startingTimestamp=str(t1), endingTimestamp=str(t2)) == want
    # a queue the JSON leaves out starts at startingOffsets (earliest); the older un-keyed form loads too
    only_q0 = json.dumps({f"{BROKER}:0": t1})
    assert window(startingOffsetsByTimestamp=only_q0, endingTimestamp=str(t2)) == [
        r for r in stored if r[2] < t2 and (r[0] == 1 or r[2] >= t1)]


def test_min_partitions_splits_ranges_into_at_least_that_many(spark, cluster, two_topics):
    a, b, produced = two_topics
    df = _read(spark, cluster, topic=f"{a},{b}", minPartitions="13")
    assert df.rdd.getNumPartitions() >= 13
    assert _rows(df) == produced
    per_partition = df.select(*COLUMNS).rdd.glom().map(len).collect()
    assert len(per_partition) >= 13 and sum(per_partition) == 66 and min(per_partition) >= 1
    assert _read(spark, cluster, topic=a, minPartitions="2").rdd.getNumPartitions() == 4, "4 queues are enough"


def _reader(cluster, topic: str, clock, **options) -> SparkMQStreamReader:
    return SparkMQStreamReader(SourceOptions.parse({"namesrv": cluster.namesrv, "topic": topic,
                                                    "startingOffsets": "earliest", **options}, streaming=True),
                               clock=clock)


def test_min_messages_per_trigger_holds_a_batch_back_until_enough_or_the_delay(cluster):
    """The reader as Spark drives it (no Spark), with a fake clock for maxTriggerDelay."""
    topic = unique("spark_mt_min")
    create_topic(cluster, topic, 2)
    now = [1000.0]
    reader = _reader(cluster, topic, lambda: now[0], minMessagesPerTrigger="50", maxTriggerDelay="10s")
    limit = reader.getDefaultReadLimit()
    try:
        start = reader.initialOffset()

        def total(offsets: dict) -> int:
            return sum(offsets[topic].values())

        _produce(cluster, topic, 20)
        assert reader.latestOffset(start, limit) == start, "20 < 50 waiting: held back"
        now[0] += 9.5
        assert reader.latestOffset(start, limit) == start, "still inside maxTriggerDelay"
        now[0] += 1
        end = reader.latestOffset(start, limit)
        assert total(end) == 20, "maxTriggerDelay passed: the 20 go"
        start = end
        _produce(cluster, topic, 60)
        end = reader.latestOffset(start, limit)
        assert total(end) - total(start) == 60, "60 >= 50 waiting: no wait"
        start = end
        _produce(cluster, topic, 10)
        assert reader.latestOffset(start, limit) == start
        assert total(reader.latestOffset(start, ReadAllAvailable())) - total(start) == 10, "Trigger.Once reads all"
    finally:
        reader.stop()


def test_min_messages_per_trigger_in_a_running_query(spark, cluster):
    """Through Spark (which carries the reader's ReadMinRows back to it): no batch smaller than
    minMessagesPerTrigger while maxTriggerDelay has not passed, even though the source saw the first
    messages (its reported latest offset) triggers before the rest came."""
    topic = unique("spark_mt_minq")
    create_topic(cluster, topic, 2)
    name = unique("mt_minq")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")
    try:
        query = (_stream(spark, cluster, topic=topic, startingOffsets="earliest", minMessagesPerTrigger="50",
                         maxTriggerDelay="1h").writeStream.format("memory").queryName(name)
                 .trigger(processingTime="100 milliseconds").start())
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        rows = _produce(cluster, topic, 20)

        def seen(n: int) -> bool:
            return any(p["sources"] and p["sources"][0]["latestOffset"]
                       and sum(json.loads(p["sources"][0]["latestOffset"]).get(topic, {}).values()) == n
                       for p in query.recentProgress)

        wait_until(lambda: seen(20), timeout=QUERY_TIMEOUT_S, what="the source to see the first 20")
        assert spark.table(name).count() == 0
        rows += _produce(cluster, topic, 40, batch=40)  # at once: a trigger seeing part would hold the rest
        _wait_rows(spark, query, name, 60)
        assert _rows(spark.table(name)) == sorted(rows)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes and min(sizes) >= 50, sizes
    finally:
        query.stop()
    assert query.exception() is None
