"""The driver-side runner that PySpark starts for every streaming query imports the stream reader's module
afresh; what only the executors' reads need stays out of it (``pyarrow.compute`` and the SQL92 evaluator
were ~0.05 CPU-s of every query: docs/spark.md)."""

from __future__ import annotations

from fresh_imports import loaded_by

EXECUTOR_ONLY = ("pyarrow.compute", "spark_mq.filter.evaluate")


def test_the_stream_readers_module_leaves_the_executor_only_modules_unloaded():
    assert [m for m in loaded_by("import spark_mq.spark.stream", EXECUTOR_ONLY) if m in EXECUTOR_ONLY] == []


def test_a_read_still_has_them():
    """The lazy imports are where the reads use them: a SQL92-filtered read path loads both."""
    code = ("import pyarrow as pa\n"
            "from spark_mq.spark.sql_filter import matching_rows\n"
            "props = pa.array([[('a', '1')], [('a', '2')]], type=pa.map_(pa.string(), pa.string()))\n"
            "batch = pa.RecordBatch.from_arrays([props], names=['properties'])\n"
            "assert sum(b.num_rows for b in matching_rows([batch], \"a = '2'\")) == 1\n")
    assert [m for m in loaded_by(code, EXECUTOR_ONLY) if m in EXECUTOR_ONLY] == sorted(EXECUTOR_ONLY)
