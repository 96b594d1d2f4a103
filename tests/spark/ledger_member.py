"""A consumer-group member of a ``spark_mq`` stream in a process of its own, for the tests that stop it
(SIGSTOP) and resume it: it drives the stream reader as Spark's driver does (``initialOffset``, then per
trigger ``latestOffset``, ``partitions``, ``read`` of every partition, ``commit``) and writes a ledger,
one JSON object per line, flushed at once:

- ``{"plan": n, "ranges": [[queue_id, start, end], ...]}`` when batch ``n`` is planned;
- ``{"batch": n, "rows": [[queue_id, queue_offset, uniq_key], ...]}`` once its rows are read (processed).

SIGINT ends it after the batch under way (the reader then unlocks its queues and leaves the group).
With ``--stop-file``, once that file exists the member removes it and SIGSTOPs itself right after
processing a batch, before committing it: the point where a member's work is most at risk.

    python tests/spark/ledger_member.py NAMESRV TOPIC GROUP LEDGER [--trigger-s S] [--stop-file PATH]
                                        [--option key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from spark_mq.spark.options import SourceOptions
from spark_mq.spark.stream import SparkMQStreamReader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("ledger")
    parser.add_argument("--trigger-s", type=float, default=0.2)
    parser.add_argument("--stop-file", type=Path)
    parser.add_argument("--option", action="append", default=[], help="a source option as key=value")
    args = parser.parse_args()
    stopping: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.append(signum))
    options = {"namesrv": args.namesrv, "topic": args.topic, "group": args.group, "startingOffsets": "earliest",
               **dict(o.split("=", 1) for o in args.option)}
    reader = SparkMQStreamReader(SourceOptions.parse(options, streaming=True))
    with open(args.ledger, "a") as ledger:
        def write(record: dict) -> None:
            ledger.write(json.dumps(record) + "\n")
            ledger.flush()

        try:
            start = reader.initialOffset()
            batch = 0
            while not stopping:
                end = reader.latestOffset(start, ReadAllAvailable())
                parts = reader.partitions(start, end)
                write({"plan": batch, "ranges": [[p.value.queue_id, p.value.start, p.value.end] for p in parts]})
                rows: list[list] = []
                for part in parts:
                    for rb in reader.read(part):
                        columns = (rb.column(name).to_pylist() for name in ("queue_id", "queue_offset", "uniq_key"))
                        rows.extend(map(list, zip(*columns, strict=True)))
                write({"batch": batch, "rows": rows})
                if args.stop_file is not None and args.stop_file.exists():
                    args.stop_file.unlink()
                    os.kill(os.getpid(), signal.SIGSTOP)
                reader.commit(end)
                start, batch = end, batch + 1
                time.sleep(args.trigger_s)
        finally:
            reader.stop()


if __name__ == "__main__":
    main()
