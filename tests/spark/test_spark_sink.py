"""``df.write.format("spark_mq")`` / ``writeStream.format("spark_mq")`` against a real NameServer and
broker, read back with the spark_mq batch source."""

from __future__ import annotations

import pytest
from conftest import QUEUES, create_topic
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from servers import unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError
from spark_mq.spark.options import SinkOptions
from spark_mq.spark.sink import validate_sink_schema

N = 200
_S = StringType()


def _write(df, cluster, topic, **options):
    writer = df.write.format("spark_mq").mode("append").option("namesrv", cluster.namesrv).option("topic", topic)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def _read(spark, cluster, topic):
    return spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic).load()


def _max_offsets(cluster, topic) -> list[int]:
    with SyncMQClientAPI() as api:
        return [api.get_max_offset(cluster.broker.addr, topic, q) for q in range(QUEUES)]


def test_write_then_read_back_every_row_once(spark, cluster):
    topic = unique("spark_sink")
    create_topic(cluster, topic)
    schema = StructType([StructField("body", BinaryType()), StructField("keys", ArrayType(_S)),
                         StructField("tags", _S), StructField("properties", MapType(_S, _S))])
    rows = [(f"row-{i}".encode(), [f"k{i}", f"g{i % 3}"] if i % 2 else None, f"t{i % 4}" if i % 5 else None,
             {"n": str(i)} if i % 3 else None) for i in range(N)]
    _write(spark.createDataFrame(rows, schema).repartition(3), cluster, topic, batchSize="17")

    got = _read(spark, cluster, topic).select("body", "keys", "tags", "properties", "queue_id").collect()
    assert len(got) == N
    by_body = {bytes(r.body): r for r in got}
    assert len(by_body) == N
    for body, keys, tags, props in rows:
        r = by_body[body]
        assert r.keys == (" ".join(keys) if keys else None)
        assert r.tags == tags
        assert r.properties.get("n") == (props or {}).get("n")
        assert r.properties["UNIQ_KEY"]
    # unrouted rows spread round robin over the queues
    assert len({r.queue_id for r in got}) == QUEUES
    assert sum(_max_offsets(cluster, topic)) == N


def test_string_body_and_queue_id_routes(spark, cluster):
    topic = unique("spark_sink_q")
    create_topic(cluster, topic)
    df = spark.range(40).select(F.concat(F.lit("s-"), F.col("id").cast("string")).alias("body"),
                                (F.col("id") % 2 + 1).cast("int").alias("queue_id"),
                                F.lit("a b").alias("keys"))
    _write(df, cluster, topic)
    got = _read(spark, cluster, topic).select("body", "queue_id", "keys").collect()
    assert sorted(bytes(r.body).decode() for r in got) == sorted(f"s-{i}" for i in range(40))
    for r in got:
        assert r.queue_id == int(bytes(r.body).decode()[2:]) % 2 + 1
        assert r.keys == "a b"
    assert _max_offsets(cluster, topic) == [0, 20, 20, 0]


@pytest.mark.parametrize(("columns", "message"), [
    ("CAST(id AS STRING) AS tags", "needs a column 'body'"),
    ("CAST(id AS INT) AS body", "column 'body' of the spark_mq sink must be BINARY or STRING, not INT"),
])
def test_bad_schema_fails_before_sending(spark, cluster, columns, message):
    topic = unique("spark_sink_bad")
    create_topic(cluster, topic)
    df = spark.range(5).selectExpr(*columns.split(", "))
    with pytest.raises(Exception, match=message):
        _write(df, cluster, topic)
    assert _max_offsets(cluster, topic) == [0] * QUEUES


def test_schema_and_options_validation_unit():
    with pytest.raises(ConfigError, match=r"'queue_id' .* must be INT"):
        validate_sink_schema(StructType([StructField("body", BinaryType()), StructField("queue_id", _S)]), "t")
    assert validate_sink_schema(StructType([StructField("body", _S), StructField("extra", _S),
                                            StructField("queue_id", IntegerType())]), "t") == ("body", "queue_id")
    with pytest.raises(ConfigError, match=r"needs the topic to write to: \.option\('topic', '<topic>'\) for every row, "
                                          r"or a STRING column 'topic'"):
        validate_sink_schema(StructType([StructField("body", _S)]), SinkOptions.parse({"namesrv": "h:1"}).topic)
    assert validate_sink_schema(StructType([StructField("body", _S), StructField("topic", _S)]), None) == (
        "body", "topic")
    with pytest.raises(ConfigError, match="unknown option 'group'"):
        SinkOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "group": "g"})
    opts = SinkOptions.parse({"NAMESRV": "127.0.0.1:9876", "topic": "t", "batchsize": "5", "producergroup": "pg"})
    assert (opts.batch_size, opts.producer_group) == (5, "pg")
    with pytest.raises(ConfigError, match="option 'producerGroup': group 'a b' has illegal characters"):
        SinkOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "producerGroup": "a b"})


def test_streaming_write_from_rate_source(spark, cluster, tmp_path):
    topic = unique("spark_sink_stream")
    create_topic(cluster, topic)
    stream = (spark.readStream.format("rate").option("rowsPerSecond", "50").load()
              .select(F.concat(F.lit("r-"), F.col("value").cast("string")).alias("body")))
    query = (stream.writeStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="500 milliseconds").start())
    try:
        wait_until(lambda: sum(_max_offsets(cluster, topic)) >= 20, timeout=90, interval=0.3,
                   what="20 rows written by the sink")
    finally:
        query.stop()
    assert query.exception() is None
    bodies = [bytes(r.body).decode() for r in _read(spark, cluster, topic).select("body").collect()]
    assert len(bodies) >= 20
    values = sorted(int(b[2:]) for b in bodies)
    assert values == list(range(len(values)))  # rate values 0..n-1, each exactly once
