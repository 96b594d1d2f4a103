"""The ``spark_mq`` source from SQL (``CREATE TABLE`` / ``CREATE TEMPORARY VIEW ... USING spark_mq``) and from a
Spark Connect client, against a real NameServer and broker.

The Connect server is Spark's own (``SparkConnectService``), started on a free loopback port inside the test
session's JVM; the client runs in its own process (:mod:`connect_client`), as a Connect user's would: a
Connect session switches ``pyspark``'s functions to Connect for the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MESSAGES, create_topic
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from servers import free_port, unique

from spark_mq.common.errors import ConfigError
from spark_mq.spark.options import SourceOptions, table_options
from spark_mq.spark.provider import SparkMQDataSource
from spark_mq.spark.schema import options_of_table
from spark_mq.spark.session import FILTER_PUSHDOWN_CONF

CLIENT = Path(__file__).with_name("connect_client.py")
CLIENT_TIMEOUT_S = 240
QUERY_TIMEOUT_S = 120


def test_options_of_a_catalog_table():
    """What Spark passes a catalog table's source: the OPTIONS, their option.<name> copies and its reserved table
    properties; a clash between an option and its copy, or no option at all, is a ConfigError saying what to do."""
    table = {"namesrv": "127.0.0.1:9876", "topic": "Orders", "option.namesrv": "127.0.0.1:9876",
             "option.topic": "Orders", "provider": "spark_mq", "owner": "root", "location": "file:/w/orders",
             "path": "file:/w/orders", "is_managed_location": "true"}
    opts = SourceOptions.parse(table)
    assert (opts.namesrv, opts.topics) == ("127.0.0.1:9876", ("Orders",))
    with pytest.raises(ConfigError, match="'topic' is given twice"):
        SourceOptions.parse({**table, "option.topic": "Other"})
    with pytest.raises(ConfigError, match="without the column list"):
        SourceOptions.parse({})
    # the options CREATE TABLE stores with the table, in the schema the source gives it; a load()'s schema has none
    stored = table_options(table)
    assert stored == {"namesrv": "127.0.0.1:9876", "topic": "Orders"}
    assert options_of_table(SparkMQDataSource(table).schema()) == stored
    load = {"namesrv": "127.0.0.1:9876", "topic": "Orders"}
    assert table_options(load) is None and options_of_table(SparkMQDataSource(load).schema()) == {}


def _sorted_rows(df):
    return [(r.queue_id, r.queue_offset, r.tags) for r in df.orderBy("queue_id", "queue_offset").collect()]


def test_create_temporary_view_using_spark_mq_then_select(spark, cluster, produced):
    view = unique("orders")
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING spark_mq "
              f"OPTIONS (namesrv '{cluster.namesrv}', topic '{produced.topic}')")
    try:
        got = spark.sql(f"SELECT queue_id, queue_offset, tags FROM {view} WHERE tags = 'tagA'")
        direct = (spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", produced.topic)
                  .load().where(F.col("tags") == "tagA"))
        assert _sorted_rows(got) == _sorted_rows(direct) and len(_sorted_rows(got)) > 0
        assert spark.sql(f"SELECT count(*) AS n FROM {view}").first().n == MESSAGES
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {view}")


def test_create_table_using_spark_mq_then_select(spark, cluster, produced, tmp_path):
    """A catalog table reads its topic as the view does: from SQL, from spark.read.table with an option of the
    query's own on top of the table's, and as a stream (PySpark 4.2 plans these with the table's stored schema
    only, which is where the source keeps the table's options)."""
    table = unique("orders")
    spark.sql(f"CREATE TABLE {table} USING spark_mq OPTIONS (namesrv '{cluster.namesrv}', topic '{produced.topic}')")
    try:
        direct = (spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", produced.topic)
                  .load().where(F.col("tags") == "tagA"))
        expected = _sorted_rows(direct)
        assert len(expected) > 0
        for pushdown in ("false", "true"):  # the reader planned by Spark's pushdown worker gets the options too
            spark.conf.set(FILTER_PUSHDOWN_CONF, pushdown)
            try:
                got = spark.sql(f"SELECT queue_id, queue_offset, tags FROM {table} WHERE tags = 'tagA'")
                assert _sorted_rows(got) == expected
            finally:
                spark.conf.unset(FILTER_PUSHDOWN_CONF)
        assert spark.sql(f"SELECT count(*) AS n FROM {table}").first().n == MESSAGES
        assert spark.read.option("tags", "tagA").table(table).count() == len(expected)
        sink = unique("orders_stream")
        query = (spark.readStream.option("startingOffsets", "earliest").table(table).writeStream.format("memory")
                 .queryName(sink).option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True)
                 .start())
        assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
        assert query.exception() is None
        assert spark.sql(f"SELECT count(*) AS n FROM {sink}").first().n == MESSAGES
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_insert_into_a_spark_mq_table_says_it_is_not_supported(spark, cluster, produced):
    """PySpark 4.2 gives a Python data source's writer the write's options only (none for INSERT INTO), and the
    column metadata it gets is the query's (the table read from), so the sink cannot tell where to send: it says
    so, and how to write instead, and sends nothing."""
    table = unique("orders")
    spark.sql(f"CREATE TABLE {table} USING spark_mq OPTIONS (namesrv '{cluster.namesrv}', topic '{produced.topic}')")
    try:
        with pytest.raises(AnalysisException, match="INSERT INTO a spark_mq table is not supported"):
            spark.sql(f"INSERT INTO {table} SELECT * FROM {table}")
        assert spark.sql(f"SELECT count(*) AS n FROM {table}").first().n == MESSAGES
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_table_created_with_a_column_list_says_to_create_it_without(spark, cluster, produced):
    """With a column list, PySpark 4.2 stores the table without asking the source (V2SessionCatalog.createTable
    calls getTable, not inferSchema), so its options are nowhere a read can see: the SELECT says what to do."""
    table = unique("orders")
    spark.sql(f"CREATE TABLE {table} (body BINARY) USING spark_mq "
              f"OPTIONS (namesrv '{cluster.namesrv}', topic '{produced.topic}')")
    try:
        with pytest.raises(AnalysisException, match="without the column list"):
            spark.sql(f"SELECT count(*) FROM {table}").collect()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture(scope="module")
def connect_url(spark):
    """sc://127.0.0.1:<port> of a Spark Connect server in the test session's JVM."""
    port = free_port()
    sc = spark.sparkContext._jsc.sc()
    sc.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
    sc.conf().set("spark.connect.grpc.binding.port", str(port))
    service = spark.sparkContext._jvm.org.apache.spark.sql.connect.service.SparkConnectService
    service.start(sc)
    yield f"sc://127.0.0.1:{port}"
    service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())


def test_reads_streams_and_writes_from_spark_connect(spark, cluster, produced, connect_url, tmp_path):
    out_topic = unique("connect_out")
    create_topic(cluster, out_topic)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT.parent), *sys.path])}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    done = subprocess.run([sys.executable, str(CLIENT), connect_url, cluster.namesrv, produced.topic, out_topic,
                           str(tmp_path / "chk")], capture_output=True, text=True, env=env, timeout=CLIENT_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["errors"] == {}
    assert got["session"] == "pyspark.sql.connect.session"
    direct = spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", produced.topic).load()
    assert [tuple(r) for r in got["rows"]] == _sorted_rows(direct)
    tag_a = direct.where(F.col("tags") == "tagA").count()
    assert got["tagA"] == tag_a and got["sql_tagA"] == tag_a
    assert got["registered"] == MESSAGES
    assert got["written"] == MESSAGES
    assert got["streamed"] == MESSAGES
    assert got["streamed_to_sink"] == 2 * MESSAGES  # the batch write's copy and the stream's
