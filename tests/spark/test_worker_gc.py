"""A Python worker's first read of a ``spark_mq`` partition, once read to its end, freezes what the worker holds
out of the cyclic GC (PySpark's daemon runs a full ``gc.collect()`` in it after every task), once per process:
the batch and the stream readers alike, in a fresh interpreter as a worker is."""

from __future__ import annotations

import subprocess
import sys

import pytest

WORKER = """
import gc
from pyspark.sql.datasource import InputPartition
from spark_mq.spark.provider import SparkMQDataSource

source = SparkMQDataSource({"namesrv": "127.0.0.1:9", "topic": "t"})
reader = source.%s
assert gc.get_freeze_count() == 0, gc.get_freeze_count()
batches = reader.read(InputPartition(None))  # Spark's placeholder partition: nothing to read
assert gc.get_freeze_count() == 0, "frozen before the read was done"
assert list(batches) == []
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # PySpark's, pyarrow's and spark_mq's modules, classes and functions
more = [[] for _ in range(1000)]
assert list(reader.read(InputPartition(None))) == []
# a frozen object freed since leaves the count, so it may shrink; a second freeze would add the thousand lists
assert gc.get_freeze_count() <= frozen, "a second read froze again"
print("ok")
"""


@pytest.mark.parametrize("reader", ["reader(source.schema())", "streamReader(source.schema())"])
def test_the_first_read_in_a_worker_freezes_what_it_holds_and_only_the_first(reader):
    out = subprocess.run([sys.executable, "-c", WORKER % reader], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
