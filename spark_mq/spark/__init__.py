"""Spark integration: the ``spark_mq`` data source (``spark.read.format("spark_mq")``, ``readStream``,
``write``, ``writeStream``), laid out as Spark's Kafka source: ``provider`` (the DataSource), ``batch``
(the batch reader), ``stream`` (the micro-batch stream), ``partitions`` (planning), ``offsets``,
``options``, ``sink``, ``group_member`` (the driver as a consumer-group member); plus the DataFrame
side of the archive (``archive_reader``, ``replay``) and ``session`` for the jobs. The Arrow decoding
and queue reads it shares with the offload are in :mod:`spark_mq.arrow`, the archive in
:mod:`spark_mq.tiered`.
"""

from spark_mq.spark.provider import SparkMQDataSource, register

__all__ = ["SparkMQDataSource", "register"]
