"""The Spark side of the standalone-cluster test, run with ``spark-submit``: writes ``--rows`` rows to
``--topic`` with the spark_mq sink, reads them back with the batch source (both with the options
``accessKey``/``secretKey`` and ``tls*`` of ``--access-key``/``--secret-key``/``--tls*`` or their environment
variables, as the jobs/ scripts take an account and TLS), prints the read's ``explain`` output, then prints
its UI's address and keeps the application (and so its UI) up until the file ``--hold-until`` exists, for the
test to fetch the pages (spark-submit does not pass its stdin on to a Python application).

Prints ``[sink_job] wrote N``, ``[sink_job] read N``, the explain text between ``[sink_job] explain`` lines
and ``[sink_job] ui URL``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from spark_mq.commands.common import add_credentials, add_tls, client_config
from spark_mq.spark.options import Connection
from spark_mq.spark.session import build_session

HOLD_POLL_S = 0.2


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--hold-until", type=Path, required=True)
    add_credentials(p)
    add_tls(p)
    args = p.parse_args()
    options = Connection.of(client_config(args)).spark_options()
    spark = build_session("spark_mq-sink-job")
    rows = spark.range(args.rows).selectExpr("CAST(id AS STRING) AS keys", "CAST(CONCAT('row-', id) AS BINARY) AS body")
    rows.write.format("spark_mq").mode("append").option("namesrv", args.namesrv).option("topic", args.topic) \
        .options(**options).save()
    print(f"[sink_job] wrote {args.rows}", flush=True)
    read = spark.read.format("spark_mq").option("namesrv", args.namesrv).option("topic", args.topic) \
        .options(**options).load()
    print(f"[sink_job] read {read.count()}", flush=True)
    print("[sink_job] explain", flush=True)
    read.explain(mode="extended")
    print("[sink_job] explain", flush=True)
    print(f"[sink_job] ui {spark.sparkContext.uiWebUrl}", flush=True)
    while not args.hold_until.exists():  # the test fetches the UI's pages, then makes the file
        time.sleep(HOLD_POLL_S)
    spark.stop()


if __name__ == "__main__":
    main()
