"""spark_mq: a RocketMQ-compatible message store whose consumers are Spark drivers."""

__version__ = "0.1.0"
