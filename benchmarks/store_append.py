"""MessageStore append throughput (ASYNC_FLUSH, default 1 GiB commitlog files).

Appends ``--messages`` messages of ``--body`` bytes in batches of ``--batch`` through
``put_messages(MessageBatch.of(...))``, round-robin over ``--queues`` queues of one topic.
Batches are built before timing from a pool (``--pool`` batches, reused: the store copies).
Each repetition uses a fresh store in a temp dir; the median of ``--reps`` is reported.

Variants:
  props    each message carries TAGS, KEYS and UNIQ_KEY (consume-queue tag codes and two
           index entries per message) - the default, realistic producer traffic
  noprops  no properties: no tag hashing, no index work
  single   batch size 1 through ``put_message(Message, queue_id, uniq_key)`` (properties
           encoded per call, as at the API edge), for contrast; ``--single-messages`` of them

MB/s counts the bytes of units written (growth of the commitlog max offset). The timed
region is the put loop plus the catch-up of dispatch that a read forces at its end, so every
message counted is pullable and indexed (the store may dispatch in a background thread;
"put loop" shows the loop alone). ASYNC_FLUSH: a put returns once the unit is in the page
cache; the flush thread runs meanwhile. "durable" adds the shutdown's final flush and
checkpoint. "CPU" is this process's CPU seconds per wall second over the timed region (all
threads): well under 1 means other processes had the cores; "CPU µs/msg" is the CPU time per
message (what a loaded machine changes least: compare it between runs).
The raw disk bandwidth (benchmarks/disk_write.py) is measured in the same run so the store's
MB/s reads as a fraction of it.

    .venv/bin/python benchmarks/store_append.py [--messages 2000000] [--variants props,noprops,single]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import disk_write
from _common import (
    MB,
    TAGS_POOL,
    TOPIC,
    MiB,
    Timer,
    batch_pool,
    body,
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

TARGET_MSG_S = 1_000_000  # issue 27
VARIANTS = ("props", "noprops", "single")


def _one_run(directory: Path, put_all, messages_hint: int) -> dict[str, Any]:
    """Fresh store, ``put_all(store)`` timed, then a timed clean shutdown."""
    MessageStore = import_store()
    with scratch_dir(directory, "bench-append-") as root:
        store = MessageStore(store_config(root)).start()
        try:
            base = store.commitlog.max_offset()
            with Timer() as t:
                with Timer() as t_put:
                    n = put_all(store)
                # a read catches dispatch up: every message is now pullable and indexed
                visible = sum(store.get_max_offset(TOPIC, q) for q in store.queue_ids(TOPIC))
            written = store.commitlog.max_offset() - base
        finally:
            with Timer() as t_close:
                store.shutdown()
    assert n >= messages_hint, (n, messages_hint)
    assert visible == n, f"{visible} of {n} messages visible in the consume queues"
    return {
        "messages": n,
        "bytes": written,
        "seconds": t.seconds,
        "msg_s": rate(n, t.seconds),
        "mb_s": rate(written / MB, t.seconds),
        "cpu_share": t.cpu_share,
        "cpu_us_per_msg": t.cpu_share * t.seconds / n * 1e6,
        "put_loop_seconds": t_put.seconds,
        "put_loop_msg_s": rate(n, t_put.seconds),
        "durable_seconds": t.seconds + t_close.seconds,
        "durable_msg_s": rate(n, t.seconds + t_close.seconds),
        "unit_bytes": written / n,
    }


def run_batched(directory: Path, messages: int, batch: int, queues: int, body_size: int, pool: int,
                with_properties: bool, reps: int) -> dict[str, Any]:
    p = batch_pool(pool, batch, queues, body_size, with_properties)
    med, runs = median_of(reps, lambda _i: _one_run(directory, lambda s: fill(s, p, messages), messages),
                          key=lambda r: r["msg_s"])
    return {**med, "runs_msg_s": [r["msg_s"] for r in runs]}


def run_single(directory: Path, messages: int, queues: int, body_size: int, pool: int, reps: int) -> dict[str, Any]:
    from spark_mq.common.message import Message

    msgs = [Message(TOPIC, body(i, body_size), tags=TAGS_POOL[i % len(TAGS_POOL)], keys=f"order-{i:010d}")
            for i in range(pool)]
    uniq = [f"7F0000010001{i:020X}" for i in range(pool)]

    def put_all(store) -> int:
        put = store.put_message
        k = len(msgs)
        for i in range(messages):
            put(msgs[i % k], i % queues, uniq[i % k])
        return messages

    med, runs = median_of(reps, lambda _i: _one_run(directory, put_all, messages), key=lambda r: r["msg_s"])
    return {**med, "runs_msg_s": [r["msg_s"] for r in runs]}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000, help="messages per repetition (batched variants)")
    p.add_argument("--single-messages", type=int, default=50_000, help="messages per repetition (single)")
    p.add_argument("--batch", type=int, default=64, help="messages per put_messages call")
    p.add_argument("--queues", type=int, default=4, help="queues the batches go to, round-robin")
    p.add_argument("--body", type=int, default=100, help="body size in bytes")
    p.add_argument("--pool", type=int, default=1024, help="distinct prepared batches (reused cyclically)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (fresh store each); the median is reported")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    p.add_argument("--disk-mb", type=int, default=1024, help="file size for the raw disk measurement (0: skip)")
    a = p.parse_args()
    if a.quick:
        a.messages, a.single_messages, a.pool, a.reps, a.disk_mb = 50_000, 5_000, 64, 1, 32
    variants = [v for v in a.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}: choose from {VARIANTS}")

    disk = disk_write.measure(a.dir, a.disk_mb * MiB) if a.disk_mb else None
    raw_mb_s = max(disk[way]["mb_s"] for way in disk_write.WAYS) if disk else None

    results: dict[str, Any] = {}
    for v in variants:
        if v == "single":
            results[v] = run_single(a.dir, a.single_messages, a.queues, a.body, a.pool * a.batch, a.reps)
        else:
            results[v] = run_batched(a.dir, a.messages, a.batch, a.queues, a.body, a.pool, v == "props", a.reps)

    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    if disk:
        print_table("raw disk (same run)", disk_write.COLUMNS, disk_write.table_rows(disk))
    rows = []
    for v, r in results.items():
        batch = 1 if v == "single" else a.batch
        rows.append([
            f"{v} (batch {batch})", r["messages"], r["msg_s"], spread(r["runs_msg_s"]), r["mb_s"],
            r["unit_bytes"], r["put_loop_msg_s"], r["durable_msg_s"], r["cpu_share"], r["cpu_us_per_msg"],
            r["msg_s"] / TARGET_MSG_S,
            (r["mb_s"] / raw_mb_s) if raw_mb_s else "-",
        ])
    print_table(
        f"store append, {a.body}-byte bodies, {a.queues} queues, median of {a.reps}",
        ("variant", "messages", "msg/s", "min..max msg/s", "MB/s", "unit B", "put loop msg/s", "durable msg/s", "CPU",
         "CPU µs/msg", f"/ target {TARGET_MSG_S:,}", "/ raw disk"),
        rows,
        caption="raw disk = the fastest of os.write and mmap (+ fdatasync) above",
    )
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a), "disk": disk,
                       "raw_disk_mb_s": raw_mb_s, "append": results})


if __name__ == "__main__":
    main()
