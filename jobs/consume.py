"""Consume a spark_mq topic with Structured Streaming and write it to a sink.

Run with ``spark-submit jobs/consume.py --namesrv H:P --topic T --group G ...`` (or plain ``python``:
then the session runs on ``local[2]``). Reads ``spark.readStream.format("spark_mq")`` with the
group's offsets committed to the brokers (``commitToBroker``), writes to ``console``, ``parquet``
(Spark's file sink), ``delta`` (``deltalake.write_deltalake`` per micro-batch: the Delta Spark jars
are not needed) or ``memory``, and prints one progress line per micro-batch: batch id, rows, rows/s
and the lag, summed and per queue (:func:`spark_mq.spark.progress.source_lag`: the brokers' max
offsets the batch saw, Spark's ``latestOffset``, minus the batch's ``endOffset``).

The driver is a member of ``--group`` (queues split with the group's other members, see
``spark_mq.spark.stream``); the reader commits each finished batch's offsets to the brokers when
Spark asks it for the next one — which Spark also does after the last batch of ``availableNow``,
so ``spark-mq admin group lag`` shows the group caught up once the job exits. ``Trigger.Once`` is
the exception (Spark never plans past its one batch): after it the job commits the batch's end
offsets itself. With ``--trigger availableNow`` or ``once`` the job exits when the query is done.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from spark_mq.commands.common import add_credentials, add_tls, client_config
from spark_mq.common.errors import ConfigError
from spark_mq.spark.progress import source_lag

SINKS = ("console", "parquet", "delta", "memory")
PARTITION_COLUMNS = ["broker_name", "queue_id"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="consume.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namesrv", default=os.environ.get("SPARK_MQ_NAMESRV", "127.0.0.1:9876"),
                   help="NameServer host:port, ';'-separated for several (default $SPARK_MQ_NAMESRV or "
                        "127.0.0.1:9876)")
    p.add_argument("--topic", required=True, help="topic to read")
    p.add_argument("--group", required=True, help="consumer group whose offsets are committed to the brokers")
    p.add_argument("--starting-offsets", default="committed",
                   help='earliest, latest, committed (default) or JSON {"<broker>:<queueId>": offset}')
    p.add_argument("--max-per-trigger", type=int, help="maxMessagesPerTrigger: messages per micro-batch at most")
    p.add_argument("--trigger", default="availableNow",
                   help='availableNow (default), once, or a processing-time interval like "5 seconds"')
    p.add_argument("--sink", choices=SINKS, default="console", help="where to write (default console)")
    p.add_argument("--path", help="output directory (parquet, delta)")
    p.add_argument("--checkpoint", help="checkpoint directory (required except for console and memory)")
    p.add_argument("--query-name", default="spark_mq_consume", help="query name (the memory sink's table)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other option of the spark_mq source (e.g. allocateStrategy=circle, "
                        "rebalanceIntervalMs=5000); repeatable")
    p.add_argument("--no-commit-to-broker", dest="commit_to_broker", action="store_false",
                   help="do not commit the group's offsets to the brokers")
    add_tls(p)
    add_credentials(p)
    args = p.parse_args(argv)
    try:
        args.client = client_config(args)  # TLS and the account: the flags, else the environment
        args.client.ssl_context()  # the TLS files load (else an error naming the flag) before Spark starts
    except ConfigError as e:
        p.error(str(e))
    if args.sink in ("parquet", "delta") and not args.path:
        p.error(f"--sink {args.sink} needs --path")
    if args.sink in ("parquet", "delta") and not args.checkpoint:
        p.error(f"--sink {args.sink} needs --checkpoint")
    for item in args.option:
        if "=" not in item or not item.split("=", 1)[0].strip():
            p.error(f"--option {item!r} is not KEY=VALUE")
    if args.max_per_trigger is not None and args.max_per_trigger < 1:
        p.error("--max-per-trigger must be at least 1")
    return args


class Progress:
    """Prints one line per micro-batch (from a StreamingQueryListener, and again from recentProgress on exit
    for the batches whose events had not arrived)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._printed: set[int] = set()
        self.rows = 0

    def report(self, batch_id: int, rows: int, rows_per_s: float, lag: dict[str, int]) -> None:
        with self._lock:
            if batch_id in self._printed:
                return
            self._printed.add(batch_id)
            self.rows += rows
        lag_text = ", ".join(f"{q}={n}" for q, n in lag.items()) or "-"
        print(f"[consume] batch {batch_id}: {rows} rows, {rows_per_s:,.0f} rows/s, lag {sum(lag.values())} "
              f"({lag_text})", flush=True)

    def report_progress(self, progress: Any) -> None:
        # the queues this query reads (with a group, the others belong to other members)
        lag = source_lag(progress.sources[0]) if progress.sources else {}
        self.report(progress.batchId, progress.numInputRows, progress.processedRowsPerSecond or 0.0, lag)


def make_listener(progress: Progress):
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            print(f"[consume] query {event.name or event.id} started", flush=True)

        def onQueryProgress(self, event) -> None:
            progress.report_progress(event.progress)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return Listener()


def delta_writer(path: str, app_id: str):
    """foreachBatch function appending each micro-batch to the Delta table at ``path`` with deltalake.

    Idempotent per batch: each commit records the batch id as the Delta transaction version of ``app_id``
    (derived from the checkpoint), and a batch Spark replays after a crash is skipped when already written."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    def write(batch_df, batch_id: int) -> None:
        try:
            done = DeltaTable(path).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            print(f"[consume] batch {batch_id} already in {path}: skipped", flush=True)
            return
        table = batch_df.toArrow() if hasattr(batch_df, "toArrow") else _arrow_from_pandas(batch_df)
        if table.num_rows:
            write_deltalake(path, table, mode="append", partition_by=PARTITION_COLUMNS,
                            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))

    return write


def _arrow_from_pandas(batch_df):
    import pyarrow as pa

    return pa.Table.from_pandas(batch_df.toPandas(), preserve_index=False)


def connection_options(args: argparse.Namespace) -> dict[str, str]:
    """The source's account and TLS options (accessKey/secretKey, tls*; {} for plaintext, unsigned)."""
    from spark_mq.spark.options import Connection

    return Connection.of(args.client).spark_options()


def commit_once_offsets(args: argparse.Namespace, end: dict[str, dict[str, int]]) -> None:
    """Write the end offsets of the one batch of ``Trigger.Once`` as the group's committed offsets."""
    from spark_mq.arrow.queues import discover_queues
    from spark_mq.client.config import open_api
    from spark_mq.common.config import split_addresses
    from spark_mq.spark.stream import from_spark_offset

    topic, group = args.topic, args.group
    offsets = from_spark_offset(end, topic, "final offsets").get(topic, {})
    with open_api(args.client, 10.0) as api:
        queues = discover_queues(api, split_addresses(args.namesrv), topic)
        for key, offset in sorted(offsets.items()):
            if key in queues.queues:
                api.update_consumer_offset(queues.addr(key), group, topic, key[1], offset)


def main(argv: list[str] | None = None) -> int:
    from spark_mq.spark.session import build_session

    args = parse_args(argv)
    spark = build_session(f"spark_mq-consume-{args.topic}")
    progress = Progress()
    spark.streams.addListener(make_listener(progress))

    reader = (spark.readStream.format("spark_mq")
              .option("namesrv", args.namesrv).option("topic", args.topic).option("group", args.group)
              .option("startingOffsets", args.starting_offsets)
              .option("commitToBroker", str(args.commit_to_broker).lower())
              .options(**connection_options(args)))
    if args.max_per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", str(args.max_per_trigger))
    for key, value in (item.split("=", 1) for item in args.option):
        reader = reader.option(key.strip(), value.strip())
    df = reader.load()

    writer = df.writeStream.queryName(args.query_name)
    if args.checkpoint:
        writer = writer.option("checkpointLocation", args.checkpoint)
    if args.sink == "parquet":
        writer = writer.format("parquet").option("path", args.path).partitionBy(*PARTITION_COLUMNS)
    elif args.sink == "delta":
        writer = writer.foreachBatch(delta_writer(args.path, f"spark_mq-consume:{os.path.abspath(args.checkpoint)}"))
    elif args.sink == "memory":
        writer = writer.format("memory")
    else:
        writer = writer.format("console").option("truncate", "true").option("numRows", "20")

    if args.trigger.lower() == "availablenow":
        writer = writer.trigger(availableNow=True)
    elif args.trigger.lower() == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)

    t0 = time.perf_counter()
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    for p in query.recentProgress:  # batches whose listener events had not arrived yet
        progress.report_progress(p)
    elapsed = time.perf_counter() - t0
    if query.exception() is not None:
        print(f"[consume] query failed: {query.exception()}", file=sys.stderr, flush=True)
        spark.stop()
        return 1
    last = query.lastProgress
    end = json.loads(last.sources[0].endOffset) if last is not None and last.sources else None
    if args.trigger.lower() == "once" and args.commit_to_broker and end:
        commit_once_offsets(args, end)
        print(f"[consume] committed the batch's end offsets for group {args.group}: {end}", flush=True)
    print(f"[consume] done: {progress.rows} rows in {elapsed:.1f}s into {args.sink}"
          + (f" {args.path}" if args.path else ""), flush=True)
    if args.sink == "memory":
        print(f"[consume] memory table {args.query_name}: {spark.table(args.query_name).count()} rows", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
