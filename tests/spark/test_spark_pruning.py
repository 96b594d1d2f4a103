"""Column pruning of the ``spark_mq`` source: ``.schema(...)`` naming some of its columns reads just those
(batch and stream), with the same values as those columns of a full read; a schema the source cannot give
fails when the query starts, with a message listing the valid columns and types."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from spark_mq.spark.schema import SCHEMA_DDL

QUERY_TIMEOUT_S = 60
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PRUNED = "body BINARY, store_timestamp TIMESTAMP, queue_id INT, queue_offset BIGINT"


def _reader(spark, cluster, topic, schema=None, stream=False, **options):
    reader = (spark.readStream if stream else spark.read).format("spark_mq")
    if schema is not None:
        reader = reader.schema(schema)
    return reader.options(namesrv=cluster.namesrv, topic=topic, **options)


def _full(spark, cluster, topic, columns, **options):
    return _reader(spark, cluster, topic, **options).load().select(*columns).orderBy("queue_id", "queue_offset")


@pytest.mark.parametrize("schema", [
    PRUNED,
    "queue_offset BIGINT, tags STRING, properties MAP<STRING, STRING>, queue_id INT",  # the property columns
    "msg_id STRING, store_host STRING, queue_id INT, queue_offset BIGINT, flag INT",
])
def test_pruned_batch_read_equals_those_columns_of_a_full_read(spark, cluster, produced, schema):
    df = _reader(spark, cluster, produced.topic, schema).load()
    assert df.schema.simpleString() == spark.createDataFrame([], schema).schema.simpleString()
    got = df.orderBy("queue_id", "queue_offset")
    assert_df_equality(got, _full(spark, cluster, produced.topic, df.columns))
    assert got.count() > 0


def test_pruned_read_with_a_tag_filter_not_among_the_columns(spark, cluster, produced):
    """The reader still checks tags exactly when the schema leaves the tags column out."""
    df = _reader(spark, cluster, produced.topic, PRUNED, tags="tagB || tagC").load().orderBy("queue_id", "queue_offset")
    assert_df_equality(df, _full(spark, cluster, produced.topic, df.columns, tags="tagB || tagC"))


@pytest.mark.parametrize("where", ["keys = 'k5 key-0'", "queue_id = 2 AND tags IN ('tagA', 'tagC')"])
def test_pruned_read_with_pushed_filters(spark, cluster, produced, where):
    """With filter pushdown on (a keys equality, queue pruning and broker-side tags), a pruned read gives
    the same rows as the same columns of a full read without pushdown."""
    schema = "keys STRING, body BINARY, queue_id INT, queue_offset BIGINT, tags STRING"
    try:
        spark.conf.set(PUSHDOWN_CONF, "true")
        got = _reader(spark, cluster, produced.topic, schema).load().where(where).orderBy("queue_id", "queue_offset")
        got = spark.createDataFrame(got.collect(), got.schema)
    finally:
        spark.conf.unset(PUSHDOWN_CONF)
    expected = _full(spark, cluster, produced.topic, got.columns).where(where)
    assert_df_equality(got, expected)
    assert got.count() > 0


def test_pruned_stream_equals_those_columns_of_a_full_read(spark, cluster, produced, tmp_path):
    stream = _reader(spark, cluster, produced.topic, PRUNED, stream=True, startingOffsets="earliest").load()
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None
    got = spark.read.parquet(str(tmp_path / "out")).orderBy("queue_id", "queue_offset")
    assert_df_equality(got, _full(spark, cluster, produced.topic, stream.columns))


UNGIVABLE_SCHEMAS = [
    ("body BINARY, value BINARY", "unknown column 'value'"),
    ("body STRING, queue_id INT", "column 'body' is BINARY, not STRING"),
    ("store_timestamp BIGINT", "column 'store_timestamp' is TIMESTAMP, not BIGINT"),
    ("properties MAP<STRING, BINARY>", "column 'properties' is MAP<STRING, STRING>, not MAP<STRING, BINARY>"),
    ("queue_id INT NOT NULL", "column 'queue_id' must be nullable"),
]


# every kind of problem in a batch read; a streaming query (a query start of its own, seconds each) with one and
# two of them: the stream's start runs the same check
@pytest.mark.parametrize(("schema", "problem", "stream"), [
    *((schema, problem, False) for schema, problem in UNGIVABLE_SCHEMAS),
    *((schema, problem, True) for schema, problem in UNGIVABLE_SCHEMAS[:2]),
])
def test_a_schema_the_source_cannot_give_fails_at_query_start(spark, cluster, produced, tmp_path, schema, problem,
                                                              stream):
    df = _reader(spark, cluster, produced.topic, schema, stream=stream, startingOffsets="earliest").load()
    with pytest.raises(Exception, match="cannot give the schema") as failure:
        if stream:
            query = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(QUERY_TIMEOUT_S)
            raise query.exception() or AssertionError("the query ran")
        df.collect()
    message = str(failure.value)
    assert problem in message
    assert SCHEMA_DDL in message  # the valid columns and their types
