"""``spark-mq copy-store --from SLAVE_STORE --to MASTER_STORE``: rebuild a master whose store was lost
from its stopped slave's store (:mod:`spark_mq.store.store_copy` does the work and the checks)."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = (
    "Copy a stopped broker's store directory (e.g. a slave's) to an absent or empty one (e.g. the master's "
    "whose disk was lost), so that master starts with everything its slave holds. Refused while a broker "
    "runs on the source or when the target holds anything.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("copy-store", help="rebuild a lost master's store from its stopped slave's",
                       description=DESCRIPTION)
    p.add_argument("--from", dest="source", required=True, help="the store to copy (no broker running on it)")
    p.add_argument("--to", dest="target", required=True, help="the store to create (absent or empty)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` stays fast
    from spark_mq.store.store_copy import copy_store

    copied = copy_store(Path(args.source), Path(args.target))
    print(f"copied {args.source} to {args.target} ({copied} commitlog bytes)", flush=True)
    return 0
