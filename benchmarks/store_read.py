"""Draining a backlog through the consume queue: ``get_messages`` throughput.

Builds a backlog of ``--messages`` messages (100-byte bodies, TAGS/KEYS/UNIQ_KEY, batches of
64; building is not timed), then drains every queue from offset 0 to its max offset with
``get_messages(topic, q, offset, max_count)`` for each ``--counts`` (32 is RocketMQ's default
pull size), following ``next_begin_offset``. Two layouts:

  1 queue     the whole backlog in one queue: each pull is one contiguous commitlog run
  4 queues    the same number of messages interleaved batch by batch over 4 queues: each
              queue's units are 64-unit runs with gaps, so a pull copies several runs

Each drain is repeated ``--reps`` times (median reported). The backlog was just written, so
reads come from the page cache: this measures the store's CPU cost, not the disk. MB/s counts
the unit bytes returned; CPU is process CPU seconds per wall second (see store_append.py).

    .venv/bin/python benchmarks/store_read.py [--messages 2000000] [--counts 32,1024]
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
    dump_json,
    fill,
    import_store,
    machine_line,
    median_of,
    parser,
    print_table,
    rate,
    scratch_dir,
    spread,
    store_config,
)

TARGET_MSG_S = 1_000_000


def drain(store, queue_ids: list[int], max_count: int) -> dict[str, Any]:
    """Pull every queue from 0 to its end; returns counts, bytes and seconds."""
    from spark_mq.store.results import GetStatus

    get = store.get_messages
    found = GetStatus.FOUND
    messages = nbytes = pulls = 0
    with Timer() as t:
        for q in queue_ids:
            off = 0
            end = store.get_max_offset(TOPIC, q)
            while off < end:
                r = get(TOPIC, q, off, max_count)
                if r.status is not found:
                    raise RuntimeError(f"queue {q} offset {off}: {r.status}")
                messages += r.sizes.size
                nbytes += len(r.data)
                pulls += 1
                off = r.next_begin_offset
    return {"messages": messages, "bytes": nbytes, "pulls": pulls, "seconds": t.seconds, "cpu_share": t.cpu_share,
            "msg_s": rate(messages, t.seconds), "mb_s": rate(nbytes / MB, t.seconds)}


def run_layout(directory: Path, messages: int, queues: int, counts: list[int], reps: int,
               pool: int, batch: int, body_size: int) -> dict[int, dict[str, Any]]:
    MessageStore = import_store()
    out = {}
    with scratch_dir(directory, "bench-read-") as root:
        store = MessageStore(store_config(root)).start()
        try:
            written = fill(store, batch_pool(pool, batch, queues, body_size, True), messages)
            qids = store.queue_ids(TOPIC)
            assert sum(store.get_max_offset(TOPIC, q) for q in qids) == written
            for c in counts:
                med, runs = median_of(reps, lambda _i, c=c: drain(store, qids, c), key=lambda r: r["msg_s"])
                assert med["messages"] == written, (med["messages"], written)
                out[c] = {**med, "runs_msg_s": [r["msg_s"] for r in runs]}
        finally:
            store.shutdown()
    return out


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000, help="backlog size (total over the queues)")
    p.add_argument("--layouts", default="1,4", help="comma-separated queue counts to build backlogs for")
    p.add_argument("--counts", default="32,1024", help="comma-separated max_count values to drain with")
    p.add_argument("--reps", type=int, default=3, help="drains per (layout, count); the median is reported")
    p.add_argument("--batch", type=int, default=64, help="batch size used to build the backlog")
    p.add_argument("--body", type=int, default=100, help="body size in bytes")
    p.add_argument("--pool", type=int, default=1024, help="distinct prepared batches")
    a = p.parse_args()
    if a.quick:
        a.messages, a.reps, a.pool = 50_000, 1, 64
    layouts = [int(x) for x in a.layouts.split(",") if x]
    counts = [int(x) for x in a.counts.split(",") if x]

    results = {q: run_layout(a.dir, a.messages, q, counts, a.reps, a.pool, a.batch, a.body) for q in layouts}

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    rows = [
        [f"{q} queue{'s' if q > 1 else ''}, max_count {c}", r["messages"], r["pulls"], r["msg_s"],
         spread(r["runs_msg_s"]), r["mb_s"], r["cpu_share"], r["msg_s"] / TARGET_MSG_S]
        for q, by_count in results.items() for c, r in by_count.items()
    ]
    print_table(f"consume-queue drain of a {a.messages:,}-message backlog (page cache), median of {a.reps}",
                ("layout", "messages", "pulls", "msg/s", "min..max msg/s", "MB/s", "CPU", f"/ target {TARGET_MSG_S:,}"),
                rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "read": {str(q): {str(c): r for c, r in v.items()} for q, v in results.items()}})


if __name__ == "__main__":
    main()
