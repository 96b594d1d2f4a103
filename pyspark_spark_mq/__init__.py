"""Makes ``spark.read.format("spark_mq")`` work with no register call.

PySpark 4.2 (``pyspark/sql/worker/lookup_data_sources.py``) imports every top-level module whose
name starts with ``pyspark_`` on the Python path of its workers, and registers the module's
``DefaultSource`` (a ``DataSource`` subclass) under ``DefaultSource.name()``.
"""

from spark_mq.spark.provider import SparkMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
