"""Spark integration: the ``spark_mq`` data source (``spark.read.format("spark_mq")``, ``readStream``,
``write``, ``writeStream``), laid out as Spark's Kafka source: ``provider`` (the DataSource), ``batch``
(the batch reader), ``stream`` (the micro-batch stream), ``partitions`` (planning), ``offsets``,
``options``, ``sink``, ``group_member`` (the driver as a consumer-group member); plus the DataFrame
side of the archive (``archive_reader``, ``replay``) and ``session`` for the jobs. The Arrow decoding
and queue reads it shares with the offload are in :mod:`spark_mq.arrow`, the archive in
:mod:`spark_mq.tiered`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SparkMQDataSource", "register"]


def __getattr__(name: str) -> Any:
    """``SparkMQDataSource`` and ``register``, imported on first use: a Python process of Spark that needs one
    module of the package (the stream's runner, a planner) does not import the others (the sink, the batch
    reader) through this package's ``__init__``."""
    if name in __all__:
        # lazy import: importing one module of the package must not load them all
        from spark_mq.spark import provider

        return getattr(provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
