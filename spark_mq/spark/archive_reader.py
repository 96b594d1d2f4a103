"""A topic's archive as a Spark DataFrame with the ``spark_mq`` source's schema (no Delta jars needed).

Spark's own Parquet reader over the files the archive lists (:meth:`~spark_mq.tiered.archive.Archive.data_files`),
so files of an append that crashed before its commit or rename are never seen;
:mod:`spark_mq.tiered.reader` reads a queue's range as Arrow.

Thread-safety: pure functions; each call opens what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from spark_mq.spark.schema import SPARK_SCHEMA
from spark_mq.tiered.archive import Archive, open_archive


def read_archive(spark: SparkSession, root: str, topic: str, *, fmt: str | None = None) -> DataFrame:
    """The topic's archive as a DataFrame with the ``spark_mq`` source's schema (``SPARK_SCHEMA``).

    Spark's own Parquet reader over the archive's data files, with the table directory as
    ``basePath`` so ``broker_name`` and ``queue_id`` come back from the Hive-style paths typed by the
    schema. For Delta the files are the current version's (read from the log with deltalake); where
    the Delta Spark jars are installed, ``spark.read.format("delta")`` reads the same table."""
    archive = open_archive(root, topic, fmt)
    return read_archive_files(spark, archive, archive.data_files())


def read_archive_files(spark: SparkSession, archive: Archive, files: Sequence[str]) -> DataFrame:
    """Some of ``archive``'s data files (e.g. chosen by statistics) as a DataFrame in ``SPARK_SCHEMA``."""
    if not files:
        return spark.createDataFrame([], SPARK_SCHEMA)
    df = spark.read.schema(SPARK_SCHEMA).option("basePath", archive.uri).parquet(*files)
    return df.select(*SPARK_SCHEMA.names)
