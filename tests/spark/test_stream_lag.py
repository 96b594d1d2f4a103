"""A spark_mq stream's lag from Spark's own progress (``spark_mq.spark.progress``): per queue, the
broker max offset Spark shows as ``latestOffset`` minus the batch's ``endOffset``."""

from __future__ import annotations

import json

from conftest import MESSAGES
from servers import unique

from spark_mq.spark.progress import queue_lag, queue_offsets, source_lag

PER_TRIGGER = 25


def test_lag_by_queue_flat_and_by_topic():
    assert queue_lag('{"b:0": 5, "b:1": 7}', {"b:0": 9, "b:1": 7, "b:2": 4}) == {"b:0": 4, "b:1": 0}
    assert queue_lag({"T": {"b:0": 5}, "U": {"b:0": 1}}, json.dumps({"T": {"b:0": 8}, "U": {"b:0": 1}})) == {
        "T/b:0": 3, "U/b:0": 0}
    assert queue_lag({"b:0": 5}, {"b:0": 2}) == {"b:0": 0}  # the broker went back below the batch: no negative lag
    assert queue_lag({"b:0": 5}, "null") == {} and queue_lag(None, {"b:0": 1}) == {}
    assert queue_offsets("null") is None


def test_streaming_query_progress_shows_the_lag(spark, cluster, produced, tmp_path):
    name = unique("lag_query")
    query = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", produced.topic)
             .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", str(PER_TRIGGER)).load()
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    progress = [p for p in query.recentProgress if p.numInputRows]
    lags = [sum(source_lag(p.sources[0]).values()) for p in progress]
    expected = [MESSAGES - PER_TRIGGER * (i + 1) for i in range(MESSAGES // PER_TRIGGER)] + [0]
    assert lags == expected  # 60 messages at 25 per trigger: 35, 10, 0 behind
    assert spark.table(name).count() == MESSAGES
