"""Replay a range of a spark_mq topic from the archive and the brokers as one, into another topic or
a sink.

Run with ``spark-submit jobs/replay.py --namesrv H:P --topic T --root DIR`` and a range:
``--from-time``/``--to-time`` (ISO 8601 or ms since the epoch; store time, [from, to)) or
``--from-offsets``/``--to-offsets`` (JSON ``{"<broker>:<queueId>": offset}``; ``--from-offsets
committed`` with ``--group`` starts at the group's committed offsets), optionally ``--key K`` and
``--tags 'a || b'``; then either ``--to-topic T2`` (republish in per-queue order, each message
with ORIGIN_MESSAGE_ID = its original id) or ``--sink console|parquet|delta --path P``. Without
``--root`` only the brokers are read (offsets below their min are then data loss).
See ``spark_mq.spark.replay``. Exit codes: 0 done, 2 a usage or data error (one line saying what
to do).
"""

from __future__ import annotations

import argparse
import sys
import time

SINKS = ("console", "parquet", "delta")
PARTITION_COLUMNS = ["broker_name", "queue_id"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from spark_mq.commands.common import add_credentials, add_namesrv, add_tls

    p = argparse.ArgumentParser(prog="replay.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_namesrv(p)
    p.add_argument("--topic", required=True, help="topic to replay")
    p.add_argument("--root", help="archive root (tieredStoreRoot): read offsets below the brokers' min from it")
    p.add_argument("--from-time", help="first store time to replay (ISO 8601 or ms), inclusive")
    p.add_argument("--to-time", help="store time to stop at (ISO 8601 or ms), exclusive")
    p.add_argument("--from-offsets", help='JSON {"<broker>:<queueId>": offset} or committed (with --group)')
    p.add_argument("--to-offsets", help='JSON {"<broker>:<queueId>": offset}, exclusive')
    p.add_argument("--group", help="consumer group for --from-offsets committed")
    p.add_argument("--key", help="only messages with this key (KEYS) or message id (UNIQ_KEY)")
    p.add_argument("--tags", help="only messages with these tags ('a || b'; filtered at the broker)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--to-topic", help="republish into this topic (per-queue order kept)")
    out.add_argument("--sink", choices=SINKS, help="write the rows here instead")
    p.add_argument("--path", help="output directory (parquet, delta)")
    p.add_argument("--rows", type=int, default=20, help="rows shown by --sink console (default 20)")
    add_tls(p)
    add_credentials(p)
    args = p.parse_args(argv)
    if args.sink in ("parquet", "delta") and not args.path:
        p.error(f"--sink {args.sink} needs --path")
    return args


def spec_of(args: argparse.Namespace):
    from spark_mq.commands.common import client_config, parse_time_ms
    from spark_mq.spark.options import Connection
    from spark_mq.spark.replay import ReplaySpec

    spec = ReplaySpec(
        namesrv=args.namesrv, topic=args.topic, root=args.root,
        from_ms=parse_time_ms(args.from_time, "--from-time") if args.from_time else None,
        to_ms=parse_time_ms(args.to_time, "--to-time") if args.to_time else None,
        from_offsets=args.from_offsets, to_offsets=args.to_offsets, group=args.group, key=args.key, tags=args.tags,
        connection=Connection.of(client_config(args)))
    spec.check()
    return spec


def write_sink(df, sink: str, path: str | None, rows: int) -> int:
    """Write the replayed rows to ``sink``; returns the row count."""
    df = df.cache()
    count = df.count()
    if sink == "console":
        df.orderBy("broker_name", "queue_id", "queue_offset").show(rows, truncate=True)
    elif sink == "parquet":
        df.write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(path)
    elif count:  # delta, written with deltalake (no Delta jars needed)
        from deltalake import write_deltalake

        write_deltalake(path, df.toArrow(), mode="append", partition_by=PARTITION_COLUMNS)
    df.unpersist()
    return count


def main(argv: list[str] | None = None) -> int:
    from spark_mq.common.errors import SparkMQError

    args = parse_args(argv)
    try:
        spec = spec_of(args)
    except SparkMQError as e:
        print(f"replay.py: error: {e}", file=sys.stderr, flush=True)
        return 2
    from pyspark.errors import PySparkException

    from spark_mq.spark.replay import describe, replay_frame, republish
    from spark_mq.spark.session import build_session

    spark = build_session(f"spark_mq-replay-{args.topic}")
    print(f"[replay] {describe(spec)}", flush=True)
    t0 = time.perf_counter()
    try:
        if args.to_topic:
            count = republish(spark, spec, args.to_topic)
            where = f"topic {args.to_topic}"
        else:
            count = write_sink(replay_frame(spark, spec), args.sink, args.path, args.rows)
            where = args.sink + (f" {args.path}" if args.path else "")
    except (SparkMQError, PySparkException) as e:
        print(f"replay.py: error: {str(e).strip().splitlines()[0]}", file=sys.stderr, flush=True)
        spark.stop()
        return 2
    elapsed = time.perf_counter() - t0
    print(f"[replay] done: {count} messages into {where} in {elapsed:.1f}s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
