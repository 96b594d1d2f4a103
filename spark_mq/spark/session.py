"""The SparkSession of the ``jobs/`` entry points: spark-submit's master when it gives one, else a
``local[2]`` session bound to loopback, with executors running this interpreter (which has the
``spark_mq`` package, so ``format("spark_mq")`` resolves in them too). Python data source filter
pushdown is on (Spark's default is off), so the jobs' ``where`` clauses reach the brokers
(:mod:`spark_mq.spark.pushdown`)."""

from __future__ import annotations

import os
import sys

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def build_session(app_name: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    SparkContext._ensure_initialized()  # launches the JVM (or joins spark-submit's) so SparkConf sees its settings
    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    if not conf.contains("spark.master"):
        builder = (builder.master(LOCAL_MASTER).config("spark.ui.enabled", "false")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = (builder.config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config(FILTER_PUSHDOWN_CONF, "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark
