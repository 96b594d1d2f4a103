"""Tiered storage: cold queue ranges offloaded from the brokers into one Delta or Parquet table per
topic, and read back without Spark or a JVM Delta reader.

``archive`` owns a topic's table (layout, exactly-once appends per queue, its archived end per queue),
``reader`` reads a queue's offset range of it as Arrow, ``lookup`` finds messages by key and store time
across both tiers, ``tiers`` reads a queue across both tiers (the archive below the broker's min), and
``offload`` plans and runs the move (broker range → Arrow → table → broker watermark). Above ``arrow``,
below ``spark``: nothing here imports pyspark (``spark-mq offload`` and ``spark-mq query --archive`` run
without it); the Spark side (the archive as a DataFrame, replay) is in ``spark_mq.spark``. The broker
side (watermarks in tieredOffset.json, cold offsets, retention that waits for the archive) lives in
``spark_mq.broker``; ``spark-mq offload`` and ``jobs/offload.py`` are the entry points.
"""
