"""The partition run's clients on a client host of their own (``_partitions.Side``: a ledger producer and a consumer
group), so a cut between the master and half the clients leaves the other half working.

Run as ``python partition_client.py --namesrv H:P --topic T --group G --stop F1 --drain F2 --out F3`` on the host:
produces and consumes until file F1 exists, then stops producing and writes its acknowledged keys to ``F3.acked``
(JSON); once file F2 exists (a JSON list of keys: every side's acknowledged ones), consumes until its group was given
them all (at most ``--timeout`` seconds), then writes ``Side.report()`` as JSON to F3.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from integration.machines._partitions import Side

WATCH_S = 0.1


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("namesrv", "topic", "group"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--stop", type=Path, required=True)
    p.add_argument("--drain", type=Path, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    side = Side(args.namesrv, args.topic, "client-host", args.group).start()
    try:
        while not args.stop.exists():
            time.sleep(WATCH_S)
        side.stop_producing()
        args.out.with_suffix(".acked").write_text(json.dumps(sorted(side.ledger.acked_keys())))
        while not args.drain.exists():
            time.sleep(WATCH_S)
        expected = set(json.loads(args.drain.read_text()))
        deadline = time.monotonic() + args.timeout
        while expected - {p[3] for p in list(side.processed)} and time.monotonic() < deadline:
            time.sleep(WATCH_S * 5)
    finally:
        side.close()
    args.out.write_text(json.dumps(side.report()))


if __name__ == "__main__":
    main()
