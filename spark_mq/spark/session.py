"""The SparkSession of the ``jobs/`` entry points: spark-submit's master when it gives one, else a
``local[2]`` session bound to loopback, with executors running this interpreter (which has the
``spark_mq`` package, so ``format("spark_mq")`` resolves in them too). Python data source filter
pushdown is on (Spark's default is off), so the jobs' ``where`` clauses reach the brokers
(:mod:`spark_mq.spark.pushdown`).

Two settings make the source cheaper to read (issue 27). A local session whose JVM this starts gets a
``SPARK_HOME`` whose Python processes import the installed, compiled pyspark rather than ``pyspark.zip``
(:mod:`spark_mq.spark.spark_home`). And Arrow's per-access checks are off (:data:`ARROW_JVM_FLAGS`, in the
driver's JVM and the executors'): Spark turns each Arrow batch a Python source yields into rows on the JVM,
value by value, and those bounds and null checks were ~10 % of the JVM's time reading the full schema;
Spark checks for nulls itself before it reads a value. A flag the user already set (``-D...`` in
``spark.driver.extraJavaOptions`` or ``spark.executor.extraJavaOptions``) is left as set.
"""

from __future__ import annotations

import os
import sys

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from spark_mq.spark.spark_home import local_spark_home

LOCAL_MASTER = "local[2]"
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
# Java system properties Arrow reads once, when its classes load (BoundsChecking, NullCheckingForGet)
ARROW_JVM_FLAGS = {"arrow.enable_unsafe_memory_access": "true", "arrow.enable_null_check_for_get": "false"}


def build_session(app_name: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if SparkContext._gateway is None:
        home = local_spark_home()
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
    SparkContext._ensure_initialized()  # launches the JVM (or joins spark-submit's) so SparkConf sees its settings
    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    if not conf.contains("spark.master"):
        builder = (builder.master(LOCAL_MASTER).config("spark.ui.enabled", "false")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = (builder.config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config(FILTER_PUSHDOWN_CONF, "true")
             .config(EXECUTOR_JAVA_OPTIONS, _with_arrow_flags(conf.get(EXECUTOR_JAVA_OPTIONS, "")))
             .getOrCreate())
    _set_arrow_flags_in_driver()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _with_arrow_flags(java_options: str) -> str:
    """``java_options`` with a ``-D`` for each of :data:`ARROW_JVM_FLAGS` it does not set."""
    added = [f"-D{key}={value}" for key, value in ARROW_JVM_FLAGS.items() if f"-D{key}=" not in java_options]
    return " ".join([java_options, *added]).strip()


def _set_arrow_flags_in_driver() -> None:
    """:data:`ARROW_JVM_FLAGS` as system properties of the driver's JVM (where a local session's executors
    run), unless set: in time when Arrow's classes have not loaded yet, as in a session's first query."""
    system = SparkContext._jvm.java.lang.System
    for key, value in ARROW_JVM_FLAGS.items():
        if system.getProperty(key) is None:
            system.setProperty(key, value)
