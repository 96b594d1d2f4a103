"""Spark streaming ingest: ``spark.readStream.format("spark_mq")`` draining a backlog into a noop sink, against
``spark.read.parquet`` of the same rows into the same sink (the ceiling), measured in the same run.

Starts a NameServer and a broker (two processes on free loopback ports, a temporary store), produces
``--messages`` distinct messages (``--body``-byte bodies; a tag and a key, UNIQ_KEY from the producer) with
the batch producer (``--batch`` messages per send, a few in flight, over ``--queues`` queues; not timed),
starts a local[2] SparkSession whose executors run this interpreter, and times, median of ``--reps``:

  stream ingest   readStream spark_mq, startingOffsets=earliest, Trigger.AvailableNow, into format("noop"),
                  from start() until the query terminates (a fresh checkpoint each time)
  parquet read    spark.read.parquet of the same rows into format("noop"); the rows were written once
                  beforehand by the batch source (spark.read.format("spark_mq") ... .write.parquet)

Targets (issue 5): stream ingest >= 500,000 rows/s and >= 0.5 of the Parquet read's rows/s.

    .venv/bin/python benchmarks/spark_ingest.py [--messages 2000000] [--queues 8] [--body 100] [--reps 3] \\
        [--pull-batch-size N] [--max-per-partition N] [--quick] [--json out.json]
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    TOPIC,
    Cluster,
    Timer,
    code_version,
    create_topic,
    dump_json,
    local_cluster,
    machine_line,
    median_of,
    message,
    parser,
    print_table,
    process_tree_cpu,
    rate,
    scratch_dir,
    spread,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_ROWS_S = 500_000
TARGET_PARQUET_RATIO = 0.5
PRODUCER_GROUP = "bench_ingest_pg"
SENDS_IN_FLIGHT = 4
SEND_TIMEOUT_S = 30.0
# CPU of this process tree by command-line marker (the rest, this driver process included, is "driver")
CPU_GROUPS = (("servers", "spark_mq.cli"), ("jvm", "java"), ("python_workers", "pyspark.daemon"))


def produce(cluster: Cluster, messages: int, batch: int, body_size: int) -> dict[str, Any]:
    """``messages`` (rounded up to whole batches) distinct messages sent by the batch producer, a few
    batches in flight; the producer spreads the batches over the topic's queues."""
    from spark_mq.client.config import ClientConfig
    from spark_mq.client.producer import Producer
    from spark_mq.remoting.loop import new_event_loop

    batches = -(-messages // batch)

    async def send_all() -> None:
        producer = await Producer(PRODUCER_GROUP, ClientConfig(cluster.namesrv), send_timeout_s=SEND_TIMEOUT_S).start()
        try:
            slots = asyncio.Semaphore(SENDS_IN_FLIGHT)

            async def send(j: int) -> None:
                async with slots:  # built only when a slot is free: a few batches in memory at a time
                    await producer.send([message(i, body_size) for i in range(j * batch, (j + 1) * batch)])

            await asyncio.gather(*(send(j) for j in range(batches)))
        finally:
            await producer.shutdown()

    loop = new_event_loop()
    try:
        with Timer() as t:
            loop.run_until_complete(send_all())
    finally:
        loop.close()
    return {"messages": batches * batch, "seconds": t.seconds, "msg_s": rate(batches * batch, t.seconds)}


def spark_session():
    """The jobs' session (local[2] on loopback; executors run this interpreter, which has the package, so
    ``format("spark_mq")`` is found with no register call)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_mq.spark.session import build_session

    return build_session("spark_mq-bench-ingest")


def source_options(cluster: Cluster, a: Any) -> dict[str, str]:
    opts = {"namesrv": cluster.namesrv, "topic": TOPIC, "startingOffsets": "earliest"}
    if a.pull_batch_size:
        opts["pullBatchSize"] = str(a.pull_batch_size)
    if a.max_per_partition:
        opts["maxMessagesPerPartition"] = str(a.max_per_partition)
    return opts


def cpu_by_group() -> dict[str, float]:
    out = dict.fromkeys([group for group, _ in CPU_GROUPS] + ["driver"], 0.0)
    for cmd, cpu in process_tree_cpu().values():
        out[next((group for group, marker in CPU_GROUPS if marker in cmd), "driver")] += cpu
    return out


def timed_case(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s result plus the wall seconds and the CPU seconds every process of the tree spent
    meanwhile (by group, and in total): other work on a shared machine stretches the wall time, not
    the CPU."""
    before = cpu_by_group()
    with Timer() as t:
        result = run()
    cpu = {group: seconds - before[group] for group, seconds in cpu_by_group().items()}
    rows = result["rows"]
    return {**result, "seconds": t.seconds, "rows_s": rate(rows, t.seconds), "cpu_s": cpu,
            "rows_per_cpu_s": rate(rows, sum(cpu.values()))}


def stream_ingest(spark, opts: dict[str, str], checkpoint: Path) -> dict[str, Any]:
    """One availableNow query from the earliest offsets into noop, from start() until it terminates; rows
    and the time inside micro-batches (triggerExecution: without the query's start-up and its last check
    for more data) from its progress reports."""

    def run() -> dict[str, Any]:
        query = (spark.readStream.format("spark_mq").options(**opts).load()
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(checkpoint)).start())
        query.awaitTermination()
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        in_batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        return {"rows": rows, "batches": len(progress), "in_batches_s": in_batches,
                "in_batches_rows_s": rate(rows, in_batches)}

    return timed_case(run)


def parquet_read(spark, path: Path, rows: int) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        spark.read.parquet(str(path)).write.format("noop").mode("overwrite").save()
        return {"rows": rows}

    return timed_case(run)


def run(a: Any) -> dict[str, Any]:
    with scratch_dir(a.dir, "bench-ingest-") as root, local_cluster(root / "servers") as cluster:
        create_topic(cluster, TOPIC, a.queues)
        produced = produce(cluster, a.messages, a.batch, a.body)
        spark = spark_session()
        try:
            opts = source_options(cluster, a)
            parquet = root / "parquet"
            with Timer() as written:
                spark.read.format("spark_mq").options(**opts).load().write.parquet(str(parquet))
            rows = spark.read.parquet(str(parquet)).count()
            assert rows == produced["messages"], (rows, produced)
            results = {}
            cases = {"stream ingest": lambda i: stream_ingest(spark, opts, root / f"checkpoint-{i}"),
                     "parquet read": lambda _i: parquet_read(spark, parquet, rows)}
            for name, fn in cases.items():
                fn(-1)  # warm-up: JIT, Python workers, imports, page cache
                med, runs = median_of(a.reps, fn, key=lambda r: r["rows_s"])
                assert med["rows"] == rows, (name, med, rows)
                results[name] = {**med, "runs_rows_s": [r["rows_s"] for r in runs]}
        finally:
            spark.stop()
    return {"produced": produced, "parquet_write_s": written.seconds, "rows": rows, **results}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000, help="backlog size (total over all queues)")
    p.add_argument("--queues", type=int, default=8, help="queues of the topic")
    p.add_argument("--body", type=int, default=100, help="body bytes per message")
    p.add_argument("--batch", type=int, default=2000, help="messages per batch send while producing")
    p.add_argument("--reps", type=int, default=3, help="timed runs per case; the median is reported")
    p.add_argument("--pull-batch-size", type=int, default=0, help="source option pullBatchSize (0: its default)")
    p.add_argument("--max-per-partition", type=int, default=0,
                   help="source option maxMessagesPerPartition (0: its default)")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps = 10_000, 1
    code_version()  # the code as imported
    r = run(a)

    stream, ceiling = r["stream ingest"], r["parquet read"]
    ratio = stream["rows_s"] / ceiling["rows_s"]
    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    print(f"backlog: {r['produced']['messages']:,} messages produced at {r['produced']['msg_s']:,.0f} msg/s; "
          f"written as Parquet by the batch source in {r['parquet_write_s']:.1f} s")
    in_batches = (f"{stream['in_batches_rows_s']:,.0f} rows/s inside the micro-batch "
                  f"({stream['in_batches_s']:.2f} s of {stream['seconds']:.2f} s)")
    rows = [[name, c["rows"], c["seconds"], c["rows_s"], spread(c["runs_rows_s"]), sum(c["cpu_s"].values()),
             c["rows_per_cpu_s"], ", ".join(f"{g} {v:.1f}" for g, v in c["cpu_s"].items() if v >= 0.05), detail]
            for name, c, detail in (("stream ingest (spark_mq, availableNow -> noop)", stream, in_batches),
                                    ("parquet read -> noop (ceiling)", ceiling, ""))]
    cpu_ratio = stream["rows_per_cpu_s"] / ceiling["rows_per_cpu_s"]
    print_table(f"Spark local[2] ingest of {r['rows']:,} messages ({a.body}-byte bodies, {a.queues} queues), "
                f"median of {a.reps}", ("case", "rows", "seconds", "rows/s", "min..max rows/s", "CPU s",
                                        "rows / CPU s", "CPU s by process", "detail"), rows,
                caption=f"stream / parquet = {ratio:.2f} (target >= {TARGET_PARQUET_RATIO}); stream / target "
                        f"{TARGET_ROWS_S:,} rows/s = {stream['rows_s'] / TARGET_ROWS_S:.2f}; rows per CPU second, "
                        f"stream / parquet = {cpu_ratio:.2f}")
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a), **r,
                       "ratio_to_parquet": ratio, "ratio_to_target": stream["rows_s"] / TARGET_ROWS_S,
                       "cpu_ratio_to_parquet": cpu_ratio})


if __name__ == "__main__":
    main()
