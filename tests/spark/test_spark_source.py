"""``spark.read.format("spark_mq")`` against a real NameServer and broker, compared row by row
(every column) with what was produced, read back one by one by id (VIEW_MESSAGE_BY_ID)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from chispa import assert_df_equality
from conftest import MESSAGES, QUEUES, create_topic
from servers import free_addr, unique

from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import unpack_host
from spark_mq.spark.schema import SCHEMA_DDL, SPARK_SCHEMA

BROKER = "broker-a"


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None)


@pytest.fixture(scope="module")
def expected_rows(cluster, produced):
    """Every produced message as a row of the source's schema, from the by-id lookup path."""
    rows = []
    with SyncMQClientAPI() as api:
        for r in produced.results:
            m = api.view_message_by_id(cluster.broker.addr, r.offset_msg_id)
            props = m.properties
            rows.append((m.topic, r.broker_name, m.queue_id, m.queue_offset, m.physical_offset, r.offset_msg_id,
                         props.get("UNIQ_KEY"), props.get("KEYS"), props.get("TAGS"), props, m.body,
                         _ts(m.born_timestamp), _ts(m.store_timestamp), unpack_host(m.born_host),
                         unpack_host(m.store_host), m.reconsume_times, m.sys_flag, m.flag))
    return sorted(rows, key=lambda row: (row[2], row[3]))


def _read(spark, cluster, topic, **options):
    reader = spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _expected_df(spark, rows):
    return spark.createDataFrame(rows, SPARK_SCHEMA)


def _sorted(df):
    return df.orderBy("queue_id", "queue_offset")


def test_schema_ddl_matches_spark_schema(spark):
    from pyspark.sql.types import StructType

    assert StructType.fromDDL(SCHEMA_DDL) == SPARK_SCHEMA


def test_reads_every_message_exactly_without_register(spark, cluster, produced, expected_rows):
    """No register call anywhere: Spark found pyspark_spark_mq.DefaultSource by itself."""
    df = _read(spark, cluster, produced.topic)
    assert df.schema == SPARK_SCHEMA
    assert {r[2] for r in expected_rows} == set(range(QUEUES))
    assert_df_equality(_sorted(df), _expected_df(spark, expected_rows))


def test_ending_and_starting_offsets_json(spark, cluster, produced, expected_rows):
    starting = {f"{BROKER}:0": 2, f"{BROKER}:1": -2, f"{BROKER}:3": 5}
    ending = {f"{BROKER}:0": 6, f"{BROKER}:2": 3, f"{BROKER}:3": -1}
    df = _read(spark, cluster, produced.topic, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    lo = {0: 2, 1: 0, 2: 0, 3: 5}
    hi = {0: 6, 1: 10**9, 2: 3, 3: 10**9}
    want = [r for r in expected_rows if lo[r[2]] <= r[3] < hi[r[2]]]
    assert len(want) < MESSAGES
    assert_df_equality(_sorted(df), _expected_df(spark, want))


def test_tags_filter(spark, cluster, produced, expected_rows):
    df = _read(spark, cluster, produced.topic, tags="tagA || tagC")
    want = [r for r in expected_rows if r[8] in ("tagA", "tagC")]
    assert 0 < len(want) < MESSAGES
    assert_df_equality(_sorted(df), _expected_df(spark, want))


def test_max_messages_per_partition_splits_ranges(spark, cluster, produced, expected_rows):
    df = _read(spark, cluster, produced.topic, maxMessagesPerPartition="4", pullBatchSize="3")
    per_queue = MESSAGES // QUEUES
    assert df.rdd.getNumPartitions() == QUEUES * -(-per_queue // 4)
    assert df.count() == MESSAGES
    assert_df_equality(_sorted(df), _expected_df(spark, expected_rows))


def test_empty_topic_reads_nothing(spark, cluster):
    topic = unique("spark_empty")
    create_topic(cluster, topic, 2)
    df = _read(spark, cluster, topic)
    assert df.collect() == []


@pytest.mark.parametrize(("options", "message"), [
    ({"bogus": "1"}, "unknown option 'bogus'"),
    ({"startingOffsets": '{"broker-a:0": '}, "not valid JSON"),
    ({"startingOffsets": '{"broker-a": 3}'}, 'is not "<broker>:<queueId>"'),
    ({"endingOffsets": '{"broker-a:0": "x"}'}, "must be an integer"),
    ({"maxMessagesPerPartition": "0"}, "'maxMessagesPerPartition' must be an integer >= 1"),
    ({"pullBatchSize": "lots"}, "'pullBatchSize' must be an integer"),
    ({"startingOffsets": "committed"}, "needs option 'group'"),
])
def test_bad_options_fail_at_load(spark, cluster, produced, options, message):
    with pytest.raises(Exception, match=message):
        _read(spark, cluster, produced.topic, **options)


def test_missing_topic_fails_at_load(spark, cluster):
    with pytest.raises(Exception, match="option 'topic' is required"):
        spark.read.format("spark_mq").option("namesrv", cluster.namesrv).load()


def test_unknown_queue_in_offsets_json(spark, cluster, produced):
    with pytest.raises(Exception, match=r"names queue.*broker-a:9"):
        _read(spark, cluster, produced.topic, endingOffsets='{"broker-a:9": 1}').collect()


def test_unreachable_namesrv_is_a_clear_error(spark):
    df_reader = spark.read.format("spark_mq").option("namesrv", free_addr()).option("topic", "t")
    with pytest.raises(Exception, match="cannot reach any NameServer"):
        df_reader.load().collect()


def test_unknown_topic_is_a_clear_error(spark, cluster):
    with pytest.raises(Exception, match="is not known to the NameServer"):
        _read(spark, cluster, unique("no_such_topic")).collect()


def test_register_also_works(spark, cluster, produced):
    from spark_mq.spark import register

    register(spark)
    assert _read(spark, cluster, produced.topic, tags="tagB").count() == sum(
        1 for i in range(MESSAGES) if i % 7 and i % 3 == 1)


def test_latest_start_is_a_stream_option_not_a_batch_one(spark, cluster, produced):
    stream = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv)
              .option("topic", produced.topic).option("startingOffsets", "latest").load())
    assert stream.isStreaming
    with pytest.raises(Exception, match="empty batch read"):
        _read(spark, cluster, produced.topic, startingOffsets="latest").collect()
