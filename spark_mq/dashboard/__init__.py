"""The web console (``spark-mq dashboard``): cluster, topics, groups and lag, messages, the controller's
view and the archive, over the admin API of :mod:`spark_mq.client` (never pyspark)."""
