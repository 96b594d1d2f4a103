"""Offload the cold messages of spark_mq topics into their archive tables (Delta or Parquet).

Run with ``spark-submit jobs/offload.py --namesrv H:P --topic T --root DIR [--format delta|parquet]
[--older-than 1h | --all]`` (or plain ``python``). For each queue of the topics, the range from the
archived-up-to offset to the cold boundary (full commitlog files by default, messages older than
--older-than, or everything with --all) is appended to ``<root>/<topic>/``, partitioned by broker_name
and queue_id and sorted by queue_offset, then the broker records the new archived-up-to offset.

The job needs no SparkSession: the driver pulls each range from its broker straight into Arrow and
writes it with deltalake or pyarrow (see ``spark_mq.tiered.offload``), so spark-submit only supplies
the environment. Exit codes: 0 done, 2 a usage or archive error (one line saying what to do).
"""

from __future__ import annotations

import argparse
import logging
import sys

from spark_mq.commands.common import add_credentials, add_namesrv, add_tls
from spark_mq.commands.offload import add_arguments, run
from spark_mq.common.errors import SparkMQError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="offload.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_namesrv(p)
    add_arguments(p)
    add_tls(p)
    add_credentials(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except SparkMQError as e:
        print(f"offload.py: error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
