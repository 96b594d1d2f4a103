"""Tiered offload: a broker's backlog archived by ``spark_mq.tiered`` (Delta and Parquet), against a
plain ``pyarrow.parquet.write_table`` of the same Arrow data measured in the same run (the ceiling).

Fills a store with ``--messages`` messages (``--body``-byte bodies; TAGS, KEYS and UNIQ_KEY properties;
4 queues) through ``MessageStore`` (not timed), serves it with ``spark-mq dev`` (NameServer + broker on
free loopback ports, a separate process, as in production) and times, median of ``--reps``:

  pull + decode     read_range of every queue into memory: what the broker and the decoder can give
  offload delta     offload_queue of every queue (everything, --all) into a fresh Delta table
  offload parquet   the same into fresh Parquet range files
  append delta      Archive.append of the pulled rows, one append per queue, no broker: the write path
  append parquet    the same for Parquet
  write_table       pyarrow.parquet.write_table of the pulled Arrow table to one file: the ceiling

The offload runs read and write overlapped (a pull thread one chunk ahead). MB = 10**6 bytes of Arrow
message data (``Table.nbytes`` of the rows: the number both sides write). Ratio = offload / write_table.

    .venv/bin/python benchmarks/tiered_offload.py [--messages 400000] [--body 1024] [--reps 3] [--quick]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _common import (
    MB,
    TOPIC,
    Timer,
    batch_pool,
    code_version,
    create_topic,
    dump_json,
    fill,
    import_store,
    local_cluster,
    machine_line,
    median_of,
    parser,
    print_table,
    rate,
    scratch_dir,
    spread,
    store_config,
)

QUEUES = 4


class Silent:
    """An OffloadListener that reports nothing (the benchmark times the work alone)."""

    def queue_started(self, plan) -> None: ...
    def pulled(self, plan, messages: int, nbytes: int) -> None: ...
    def committed(self, plan, start: int, end: int, written: bool) -> None: ...
    def watermark_recorded(self, plan, offset: int) -> None: ...
    def queue_done(self, plan, result) -> None: ...


def pull_all(plans) -> Any:
    """Every planned range pulled into one Arrow table (also the ceiling's input)."""
    import pyarrow as pa

    from spark_mq.arrow.range_reader import QueueRange, read_range
    from spark_mq.tiered.offload import ALL_TAGS, DEFAULT_PULL_BATCH_SIZE, OFFLOAD_GROUP

    batches = []
    for p in plans:
        part = QueueRange(p.topic, p.broker_name, p.broker_addr, p.queue_id, p.start, p.end, ALL_TAGS,
                          OFFLOAD_GROUP, DEFAULT_PULL_BATCH_SIZE, True)
        batches.extend(read_range(part))
    return pa.Table.from_batches(batches)


def run(directory: Path, messages: int, body_size: int, reps: int, chunk_mb: int) -> dict[str, Any]:
    import deltalake  # noqa: F401  (imported before timing: the first Delta write would pay for it)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spark_mq.client.sync_api import SyncMQClientAPI
    from spark_mq.tiered.archive import open_archive
    from spark_mq.tiered.offload import ColdBoundary, offload_queue, plan_offload

    MessageStore = import_store()
    out: dict[str, Any] = {}
    with scratch_dir(directory, "bench-offload-") as root:
        store = MessageStore(store_config(root / "store")).start()
        try:
            written = fill(store, batch_pool(64, 64, QUEUES, body_size, True), messages)
        finally:
            store.shutdown()
        with local_cluster(root) as cluster:
            create_topic(cluster, TOPIC, QUEUES)
            with SyncMQClientAPI(timeout=30.0) as api:
                # planned once: every run then offloads the same full ranges into a fresh table (the broker
                # accepts recording the same watermark again)
                plans = [q for t in plan_offload(api, [cluster.namesrv], [TOPIC], str(root / "plan"), fmt=None,
                                                 boundary=ColdBoundary(all=True)) for q in t.queues]
                assert sum(p.messages for p in plans) == written, (sum(p.messages for p in plans), written)

                def pull(_i: int) -> dict[str, Any]:
                    with Timer() as t:
                        table = pull_all(plans)
                    out["_table"] = table
                    return {"seconds": t.seconds, "cpu_share": t.cpu_share, "messages": table.num_rows,
                            "bytes": table.nbytes}

                def offload(fmt: str, i: int) -> dict[str, Any]:
                    archive = open_archive(str(root / f"{fmt}-{i}"), TOPIC, fmt)
                    with Timer() as t:
                        results = [offload_queue(api, archive, p, Silent(), chunk_bytes=chunk_mb << 20)
                                   for p in plans]
                    return {"seconds": t.seconds, "cpu_share": t.cpu_share,
                            "messages": sum(r.messages for r in results), "bytes": sum(r.nbytes for r in results),
                            "commits": sum(r.commits for r in results)}

                def append(fmt: str, i: int) -> dict[str, Any]:
                    archive = open_archive(str(root / f"append-{fmt}-{i}"), TOPIC, fmt)
                    table = out["_table"]
                    queue_ids = table.column("queue_id")
                    parts = [(p, table.filter(pc.equal(queue_ids, p.queue_id))) for p in plans]
                    with Timer() as t:
                        for p, rows in parts:
                            archive.append(p.broker_name, p.queue_id, p.start, p.end, rows)
                    return {"seconds": t.seconds, "cpu_share": t.cpu_share, "messages": table.num_rows,
                            "bytes": table.nbytes}

                def ceiling(i: int) -> dict[str, Any]:
                    table = out["_table"]
                    with Timer() as t:
                        pq.write_table(table, root / f"ceiling-{i}.parquet")
                    return {"seconds": t.seconds, "cpu_share": t.cpu_share, "messages": table.num_rows,
                            "bytes": table.nbytes}

                cases = {"pull + decode": pull,
                         "offload delta": lambda i: offload("delta", i),
                         "offload parquet": lambda i: offload("parquet", i),
                         "append delta": lambda i: append("delta", i),
                         "append parquet": lambda i: append("parquet", i),
                         "write_table": ceiling}
                for name, fn in cases.items():
                    med, runs = median_of(reps, fn, key=lambda r: r["seconds"])
                    out[name] = {**med, "mb_s": rate(med["bytes"] / MB, med["seconds"]),
                                 "msg_s": rate(med["messages"], med["seconds"]),
                                 "runs_mb_s": [rate(r["bytes"] / MB, r["seconds"]) for r in runs]}
    del out["_table"]
    return out


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=400_000, help="backlog size (total over 4 queues)")
    p.add_argument("--body", type=int, default=1024, help="body size in bytes")
    p.add_argument("--reps", type=int, default=3, help="repetitions per case; the median is reported")
    p.add_argument("--chunk-mb", type=int, default=128, help="MiB of Arrow data per append")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps = 20_000, 1
    results = run(a.dir, a.messages, a.body, a.reps, a.chunk_mb)
    ceiling = results["write_table"]["mb_s"]
    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    rows = [[name, r["messages"], r["bytes"] / MB, r["seconds"], r["mb_s"], spread(r["runs_mb_s"]), r["msg_s"],
             r["cpu_share"], r["mb_s"] / ceiling] for name, r in results.items()]
    print_table(f"offload of a {a.messages:,}-message backlog ({a.body}-byte bodies, {QUEUES} queues), "
                f"median of {a.reps}", ("case", "messages", "MB", "s", "MB/s", "min..max MB/s", "msg/s", "CPU",
                                        "/ write_table"), rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "results": results, "ratio": {k: r["mb_s"] / ceiling for k, r in results.items()}})


if __name__ == "__main__":
    main()
