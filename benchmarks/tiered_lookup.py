"""Key lookup across tiers: one message found by its key among ``--messages`` (default 5,000,000), half of
each queue offloaded to a Delta archive, through the broker's index (hot), the archive pruned by a store-time
window (cold), and a full scan of the archive (the peer: what finding a key costs without an index or a
window), measured in the same run.

Fills a store with ``--messages`` messages (``--body``-byte bodies, 4 queues, unique KEYS ``order-<n>`` and
UNIQ_KEYs) through ``MessageStore`` (not timed), serves it with a NameServer and a broker on free loopback
ports, offloads the first half of every queue with ``spark_mq.tiered.offload`` (not timed), then times,
per lookup of a different key (median over ``--lookups`` keys; the full scans over ``--scan-lookups``):

  hot: broker index         find_indexed: QUERY_MESSAGE on the broker, the hit as an Arrow row
  cold: archive, window     find_archived with [store time - window, + window): files and row groups pruned
                            by store-time statistics, then the key and time columns read, then the whole row
  cold: archive, no window  find_archived with the key only: every file's key columns (two passes, no bodies)
  full scan: Spark          read_archive(...).where(key) collected: Spark's Parquet reader over every file
  by_key: both tiers        spark_mq.spark.query.by_key with the window, hot + cold, as a collected DataFrame

The window is ``--window-ms`` either side of the message's store time (looked up beforehand, not timed).
Ratio = full scan (Spark) / the case. ``--no-spark`` leaves out the two Spark cases.

    .venv/bin/python benchmarks/tiered_lookup.py [--messages 5000000] [--lookups 20] [--window-ms 1000] [--quick]
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from pathlib import Path
from typing import Any

from _common import (
    TOPIC,
    Timer,
    code_version,
    create_topic,
    dump_json,
    import_store,
    local_cluster,
    machine_line,
    message_batch,
    parser,
    print_table,
    scratch_dir,
    store_config,
)
from tiered_offload import Silent

QUEUES = 4
BATCH = 256  # messages per put while filling the store (one queue each)
KEY_FORMAT = "order-{:010d}"  # _common.message_properties' KEYS


@dataclasses.dataclass(frozen=True)
class Target:
    """One key to look up: its message's store time and whether it is archived."""

    key: str
    store_ms: int
    archived: bool


def fill(root: Path, messages: int, body_size: int) -> int:
    """``messages`` distinct messages (whole batches of BATCH, queue ``j % QUEUES`` for batch j)."""
    store = import_store()(store_config(root)).start()
    try:
        batches = -(-messages // BATCH)
        for j in range(batches):
            store.put_messages(message_batch(j, BATCH, QUEUES, body_size, True))
    finally:
        store.shutdown()
    return batches * BATCH


def offload_half(api, namesrv: str, archive_root: str) -> dict[int, int]:
    """Archive the first half of every queue into a Delta table; returns each queue's archived end."""
    from spark_mq.tiered.archive import FORMAT_DELTA
    from spark_mq.tiered.offload import ColdBoundary, plan_offload, run_offload

    plans = plan_offload(api, [namesrv], [TOPIC], archive_root, fmt=FORMAT_DELTA, boundary=ColdBoundary(all=True))
    halves = [dataclasses.replace(t, queues=[dataclasses.replace(q, end=q.start + q.messages // 2) for q in t.queues])
              for t in plans]
    run_offload(api, halves, Silent())
    return {q.queue_id: q.end for t in halves for q in t.queues}


def queue_offset(i: int) -> tuple[int, int]:
    """(queue id, queue offset) of message ``i`` as ``fill`` stored it."""
    j, k = divmod(i, BATCH)
    return j % QUEUES, (j // QUEUES) * BATCH + k


def pick_targets(api, broker: str, written: int, archived_end: dict[int, int], count: int,
                 seed: int = 7) -> tuple[list[Target], list[Target]]:
    """``count`` hot and ``count`` archived messages, chosen at random, with their store times."""
    from spark_mq.arrow.indexed import NO_END_MS

    rnd = random.Random(seed)
    hot: list[Target] = []
    cold: list[Target] = []
    while len(hot) < count or len(cold) < count:
        i = rnd.randrange(written)
        queue_id, offset = queue_offset(i)
        archived = offset < archived_end[queue_id]
        bucket = cold if archived else hot
        if len(bucket) < count:
            key = KEY_FORMAT.format(i)
            (found,) = api.query_message(broker, TOPIC, key, 1, 0, NO_END_MS)
            bucket.append(Target(key, found.store_timestamp, archived))
    return hot, cold


def timed(targets: list[Target], lookup, expect_tier: str | None = None) -> dict[str, Any]:
    """Run ``lookup(target)`` for every target; each must find exactly its message."""
    seconds = []
    for t in targets:
        with Timer() as timer:
            found = lookup(t)
        seconds.append(timer.seconds)
        keys = found["keys"] if isinstance(found, dict) else None
        assert keys == [t.key], (t, keys)
        if expect_tier is not None:
            assert found["tier"] == [expect_tier], (t, found["tier"])
    return {"median_ms": statistics.median(seconds) * 1000, "max_ms": max(seconds) * 1000,
            "min_ms": min(seconds) * 1000, "lookups": len(seconds)}


def run(args) -> dict[str, Any]:
    from spark_mq.arrow.queues import discover_queues
    from spark_mq.client.sync_api import SyncMQClientAPI
    from spark_mq.tiered.lookup import TimeWindow, find_archived, find_indexed, open_snapshot

    out: dict[str, Any] = {}
    with scratch_dir(args.dir, "bench-lookup-") as root:
        with Timer() as t:
            written = fill(root / "store", args.messages, args.body)
        out["fill_s"] = t.seconds
        with local_cluster(root) as cluster, SyncMQClientAPI(timeout=120.0) as api:
            create_topic(cluster, TOPIC, QUEUES)
            archive_root = str(root / "archive")
            with Timer() as t:
                ends = offload_half(api, cluster.namesrv, archive_root)
            out["offload_s"] = t.seconds
            out["archived"] = sum(ends.values())
            out["messages"] = written
            hot, cold = pick_targets(api, cluster.broker, written, ends, args.lookups)
            queues = discover_queues(api, [cluster.namesrv], TOPIC)
            w = args.window_ms

            def window(t: Target) -> TimeWindow:
                return TimeWindow(t.store_ms - w, t.store_ms + w)

            snap = open_snapshot(archive_root, TOPIC)
            out["files"] = len(snap.files())
            out["files_in_window"] = statistics.median(len(snap.files(window(t))) for t in cold)

            def columns(table) -> dict[str, list]:
                return {"keys": table.column("keys").to_pylist()}

            cases = {
                "hot: broker index": timed(hot, lambda t: columns(find_indexed(api, queues, t.key, TimeWindow()))),
                "cold: archive, window": timed(cold, lambda t: columns(find_archived(
                    archive_root, TOPIC, t.key, t.store_ms - w, t.store_ms + w))),
                "cold: archive, no window": timed(cold[: args.scan_lookups], lambda t: columns(find_archived(
                    archive_root, TOPIC, t.key))),
            }
            if args.spark:
                cases.update(spark_cases(cluster.namesrv, archive_root, cold, w, args.scan_lookups))
            out["cases"] = cases
    return out


def spark_cases(namesrv: str, archive_root: str, cold: list[Target], w: int, scan_lookups: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from spark_mq.spark.archive_reader import read_archive
    from spark_mq.spark.query import by_key
    from spark_mq.spark.session import build_session

    spark = build_session("tiered_lookup")
    try:
        def scan(t: Target) -> dict[str, list]:
            rows = read_archive(spark, archive_root, TOPIC).where(
                F.array_contains(F.split(F.col("keys"), " "), t.key)).select("keys").collect()
            return {"keys": [r.keys for r in rows]}

        def both(t: Target) -> dict[str, list]:
            rows = by_key(spark, TOPIC, t.key, t.store_ms - w, t.store_ms + w, namesrv=namesrv,
                          root=archive_root).select("keys", "tier").collect()
            return {"keys": [r.keys for r in rows], "tier": [r.tier for r in rows]}

        scan(cold[0])  # warm-up: the first Spark job pays for the JVM's class loading
        return {"full scan: Spark": timed(cold[:scan_lookups], scan),
                "by_key: both tiers": timed(cold, both, expect_tier="cold")}
    finally:
        spark.stop()


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=5_000_000, help="messages in the store (total over 4 queues)")
    p.add_argument("--body", type=int, default=100, help="body size in bytes")
    p.add_argument("--lookups", type=int, default=20, help="keys looked up per case; the median is reported")
    p.add_argument("--scan-lookups", type=int, default=5, help="keys looked up by the full-scan cases")
    p.add_argument("--window-ms", type=int, default=1000, help="the cold window: this far either side of the time")
    p.add_argument("--no-spark", dest="spark", action="store_false", help="leave out the Spark cases")
    a = p.parse_args()
    if a.quick:
        a.messages, a.lookups, a.scan_lookups = 20_000, 3, 2
    results = run(a)
    cases = results["cases"]
    peer = cases.get("full scan: Spark", cases["cold: archive, no window"])["median_ms"]
    print(machine_line(a.dir))
    print(f"code: {code_version()}")
    print(f"{results['messages']:,} messages, {results['archived']:,} archived in {results['files']} Delta file(s) "
          f"(filled in {results['fill_s']:.0f}s, offloaded in {results['offload_s']:.0f}s); a ±{a.window_ms} ms "
          f"window leaves {results['files_in_window']:g} file(s) (median)")
    rows = [[name, r["lookups"], r["median_ms"], r["min_ms"], r["max_ms"], peer / r["median_ms"]]
            for name, r in cases.items()]
    print_table(f"key lookup among {results['messages']:,} messages, half archived (median per lookup)",
                ("case", "lookups", "median ms", "min ms", "max ms", "full scan / case"), rows)
    dump_json(a.json, {"machine": machine_line(a.dir), "code": code_version(), "args": vars(a),
                       "results": results})


if __name__ == "__main__":
    main()
