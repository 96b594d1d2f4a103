"""``spark-mq produce``: one message per input line, sent in batches."""

from __future__ import annotations

import argparse
import sys

from spark_mq.commands.common import add_command, client_config
from spark_mq.common.errors import SparkMQError

DEFAULT_GROUP = "spark-mq-cli-producer"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "produce", run, help="send one message per line of stdin or a file",
                    description="Send one message per line of stdin (or of --file), in batches of --batch; "
                                "prints a summary line with the counts and the last message id. Empty lines "
                                "are skipped (RocketMQ stores no empty body).")
    p.add_argument("--topic", required=True, help="topic to send to")
    p.add_argument("--key", help="KEYS of every message (space-separated for several)")
    p.add_argument("--tag", help="TAGS of every message")
    p.add_argument("--delay-level", type=int, default=0,
                   help="deliver every message after this delay level (1 = the broker's first messageDelayLevel; "
                        "default 0: at once)")
    p.add_argument("--batch", type=int, default=32, help="messages per send (default 32; 1 = one send each)")
    p.add_argument("--file", help="read lines from this file instead of stdin")
    p.add_argument("--group", default=DEFAULT_GROUP, help=f"producer group (default {DEFAULT_GROUP})")


def _lines(args: argparse.Namespace):
    if args.file is None:
        yield from sys.stdin.buffer
        return
    try:
        f = open(args.file, "rb")
    except OSError as e:
        raise SparkMQError(f"cannot read --file {args.file}: {e.strerror or e}") from e
    with f:
        yield from f


def run(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.producer import SyncProducer
    from spark_mq.common.message import Message

    if args.batch < 1:
        raise SparkMQError("--batch must be at least 1")
    if args.delay_level < 0:
        raise SparkMQError("--delay-level must be 0 (no delay) or a level from 1")
    producer = SyncProducer(args.group, client_config(args))
    producer.start()
    sent = skipped = batches = 0
    last_id = last_offset_id = None
    pending: list[Message] = []

    def flush() -> None:
        nonlocal sent, batches, last_id, last_offset_id
        results = [producer.send(pending[0])] if len(pending) == 1 else producer.send_batch(list(pending))
        for r in results:
            last_id = (r.msg_ids or [last_id])[-1]
            last_offset_id = (r.offset_msg_ids or [last_offset_id])[-1]
        sent += len(pending)
        batches += 1
        pending.clear()

    try:
        for raw in _lines(args):
            body = raw.rstrip(b"\r\n") if raw.endswith(b"\r\n") else raw.rstrip(b"\n")
            if not body:
                skipped += 1
                continue
            pending.append(Message(args.topic, body, tags=args.tag, keys=args.key, delay_level=args.delay_level))
            if len(pending) >= args.batch:
                flush()
        if pending:
            flush()
    finally:
        producer.shutdown()
    print(f"produced {sent} message(s) to {args.topic} in {batches} send(s), {skipped} empty line(s) skipped; "
          f"last msg id {last_id or '-'} (offset msg id {last_offset_id or '-'})", flush=True)
    return 0
