"""The sink's ``topic`` column, key routing and tolerance of extra columns, against a real NameServer
and broker, read back with the spark_mq batch source.

Key routing is checked against :func:`java_string_hash`, written here from Java's definition, not
imported: the rule docs/spark.md documents for other producers (``abs(hashCode(first key)) % queues``).
"""

from __future__ import annotations

import pytest
from conftest import QUEUES, create_topic
from pyspark.sql import functions as F
from servers import unique

from spark_mq.client.sync_api import SyncMQClientAPI


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    utf16 = s.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        h = (31 * h + int.from_bytes(utf16[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def expected_queue(key: str, queues: int = QUEUES) -> int:
    """RocketMQ's SelectMessageQueueByHash: ``abs(hashCode % n)``, over the sorted writable queues."""
    return abs(java_string_hash(key)) % queues


def _read(spark, cluster, topic):
    return spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic).load()


def _writer(df, cluster, topic=None):
    writer = df.write.format("spark_mq").mode("append").option("namesrv", cluster.namesrv)
    return writer.option("topic", topic) if topic else writer


def _stored(cluster, topic) -> int:
    with SyncMQClientAPI() as api:
        return sum(api.get_max_offset(cluster.broker.addr, topic, q) for q in range(QUEUES))


def test_java_hash_reference_values():
    # known Java values: "hello".hashCode() and the string whose hashCode is Integer.MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert expected_queue("polygenelubricants") == 0  # Java: MIN_VALUE % 4 == 0, no Math.abs overflow


def test_topic_column_sends_each_row_to_its_topic(spark, cluster):
    topics = [unique("spark_sink_multi") for _ in range(3)]
    for t in topics:
        create_topic(cluster, t)
    rows = [(f"row-{i}", topics[i % 3] if i % 5 else topics[2]) for i in range(150)]
    df = spark.createDataFrame(rows, "body string, topic string").repartition(3)
    _writer(df, cluster).save()  # no topic option: each row's topic column

    for t in topics:
        want = sorted(body for body, topic in rows if topic == t)
        got = sorted(bytes(r.body).decode() for r in _read(spark, cluster, t).select("body").collect())
        assert got == want, t
        assert _stored(cluster, t) == len(want)


def test_topic_option_overrides_the_column_and_nulls_need_it(spark, cluster):
    named, option = unique("spark_sink_named"), unique("spark_sink_opt")
    create_topic(cluster, named)
    create_topic(cluster, option)
    df = spark.createDataFrame([("a", named), ("b", None)], "body string, topic string").coalesce(1)
    with pytest.raises(Exception, match="null 'topic'"):
        _writer(df, cluster).save()
    assert _stored(cluster, named) == 0  # the rows' Arrow batch was refused before any of it was sent

    _writer(df, cluster, option).save()  # as Kafka's `topic` option: every row goes to it
    assert sorted(bytes(r.body) for r in _read(spark, cluster, option).select("body").collect()) == [b"a", b"b"]
    assert _stored(cluster, named) == 0

    with pytest.raises(Exception, match=r"needs the topic to write to: \.option\('topic'"):
        _writer(spark.createDataFrame([("a",)], "body string"), cluster).save()


def test_same_key_same_queue_in_order(spark, cluster):
    topic = unique("spark_sink_keys")
    create_topic(cluster, topic)
    keys = [f"order-{k}" for k in range(12)] + ["订单-7", "polygenelubricants"]
    rows = [(f"{keys[i % len(keys)]}|{i}", keys[i % len(keys)], i) for i in range(700)]
    df = (spark.createDataFrame(rows, "body string, keys string, seq long")
          .repartition(3, "keys").sortWithinPartitions("seq"))  # each key's rows in one task, in seq order
    _writer(df, cluster, topic).option("batchSize", "50").save()

    got = _read(spark, cluster, topic).select("body", "queue_id", "queue_offset").collect()
    assert len(got) == len(rows)
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for r in got:
        key, seq = bytes(r.body).decode().split("|")
        by_key.setdefault(key, []).append((r.queue_offset, int(seq), r.queue_id))
    for key, stored in by_key.items():
        assert {q for _, _, q in stored} == {expected_queue(key)}, key
        seqs = [seq for _, seq, _ in sorted(stored)]
        assert seqs == sorted(seqs), key  # the queue holds the key's rows in the order they were written
    assert len({expected_queue(k) for k in keys}) > 1  # the keys do spread


def test_first_key_of_an_array_routes_and_queue_id_wins(spark, cluster):
    topic = unique("spark_sink_keyarr")
    create_topic(cluster, topic)
    rows = [("a", ["", "k-a", "other"], None), ("b", None, None), ("c", ["k-c"], 3)]
    df = spark.createDataFrame(rows, "body string, keys array<string>, queue_id int")
    _writer(df.coalesce(1), cluster, topic).save()
    got = {bytes(r.body).decode(): r for r in _read(spark, cluster, topic).select("body", "keys", "queue_id").collect()}
    assert got["a"].queue_id == expected_queue("k-a")
    assert got["a"].keys == "k-a other"
    assert got["c"].queue_id == 3  # queue_id over the key's hash
    assert got["b"].keys is None


def test_a_read_written_back_after_with_column(spark, cluster, produced):
    """Every column of a spark_mq read is accepted: the sink's own (body, topic, keys, tags,
    properties, queue_id) are used, the others (msg_id, timestamps, ...) ignored."""
    target = unique("spark_sink_copy")
    create_topic(cluster, target)
    source = _read(spark, cluster, produced.topic)
    copied = source.withColumn("body", F.concat(F.col("body"), F.lit(b"!")))
    _writer(copied, cluster, target).save()

    before = {r.uniq_key: r for r in source.collect()}
    after = _read(spark, cluster, target).collect()
    assert len(after) == len(before) == len(produced.results)
    by_body = {bytes(r.body): r for r in after}
    for old in before.values():
        new = by_body[bytes(old.body) + b"!"]
        assert (new.queue_id, new.keys, new.tags) == (old.queue_id, old.keys, old.tags)
        assert new.properties.get("n") == old.properties.get("n")
        assert new.uniq_key != old.uniq_key  # a new message: a fresh UNIQ_KEY
    assert _stored(cluster, produced.topic) == len(produced.results)  # nothing went back to the source topic


def test_an_unknown_topic_or_queue_fails_the_batch_before_any_row_is_sent(spark, cluster):
    known = unique("spark_sink_known")
    create_topic(cluster, known)
    missing = unique("spark_sink_missing")
    df = spark.createDataFrame([("a", known, None), ("b", missing, None)], "body string, topic string, queue_id int")
    with pytest.raises(Exception, match=f"topic '{missing}' is not known"):
        _writer(df.coalesce(1), cluster).save()
    df = spark.createDataFrame([("a", known, 1), ("b", known, QUEUES)], "body string, topic string, queue_id int")
    with pytest.raises(Exception, match=f"queue_id {QUEUES} is not a writable queue of topic {known}"):
        _writer(df.coalesce(1), cluster).save()
    assert _stored(cluster, known) == 0
