"""Spark integration: the ``spark_mq`` data source (``spark.read.format("spark_mq")``) and the
Arrow decoding of message units it shares with the archive and replay."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``spark_mq`` data source with ``spark`` (not needed when the ``pyspark_spark_mq``
    package is installed: Spark finds its ``DefaultSource`` by itself)."""
    from spark_mq.spark.source import SparkMQDataSource

    spark.dataSource.register(SparkMQDataSource)
