"""Spark streaming ingest: ``spark.readStream.format("spark_mq")`` draining a backlog into a noop sink, against two
ceilings measured in the same run: ``spark.read.parquet`` of the same rows into the same sink, and a Python
stream source yielding the same rows as ready-made Arrow batches (what is ours), with every column and with a
pruned schema.

Starts a NameServer and a broker (two processes on free loopback ports, a temporary store), produces
``--messages`` distinct messages (``--body``-byte bodies; a tag and a key, UNIQ_KEY from the producer) with
the batch producer (``--batch`` messages per send, a few in flight, over ``--queues`` queues; not timed),
starts a local[2] SparkSession whose executors run this interpreter, and times, median of ``--reps``:

  stream ingest   readStream spark_mq, startingOffsets=earliest, Trigger.AvailableNow, into format("noop"),
                  from start() until the query terminates (a fresh checkpoint each time)
  parquet read    spark.read.parquet of the same rows into format("noop"); the rows were written once
                  beforehand by the batch source (spark.read.format("spark_mq") ... .write.parquet)
  memory stream   the same query over a Python stream source with the same schema whose reader yields the same
                  rows, one partition per queue, as Arrow batches of pullBatchSize rows mapped from Arrow IPC
                  files in the page cache (no broker, no decoding): PySpark's Python-source path, the per-query
                  runner and the sink, without any of our reading; ``spark_mq`` should reach 0.8 of it

each with the full schema and pruned to body, store_timestamp, queue_id, queue_offset (the stream through
``.schema(...)``, the Parquet read through ``select``) unless ``--schema`` picks one. After one warm-up run of
each, the three cases of a schema take turns, each timed run starting one case later (stream, memory, Parquet;
memory, Parquet, stream; ...), so that the JVM's ongoing compilation and the machine's load fall on all three
alike. CPU seconds are split by process: the JVM (its own threads), the Python workers reading partitions,
Spark's other Python processes (the driver-side stream reader and planners, which the JVM starts and reaps), the
broker + NameServer, and this driver. ``--profile DIR`` then runs each stream case once more under py-spy
(every Python process the JVM starts) and Java Flight Recorder (the JVM) and prints the top frames of each.

Targets: (issue 13) full schema >= 0.6 of the Parquet read, pruned >= 0.8 of the pruned Parquet read; (issue 27)
>= 0.8 of the memory stream, full and pruned; in rows/s and in rows per CPU second.

    .venv/bin/python benchmarks/spark_ingest.py [--messages 2000000] [--queues 8] [--body 100] [--reps 3] \\
        [--schema full|pruned|both] [--pull-batch-size N] [--max-per-partition N] [--profile DIR] [--quick] \\
        [--json out.json]

``--quick`` (10,000 messages, one timed run, no warm-up runs: a smoke run whose figures are not judged).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import (
    TOPIC,
    Cluster,
    Timer,
    TreeCpuWatch,
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
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_RATIO = {"full": 0.6, "pruned": 0.8}  # of the Parquet read of the same columns, wall and per CPU second
MEMORY_TARGET_RATIO = 0.8  # of the memory stream of the same columns, full and pruned
CEILINGS = {"parquet": TARGET_RATIO, "memory": dict.fromkeys(TARGET_RATIO, MEMORY_TARGET_RATIO)}
MEMORY_SOURCE = "spark_mq_bench_memory"
PRUNED_COLUMNS = ("body", "store_timestamp", "queue_id", "queue_offset")
PRODUCER_GROUP = "bench_ingest_pg"
SENDS_IN_FLIGHT = 4
SEND_TIMEOUT_S = 30.0
CPU_GROUPS = ("jvm", "python workers", "spark python (driver side)", "broker + namesrv", "bench driver")
PROFILE_HZ = 100
SETTLE_S = 10.0
SETTLE_POLL_S = 0.05
TOP_FRAMES = 12
# innermost frames of a Python process waiting (py-spy counts some blocking calls as active)
WAITS = {("manager", "daemon.py"), ("read_int", "serializers.py"), ("select", "selectors.py"),
         ("wait", "threading.py"), ("_wait_for_tstate_lock", "threading.py"), ("readinto", "socket.py")}


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


def pruned_ddl() -> str:
    """PRUNED_COLUMNS with the source's types, as ``.schema(...)`` takes them."""
    from spark_mq.spark.schema import SPARK_SCHEMA

    return ", ".join(f"{c} {SPARK_SCHEMA[c].dataType.simpleString()}" for c in PRUNED_COLUMNS)


def cpu_group(cmd: str) -> str:
    if "pyspark.daemon pyspark.worker" in cmd:  # the daemon and the workers it forks: they read the partitions
        return "python workers"
    # the stream reader's driver-side runner, the planning and lookup workers; a process with no command
    # line has exited and waits to be reaped: the runner of the query that just stopped
    if "pyspark" in cmd or not cmd:
        return "spark python (driver side)"
    if "spark_mq.cli" in cmd:
        return "broker + namesrv"
    return "bench driver"


def cpu_by_group(tree: dict[int, tuple[str, float, float]]) -> dict[str, float]:
    """CPU seconds so far by CPU_GROUPS of a :func:`process_tree_cpu` snapshot. The JVM's reaped children are
    the Python processes it started for one query (the stream reader's runner) and that have exited since."""
    out = dict.fromkeys(CPU_GROUPS, 0.0)
    for cmd, own, reaped in tree.values():
        if cmd.split(" ", 1)[0].endswith("java"):
            out["jvm"] += own
            out["spark python (driver side)"] += reaped
        else:
            out[cpu_group(cmd)] += own + reaped
    return out


def driver_side_pids() -> set[int]:
    """The live (or not yet reaped) Python processes the JVM started on the driver's side."""
    return {pid for pid, (cmd, _own, _reaped) in process_tree_cpu().items()
            if not cmd.split(" ", 1)[0].endswith("java") and cpu_group(cmd) == "spark python (driver side)"}


def wait_reaped(pids: set[int], timeout: float) -> None:
    """Until every process of ``pids`` has exited and been reaped (its ``/proc`` entry gone), at most ``timeout``
    seconds. Looks at those PIDs only: a scan of every process of the machine (:func:`driver_side_pids`) each
    poll cost this driver up to ~1 CPU-s a case on a busy machine (the "bench driver" figure of session 34)."""
    give_up = time.monotonic() + timeout
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < give_up:
        time.sleep(SETTLE_POLL_S)


def timed_case(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s result plus the wall seconds and the CPU seconds every process of the tree spent
    meanwhile (by group, and in total), and rows per CPU second (in total and by group): other work on a
    shared machine stretches the wall time, not the CPU. The CPU is taken once the Python processes the
    JVM started for the case (the stream's runner) have exited and been reaped (up to SETTLE_S), so that
    none of theirs is counted in the next case. A Python worker that exits meanwhile is reaped by the kernel
    (PySpark's daemon ignores SIGCHLD): :class:`TreeCpuWatch` keeps its CPU as last seen (``lost_workers``
    counts them; before session 33 such a worker's CPU went missing, the workers' figure even negative), and
    neither the watch's own CPU nor the wait for the runner's exit is the benchmark driver's."""
    earlier = driver_side_pids()
    load = os.getloadavg()[0]
    with TreeCpuWatch() as watch:
        with Timer() as t:
            result = run()
        settle_cpu = time.thread_time()
        with Timer() as settled:
            wait_reaped(driver_side_pids() - earlier, SETTLE_S)
        settle_cpu = time.thread_time() - settle_cpu
    before = cpu_by_group(watch.before)
    cpu = {group: seconds - before[group] for group, seconds in cpu_by_group(watch.after).items()}
    cpu["bench driver"] -= watch.watch_cpu_s + settle_cpu
    rows = result["rows"]
    return {**result, "seconds": t.seconds, "rows_s": rate(rows, t.seconds), "cpu_s": cpu,
            "settle_s": settled.seconds, "lost_workers": len(watch.lost),
            "started_workers": sum(cpu_group(watch.after[pid][0]) == "python workers"
                                   for pid in watch.started if pid in watch.after),
            "rows_per_cpu_s": rate(rows, sum(cpu.values())),
            "rows_per_cpu_s_by_group": {g: rate(rows, v) for g, v in cpu.items() if v > 0},
            "load_before": load, "load_after": os.getloadavg()[0]}


def stream_ingest(spark, source: str, opts: dict[str, str], schema: str | None, checkpoint: Path) -> dict[str, Any]:
    """One availableNow query of ``source`` (from the earliest offsets) into noop, from start() until it
    terminates; rows and the time inside micro-batches (triggerExecution: without the query's start-up and its
    last check for more data) from its progress reports."""

    def run() -> dict[str, Any]:
        reader = spark.readStream.format(source)
        if schema is not None:
            reader = reader.schema(schema)
        query = (reader.options(**opts).load()
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(checkpoint)).start())
        query.awaitTermination()
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        in_batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
        return {"rows": rows, "batches": len(progress), "in_batches_s": in_batches,
                "in_batches_rows_s": rate(rows, in_batches)}

    return timed_case(run)


class MemorySource(DataSource):
    """The memory ceiling: the spark_mq source's schema (option ``schema``, as JSON: so that no Python process
    of the query imports spark_mq; pruned by ``.schema(...)`` as the source is), rows read from the Arrow IPC
    files of option ``files`` (a JSON list, one partition each)."""

    @classmethod
    def name(cls) -> str:
        return MEMORY_SOURCE

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.options["schema"]))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return MemoryStreamReader(json.loads(self.options["files"]), schema.names)


class MemoryStreamReader(DataSourceStreamReader):
    """One batch of every file: offset 0 before it, 1 after."""

    def __init__(self, files: list[str], columns: list[str]) -> None:
        self.files, self.columns = files, columns

    def initialOffset(self) -> dict:
        return {"read": 0}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {"read": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(f) for f in self.files] if start["read"] < end["read"] else []

    def read(self, partition: InputPartition):
        batches = pa.ipc.open_file(pa.memory_map(partition.value))
        for i in range(batches.num_record_batches):
            yield batches.get_batch(i).select(self.columns)

    def commit(self, end: dict) -> None:
        pass


def write_memory_files(parquet: Path, out: Path, batch_rows: int) -> list[str]:
    """The rows of ``parquet`` as the source yields them (its Arrow schema, ``batch_rows`` a batch), one Arrow
    IPC file per queue, read once so they are in the page cache."""
    from spark_mq.arrow.schema import to_utc_schema

    rows = to_utc_schema(pq.read_table(parquet)).sort_by([("queue_id", "ascending"), ("queue_offset", "ascending")])
    out.mkdir()
    files = []
    for queue_id in pc.unique(rows["queue_id"]).to_pylist():
        path = out / f"queue-{queue_id}.arrow"
        queue = rows.filter(pc.equal(rows["queue_id"], queue_id)).combine_chunks()
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, queue.schema) as writer:
            for batch in queue.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
        path.read_bytes()  # into the page cache
        files.append(str(path))
    return files


def memory_stream(spark, files: list[str], schema: str | None, checkpoint: Path) -> dict[str, Any]:
    """:func:`stream_ingest`'s query over :class:`MemorySource`."""
    from spark_mq.spark.schema import SPARK_SCHEMA

    opts = {"files": json.dumps(files), "schema": SPARK_SCHEMA.json()}
    return stream_ingest(spark, MEMORY_SOURCE, opts, schema, checkpoint)


def parquet_read(spark, path: Path, columns: tuple[str, ...] | None, rows: int) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        df = spark.read.parquet(str(path))
        (df.select(*columns) if columns else df).write.format("noop").mode("overwrite").save()
        return {"rows": rows}

    return timed_case(run)


def jvm_pid() -> int:
    return next(pid for pid, (cmd, _own, _reaped) in process_tree_cpu().items()
                if cmd.split(" ", 1)[0].endswith("java"))


def profile(run: Callable[[], Any], out: Path, name: str) -> dict[str, dict[str, Any]]:
    """``run()`` once under py-spy (the JVM's Python children, raw stacks) and Java Flight Recorder (the
    JVM's execution samples); the top own frames of each process kind and of the JVM's task threads."""
    out.mkdir(parents=True, exist_ok=True)
    jvm = jvm_pid()
    stacks, jfr = out / f"{name}.pyspy.txt", out / f"{name}.jfr"
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses", "-p", str(jvm),
                            "-r", str(PROFILE_HZ), "-f", "raw", "-o", str(stacks)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["jcmd", str(jvm), "JFR.start", f"name={name}", "settings=profile", f"filename={jfr}"],
                   check=True, capture_output=True)
    try:
        run()
    finally:
        subprocess.run(["jcmd", str(jvm), "JFR.stop", f"name={name}"], check=True, capture_output=True)
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait()
    tops = python_top_frames(stacks)
    tops["jvm (task threads)"] = jvm_top_frames(jfr)
    return tops


def python_top_frames(stacks: Path) -> dict[str, dict[str, Any]]:
    """Own-time samples by innermost frame, per process kind (CPU_GROUPS' Python groups): the samples
    in all and the top frames."""
    own: dict[str, Counter] = {}
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        procs = [i for i, f in enumerate(frames) if f.startswith("process ")]
        if not procs or not count.isdigit() or procs[-1] == len(frames) - 1:
            continue
        function, where = _frame(frames[-1])
        if (function.rsplit(".", 1)[-1], where) in WAITS:
            continue
        own.setdefault(f"{cpu_group(frames[procs[-1]])}: own frames", Counter())[f"{function} ({where})"] += int(count)
    return {g: {"samples": c.total(), "top": c.most_common(TOP_FRAMES)} for g, c in own.items()}


def _frame(frame: str) -> tuple[str, str]:
    """(function, file name) of a py-spy frame ``function (path:line)``."""
    function, _, where = frame.partition(" (")
    return function, where.rsplit("/", 1)[-1].split(":", 1)[0].rstrip(")")


def jvm_top_frames(jfr: Path) -> dict[str, Any]:
    """Execution samples of the executor task threads by innermost frame (class.method)."""
    printed = subprocess.run(["jfr", "print", "--json", "--stack-depth", "1", "--events", "jdk.ExecutionSample",
                              str(jfr)], check=True, capture_output=True, text=True).stdout
    own: Counter = Counter()
    for event in json.loads(printed)["recording"]["events"]:
        values = event["values"]
        frames = values["stackTrace"]["frames"] if values.get("stackTrace") else []
        if frames and (values["sampledThread"].get("javaName") or "").startswith("Executor task"):
            method = frames[0]["method"]
            own[f"{method['type']['name'].rsplit('/', 1)[-1]}.{method['name']}"] += 1
    return {"samples": own.total(), "top": own.most_common(TOP_FRAMES)}


def _turn_order(names: list[str], i: int) -> list[str]:
    """The cases' order in timed run ``i``: each run starts one case later. The JVM still compiles after a
    warm-up run of each case (JFR: thousands of compilations in the next query, fewer in each one after) and
    a shared machine's load drifts, so a case always timed before the others would carry more of both."""
    k = i % len(names)
    return names[k:] + names[:k]


def run(a: Any) -> dict[str, Any]:
    from spark_mq.spark.options import DEFAULT_PULL_BATCH_SIZE

    schemas = ("full", "pruned") if a.schema == "both" else (a.schema,)
    with scratch_dir(a.dir, "bench-ingest-") as root, local_cluster(root / "servers") as cluster:
        create_topic(cluster, TOPIC, a.queues)
        produced = produce(cluster, a.messages, a.batch, a.body)
        spark = spark_session()
        try:
            spark.dataSource.register(MemorySource)
            opts = source_options(cluster, a)
            parquet = root / "parquet"
            with Timer() as written:
                spark.read.format("spark_mq").options(**opts).load().write.parquet(str(parquet))
            rows = spark.read.parquet(str(parquet)).count()
            assert rows == produced["messages"], (rows, produced)
            files = write_memory_files(parquet, root / "memory", a.pull_batch_size or DEFAULT_PULL_BATCH_SIZE)
            results, profiles, checkpoints = {}, {}, iter(range(1_000_000))

            def checkpoint() -> Path:
                return root / f"checkpoint-{next(checkpoints)}"

            for kind in schemas:
                ddl, columns = (pruned_ddl(), PRUNED_COLUMNS) if kind == "pruned" else (None, None)
                cases = {f"stream {kind}": lambda _i, d=ddl: stream_ingest(spark, "spark_mq", opts, d, checkpoint()),
                         f"memory {kind}": lambda _i, d=ddl: memory_stream(spark, files, d, checkpoint()),
                         f"parquet {kind}": lambda _i, c=columns: parquet_read(spark, parquet, c, rows)}
                for fn in () if a.quick else cases.values():
                    fn(-1)  # warm-up: JIT, Python workers, imports, page cache
                turns = [{name: cases[name](i) for name in _turn_order(list(cases), i)} for i in range(a.reps)]
                for name in cases:
                    med, runs = median_of(a.reps, lambda i, n=name, t=turns: t[i][n], key=lambda r: r["rows_s"])
                    assert med["rows"] == rows, (name, med, rows)
                    results[name] = {**med, "runs_rows_s": [r["rows_s"] for r in runs],
                                     "runs_rows_per_cpu_s": [r["rows_per_cpu_s"] for r in runs],
                                     "runs_lost_workers": [r["lost_workers"] for r in runs],
                                     "runs_started_workers": [r["started_workers"] for r in runs],
                                     "runs_settle_s": [round(r["settle_s"], 1) for r in runs]}
                if a.profile:
                    for name in (f"stream {kind}", f"memory {kind}"):
                        profiles[name] = profile(lambda f=cases[name]: f(-1), a.profile, name.replace(" ", "-"))
        finally:
            spark.stop()
    return {"produced": produced, "parquet_write_s": written.seconds, "rows": rows, "cases": results,
            "profiles": profiles}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000, help="backlog size (total over all queues)")
    p.add_argument("--queues", type=int, default=8, help="queues of the topic")
    p.add_argument("--body", type=int, default=100, help="body bytes per message")
    p.add_argument("--batch", type=int, default=2000, help="messages per batch send while producing")
    p.add_argument("--reps", type=int, default=3, help="timed runs per case; the median is reported")
    p.add_argument("--schema", choices=("full", "pruned", "both"), default="both",
                   help=f"every column, or only {', '.join(PRUNED_COLUMNS)}")
    p.add_argument("--pull-batch-size", type=int, default=0, help="source option pullBatchSize (0: its default)")
    p.add_argument("--max-per-partition", type=int, default=0,
                   help="source option maxMessagesPerPartition (0: its default)")
    p.add_argument("--profile", type=Path, default=None,
                   help="directory for a py-spy + JFR profile of one more run of each stream case")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps = 10_000, 1
    code_version()  # the code as imported
    r = run(a)

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    print(f"backlog: {r['produced']['messages']:,} messages produced at {r['produced']['msg_s']:,.0f} msg/s; "
          f"written as Parquet by the batch source in {r['parquet_write_s']:.1f} s")
    cases, table, ratios = r["cases"], [], {}
    for name, c in cases.items():
        detail = (f"{c['in_batches_rows_s']:,.0f} rows/s inside the micro-batch ({c['in_batches_s']:.2f} s)"
                  if "in_batches_s" in c else "")
        if any(c["runs_lost_workers"]):
            detail += f"; Python workers that exited in its runs: {c['runs_lost_workers']}"
        if any(c["runs_started_workers"]):
            detail += f"; started: {c['runs_started_workers']}"
        if any(s >= SETTLE_POLL_S for s in c["runs_settle_s"]):
            detail += f"; s until the runner was reaped: {c['runs_settle_s']}"
        table.append([name, c["rows"], c["seconds"], c["rows_s"], spread(c["runs_rows_s"]), sum(c["cpu_s"].values()),
                      c["rows_per_cpu_s"], ", ".join(f"{g} {v:.2f}" for g, v in c["cpu_s"].items() if v >= 0.01),
                      f"{c['load_before']:.1f} -> {c['load_after']:.1f}", detail])
    for ceiling_name, targets in CEILINGS.items():
        for kind in targets:
            stream, ceiling = cases.get(f"stream {kind}"), cases.get(f"{ceiling_name} {kind}")
            if stream and ceiling:
                ratios[f"{kind} / {ceiling_name}"] = {
                    "wall": stream["rows_s"] / ceiling["rows_s"],
                    "cpu": stream["rows_per_cpu_s"] / ceiling["rows_per_cpu_s"], "target": targets[kind]}
    caption = "; ".join(f"stream {name} = {v['wall']:.2f} wall, {v['cpu']:.2f} per CPU s (target >= {v['target']})"
                        for name, v in ratios.items())
    print_table(f"Spark local[2] ingest of {r['rows']:,} messages ({a.body}-byte bodies, {a.queues} queues), "
                f"median of {a.reps}", ("case", "rows", "seconds", "rows/s", "min..max rows/s", "CPU s",
                                        "rows / CPU s", "CPU s by process", "load", "detail"), table, caption=caption)
    for case, tops in r["profiles"].items():
        for where, found in tops.items():
            print_table(f"{case}, {where}: top {TOP_FRAMES} of {found['samples']:,} samples", ("frame", "samples", "%"),
                        [[f, n, 100 * n / max(found["samples"], 1)] for f, n in found["top"]])
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a), **r,
                       "ratios": ratios})


if __name__ == "__main__":
    main()
