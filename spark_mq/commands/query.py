"""``spark-mq query``: look messages up by key and time window, or by id."""

from __future__ import annotations

import argparse

from spark_mq.commands.common import (
    add_command,
    body_preview,
    client_config,
    console,
    format_ms,
    message_json,
    parse_time_ms,
)
from spark_mq.common.errors import SparkMQError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "query", run, help="look messages up by key (and time window) or by message id",
                    description="Look messages up by --key on --topic within [--begin, --end] on every broker "
                                "of the topic (newest first), or by --id: an offsetMsgId is read from the broker "
                                "it names; a producer msgId (UNIQ_KEY) needs --topic.")
    p.add_argument("--topic", help="topic (required with --key; lets --id accept a producer msgId)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="a message key (one of its KEYS)")
    which.add_argument("--id", help="a message id: offsetMsgId, or UNIQ_KEY with --topic")
    p.add_argument("--begin", help="stored at or after (ISO 8601 or ms; default: the beginning)")
    p.add_argument("--end", help="stored at or before (ISO 8601 or ms; default: now)")
    p.add_argument("--max", type=int, default=64, help="most messages to show (default 64)")
    p.add_argument("--json", action="store_true", help="print JSON lines as `spark-mq consume --json` does")


def run(args: argparse.Namespace) -> int:
    from spark_mq.client.admin import SyncAdmin

    if args.key is not None and not args.topic:
        raise SparkMQError("--key needs --topic")
    begin = parse_time_ms(args.begin, "--begin") if args.begin else 0
    end = parse_time_ms(args.end, "--end") if args.end else None
    with SyncAdmin(client_config(args)) as admin:
        if args.key is not None:
            found = admin.query_by_key(args.topic, args.key, begin, end, args.max)
        else:
            hit = admin.view_message(args.id, args.topic)
            found = [hit] if hit is not None else []
    if not found:
        what = f"key {args.key} on {args.topic}" if args.key is not None else f"id {args.id}"
        raise SparkMQError(f"no message found for {what}")
    if args.json:
        for f in found:
            print(message_json(f.message))
        return 0
    _table(found)
    return 0


def _table(found) -> None:
    from rich.table import Table

    table = Table(title=f"{len(found)} message(s)")
    for name in ("msg id (offset)", "uniq key", "broker", "queue", "offset", "keys", "tags", "store time", "body"):
        table.add_column(name, justify="right" if name in ("queue", "offset") else "left")
    for f in found:
        m = f.message
        table.add_row(f.msg_id, f.uniq_key or "-", f.broker_name or "-", str(m.queue_id), str(m.queue_offset),
                      " ".join(m.keys) or "-", m.tags or "-", format_ms(m.store_timestamp), body_preview(m.body))
    console().print(table)
