"""Queues as Arrow, without Spark: the one message schema (``schema``), the vectorised decoder of
message units (``decoder``), a topic's queues and their offsets at the brokers (``queues``), and the
reader that pulls a queue's offset range as Arrow batches (``range_reader``). Above ``client``,
below ``tiered`` and ``spark``; never imports pyspark.
"""
