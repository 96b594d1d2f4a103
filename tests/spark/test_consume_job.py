"""``jobs/consume.py`` end to end: the session's test cluster, the parquet sink, Trigger.AvailableNow.

The job runs in its own Python process (``sys.executable``, local[2]), not through spark-submit: the
same code path without spark-submit's extra JVM start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
from servers import unique

from spark_mq.client.sync_api import SyncMQClientAPI

JOB = Path(__file__).resolve().parents[2] / "jobs" / "consume.py"


def run_job(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"consume.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def test_consume_job_help():
    proc = run_job("--help", timeout=30)
    assert "--starting-offsets" in proc.stdout and "availableNow" in proc.stdout


def test_consume_job_parquet_available_now(cluster, produced, tmp_path):
    group = unique("consume_job")
    out = tmp_path / "out"
    proc = run_job("--namesrv", cluster.namesrv, "--topic", produced.topic, "--group", group,
                   "--starting-offsets", "earliest", "--max-per-trigger", "25", "--trigger", "availableNow",
                   "--sink", "parquet", "--path", str(out), "--checkpoint", str(tmp_path / "ckpt"))

    # one progress line per micro-batch: 60 messages at 25 per trigger make 3 batches, 35, 10 then 0 behind
    batches = [line for line in proc.stdout.splitlines() if line.startswith("[consume] batch ")]
    assert len(batches) == 3, proc.stdout
    assert [line.split(" lag ")[1].split()[0] for line in batches] == ["35", "10", "0"], proc.stdout
    assert all("=" in line.split(" lag ")[1] for line in batches), proc.stdout  # and per queue

    table = ds.dataset(str(out), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == len(produced.results)
    assert sorted(table.column("msg_id").to_pylist()) == sorted(r.offset_msg_id for r in produced.results)
    assert sorted(table.column("uniq_key").to_pylist()) == sorted(r.msg_id for r in produced.results)

    # the group's committed offsets at the broker reach every queue's max offset (lag 0)
    with SyncMQClientAPI() as api:
        addr = cluster.broker.addr
        queues = sorted({r.queue_id for r in produced.results})
        for q in queues:
            max_offset = api.get_max_offset(addr, produced.topic, q)
            committed = api.query_consumer_offset(addr, group, produced.topic, q)
            assert committed == max_offset, (q, committed, max_offset)


def test_delta_writer_skips_a_replayed_batch(tmp_path):
    import importlib.util

    import pyarrow as pa
    from deltalake import DeltaTable

    spec = importlib.util.spec_from_file_location("consume_job", JOB)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)

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
