"""``jobs/consume.py``: its help, and its Delta writer's replay rule. The job's run end to end (its own Python
process and local[2] JVM, the parquet sink, Trigger.AvailableNow, the per-batch lag lines, the group's commits) is
``test_spark_tls.py``'s, with TLS and an account on top: one job JVM in the suite, not two.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import JOBS, load_job

JOB = JOBS / "consume.py"


def run_job(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"consume.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def test_consume_job_help():
    proc = run_job("--help", timeout=30)
    assert "--starting-offsets" in proc.stdout and "availableNow" in proc.stdout


def test_delta_writer_skips_a_replayed_batch(tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable

    job = load_job("consume")

    class Batch:
        def __init__(self, n: int) -> None:
            self.n = n

        def toArrow(self) -> pa.Table:
            return pa.table({"broker_name": ["b"] * self.n, "queue_id": pa.array([0] * self.n, pa.int32()),
                             "queue_offset": pa.array(range(self.n), pa.int64())})

    path = str(tmp_path / "delta")
    write = job.delta_writer(path, "app")
    write(Batch(3), 0)
    write(Batch(2), 1)
    write(Batch(2), 1)  # replayed after a crash: already committed
    write(Batch(0), 2)  # empty: nothing written
    table = DeltaTable(path)
    assert table.to_pyarrow_table().num_rows == 5
    assert table.transaction_version("app") == 1
