"""Spark streaming sink: ``writeStream.format("spark_mq")`` with ``exactlyOnce=true`` (rows as half messages,
each micro-batch committed by the driver: a commit record, then END_TRANSACTION per writer) against the default
at-least-once sink (plain batch sends), measured in the same run on the same rows.

Starts a NameServer and a broker (two processes on free loopback ports, a temporary store) and a local[2]
SparkSession whose executors run this interpreter. Each case runs a streaming query from the deterministic
``rate-micro-batch`` source (``--rows-per-batch`` rows per micro-batch, two partitions, ``--body``-byte bodies)
into a fresh topic of ``--queues`` queues until ``--rows`` rows are written (every batch committed), and times
it from start() to the last batch's progress, with the CPU seconds of every process of the tree meanwhile (JVM,
Python workers, broker: steadier than wall time on a shared machine); median of ``--reps``. Afterwards the
topic must hold exactly ``--rows`` messages (the committed ones: half messages are not in it).

    .venv/bin/python benchmarks/spark_sink.py [--rows 200000] [--rows-per-batch 50000] [--queues 8] [--body 100] \\
        [--reps 3] [--quick] [--json out.json]
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from _common import (
    Cluster,
    Timer,
    code_version,
    create_topic,
    dump_json,
    local_cluster,
    machine_line,
    median_of,
    parser,
    print_table,
    process_tree_cpu,
    rate,
    scratch_dir,
    spread,
)

CASES = {"at-least-once": "false", "exactly-once": "true"}


def spark_session():
    """The jobs' session (local[2] on loopback; executors run this interpreter)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_mq.spark.session import build_session

    spark = build_session("spark_mq-bench-sink")
    spark.sparkContext.setLogLevel("FATAL")  # stop() interrupts the idle next batch: its abort is logged as an error
    return spark


def tree_cpu_s() -> float:
    """CPU seconds so far of this process and its descendants (the JVM, its Python workers, the broker)."""
    return sum(own + reaped for _cmd, own, reaped in process_tree_cpu().values())


def topic_messages(cluster: Cluster, topic: str, queues: int) -> int:
    from spark_mq.client.sync_api import SyncMQClientAPI

    with SyncMQClientAPI() as api:
        return sum(api.get_max_offset(cluster.broker, topic, q) or 0 for q in range(queues))


def sink_run(spark, cluster: Cluster, a: Any, exactly_once: str, checkpoint: Path, topic: str) -> dict[str, Any]:
    """One query writing ``a.rows`` rows into ``topic``; wall seconds from start() to its last batch's progress."""
    from pyspark.sql import functions as F

    create_topic(cluster, topic, a.queues)
    pad = "x" * max(1, a.body - 8)
    rows = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", a.rows_per_batch)
            .option("numPartitions", 2).load().where(F.col("value") < a.rows)
            .select(F.concat(F.lit(pad), F.col("value").cast("string")).alias("body")))
    cpu = tree_cpu_s()
    with Timer() as t:
        query = (rows.writeStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
                 .option("exactlyOnce", exactly_once).option("checkpointLocation", str(checkpoint)).start())
        batches = 0
        while True:
            progress = query.lastProgress
            if progress is not None and int(json.loads(progress["sources"][0]["endOffset"])["offset"]) >= a.rows:
                batches = progress["batchId"] + 1
                break
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            time.sleep(0.02)
    cpu = tree_cpu_s() - cpu
    query.stop()
    stored = topic_messages(cluster, topic, a.queues)
    assert stored == a.rows, (exactly_once, stored, a.rows)
    return {"rows": a.rows, "batches": batches, "seconds": t.seconds, "rows_s": rate(a.rows, t.seconds),
            "cpu_s": cpu, "rows_per_cpu_s": rate(a.rows, cpu),
            "cpu_share": t.cpu_share, "load": os.getloadavg()[0]}


def run(a: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with scratch_dir(a.dir, "bench-sink-") as root, local_cluster(root / "servers") as cluster:
        spark = spark_session()
        try:
            runs = iter(range(1_000_000))
            for name, flag in CASES.items():
                def one(_i: int, flag: str = flag) -> dict[str, Any]:
                    n = next(runs)
                    return sink_run(spark, cluster, a, flag, root / f"ckpt-{n}", f"BenchSink_{n}")

                one(-1)  # warm-up: Python workers, imports, the first topic's route
                med, all_runs = median_of(a.reps, one, key=lambda r: r["rows_s"])
                results[name] = {**med, "runs_rows_s": [r["rows_s"] for r in all_runs],
                                 "runs_rows_per_cpu_s": [r["rows_per_cpu_s"] for r in all_runs]}
        finally:
            spark.stop()
    return {"cases": results}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows written per query")
    p.add_argument("--rows-per-batch", type=int, default=50_000, help="rows per micro-batch")
    p.add_argument("--queues", type=int, default=8, help="queues of each topic")
    p.add_argument("--body", type=int, default=100, help="body bytes per row")
    p.add_argument("--reps", type=int, default=3, help="timed runs per case; the median is reported")
    a = p.parse_args()
    if a.quick:
        a.rows, a.rows_per_batch, a.reps = 10_000, 5_000, 1
    code_version()
    r = run(a)
    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    cases = r["cases"]
    table = [(name, c["rows_s"], spread(c["runs_rows_s"]), c["rows_per_cpu_s"], spread(c["runs_rows_per_cpu_s"]),
              c["batches"], c["seconds"], c["load"]) for name, c in cases.items()]
    ratio = cases["exactly-once"]["rows_s"] / cases["at-least-once"]["rows_s"]
    cpu_ratio = cases["exactly-once"]["rows_per_cpu_s"] / cases["at-least-once"]["rows_per_cpu_s"]
    columns = ("case", "rows/s", "runs", "rows/CPU-s", "runs", "micro-batches", "s", "load avg")
    print_table(f"spark_mq streaming sink: {a.rows:,} rows, {a.rows_per_batch:,} per micro-batch, {a.body} B bodies, "
                f"{a.queues} queues", columns, table,
                caption=f"exactly-once / at-least-once = {ratio:.2f} (wall), {cpu_ratio:.2f} (per CPU-s)")
    dump_json(a.json, {**r, "ratio_exactly_once": ratio, "cpu_ratio_exactly_once": cpu_ratio, "args": vars(a)})


if __name__ == "__main__":
    main()
