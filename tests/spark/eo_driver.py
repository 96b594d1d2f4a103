"""A Spark driver of its own (a process the exactly-once tests start and SIGKILL): a streaming query
from the deterministic ``rate-micro-batch`` source (a replayed batch has the same rows) to the
``spark_mq`` sink with ``exactlyOnce=true``, resumed from its checkpoint by each run. Bodies are
``row-<value>`` for values below ``--rows``. Prints ``[eo] batch <id> done`` per micro-batch and
``[eo] DONE`` once every row's batch has committed.

    python eo_driver.py --namesrv H:P --topic T --checkpoint DIR --rows N --rows-per-batch M
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--rows-per-batch", type=int, required=True)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--exactly-once", default="true")
    args = p.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("spark_mq-eo-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args.rows_per_batch)
            .option("numPartitions", args.partitions).load()
            .where(F.col("value") < args.rows)
            .select(F.concat(F.lit("row-"), F.col("value").cast("string")).alias("body")))
    query = (rows.writeStream.format("spark_mq").option("namesrv", args.namesrv).option("topic", args.topic)
             .option("exactlyOnce", args.exactly_once).option("checkpointLocation", args.checkpoint)
             .start())
    seen = -1
    while query.isActive:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(f"[eo] batch {seen} done", flush=True)
            end = json.loads(progress["sources"][0]["endOffset"] or "{}")
            if int(end.get("offset", 0)) >= args.rows:
                query.stop()
                print("[eo] DONE", flush=True)
                break
        time.sleep(0.05)
    if query.exception() is not None:
        print(f"[eo] FAILED {query.exception()}", flush=True)
        sys.exit(1)
    spark.stop()


if __name__ == "__main__":
    main()
