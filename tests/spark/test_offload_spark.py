"""The archive read by Spark: ``spark-mq offload --all`` (in process) into a Delta table or Parquet
files, then ``read_archive`` and Spark's own Parquet reader give back exactly what the ``spark_mq``
source reads from the broker, column for column, in the source's schema."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from conftest import create_topic
from servers import unique

from spark_mq.cli import main as cli_main
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.common.message import Message
from spark_mq.spark.archive_reader import read_archive
from spark_mq.spark.schema import SPARK_SCHEMA
from spark_mq.tiered.archive import FORMAT_DELTA, FORMATS, open_archive

ORDER = ["broker_name", "queue_id", "queue_offset"]


def produce(namesrv: str, topic: str, count: int) -> None:
    with SyncProducer(unique("offload_spark_pg"), ClientConfig(namesrv)) as producer:
        for i in range(count):
            producer.send(Message(topic, f"body-{i}".encode() + bytes([i % 256]) * (i % 9),
                                  tags=f"t{i % 3}" if i % 4 else None, keys=[f"k{i}"] if i % 2 else None,
                                  properties={"n": str(i)} if i % 3 else {}, flag=i % 2))


@pytest.mark.parametrize("fmt", FORMATS)
def test_archive_reads_back_in_spark_as_the_broker_serves_it(spark, cluster, tmp_path, capsys, fmt):
    topic = unique(f"offload_spark_{fmt}")
    create_topic(cluster, topic)
    produce(cluster.namesrv, topic, 48)
    assert cli_main(["offload", "--namesrv", cluster.namesrv, "--topic", topic, "--root", str(tmp_path),
                     "--format", fmt, "--all"]) == 0
    assert "done: 48 message(s)" in capsys.readouterr().out

    hot = spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic).load()
    archived = read_archive(spark, str(tmp_path), topic)
    assert archived.schema == SPARK_SCHEMA
    assert_df_equality(archived.orderBy(*ORDER), hot.orderBy(*ORDER))

    # Spark's Parquet reader on its own: partition discovery from the paths, types inferred
    archive = open_archive(str(tmp_path), topic)
    raw = (spark.read.option("basePath", archive.uri).parquet(*archive.data_files()) if fmt == FORMAT_DELTA
           else spark.read.parquet(archive.uri))
    assert sorted(raw.columns) == sorted(SPARK_SCHEMA.names)
    assert_df_equality(raw.select(*SPARK_SCHEMA.names).orderBy(*ORDER), hot.orderBy(*ORDER), ignore_nullable=True)


def test_a_missing_archive_reads_as_an_empty_frame(spark, tmp_path):
    df = read_archive(spark, str(tmp_path), "NeverOffloaded")
    assert df.schema == SPARK_SCHEMA and df.count() == 0
