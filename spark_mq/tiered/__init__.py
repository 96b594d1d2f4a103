"""Tiered storage: cold queue ranges offloaded from the brokers into one Delta or Parquet table per
topic, and read back without a JVM Delta reader.

``archive`` owns a topic's table (layout, exactly-once appends per queue, its archived end per queue),
``reader`` reads it (a queue's offset range as Arrow; the whole archive as a Spark DataFrame), and
``offload`` plans and runs the move (broker range → Arrow → table → broker watermark). The broker side
(watermarks in tieredOffset.json, cold offsets, retention that waits for the archive) lives in
``spark_mq.broker``; ``spark-mq offload`` and ``jobs/offload.py`` are the entry points.
"""
