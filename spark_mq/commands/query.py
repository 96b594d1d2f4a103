"""``spark-mq query``: look messages up by key and time window (on the brokers, and with ``--archive`` in
the topic's archive too), or by id."""

from __future__ import annotations

import argparse
import json

from spark_mq.commands.common import (
    add_command,
    body_preview,
    client_api,
    client_config,
    console,
    format_ms,
    message_json,
    parse_time_ms,
)
from spark_mq.common.errors import ConfigError, SparkMQError

DESCRIPTION = (
    "Look messages up by --key on --topic within [--begin, --end] on every broker of the topic (newest first), "
    "or by --id: an offsetMsgId is read from the broker it names; a producer msgId (UNIQ_KEY) needs --topic. "
    "With --archive ROOT a key lookup also searches the topic's archive under ROOT (what `spark-mq offload` "
    "wrote; pruned by partition and store-time statistics) and prints each message's tier: cold when it is "
    "archived (even if its broker still has it), hot when only a broker has it.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "query", run, help="look messages up by key (and time window) or by message id",
                    description=DESCRIPTION)
    p.add_argument("--topic", help="topic (required with --key; lets --id accept a producer msgId)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="a message key (one of its KEYS, or its UNIQ_KEY)")
    which.add_argument("--id", help="a message id: offsetMsgId, or UNIQ_KEY with --topic")
    p.add_argument("--begin", help="stored at or after (ISO 8601 or ms; default: the beginning)")
    p.add_argument("--end", help="stored at or before (ISO 8601 or ms; default: now)")
    p.add_argument("--archive", metavar="ROOT",
                   help="also search the archive under ROOT (tieredStoreRoot) for --key; adds a tier column")
    p.add_argument("--max", type=int, default=64, help="most messages to show (default 64)")
    p.add_argument("--json", action="store_true", help="print JSON lines as `spark-mq consume --json` does")


def run(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.admin import SyncAdmin

    if args.key is not None and not args.topic:
        raise SparkMQError("--key needs --topic")
    if args.archive is not None and args.key is None:
        raise ConfigError("--archive searches by --key: to find an archived message by id, pass its producer msgId "
                          "(UNIQ_KEY) as --key")
    begin = parse_time_ms(args.begin, "--begin") if args.begin else 0
    end = parse_time_ms(args.end, "--end") if args.end else None
    tiers = None
    if args.archive is not None:
        found, tiers = _across_tiers(args, begin, end)
    else:
        with SyncAdmin(client_config(args)) as admin:
            if args.key is not None:
                found = admin.query_by_key(args.topic, args.key, begin, end, args.max)
            else:
                hit = admin.view_message(args.id, args.topic)
                found = [hit] if hit is not None else []
    if not found:
        what = f"key {args.key} on {args.topic}" if args.key is not None else f"id {args.id}"
        raise SparkMQError(f"no message found for {what}{' in either tier' if tiers is not None else ''}")
    if args.json:
        for i, f in enumerate(found):
            line = message_json(f.message)
            print(line if tiers is None else json.dumps({**json.loads(line), "tier": tiers[i]}, ensure_ascii=False))
        return 0
    _table(found, tiers)
    return 0


def _across_tiers(args: argparse.Namespace, begin: int, end: int | None):
    """(messages, their tiers) carrying --key in the brokers and the archive, newest first, at most --max."""
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.admin import FoundMessage
    from spark_mq.common.config import split_addresses
    from spark_mq.tiered.lookup import TIER_COLUMN, TimeWindow, find_by_key, row_to_message

    window = TimeWindow(begin, end + 1 if end is not None else None)  # --end is inclusive, the window is not
    with client_api(args) as api:
        table = find_by_key(api, split_addresses(args.namesrv), args.topic, args.key, window, root=args.archive,
                            max_hot=args.max)
    rows = table.to_pylist()[::-1][: args.max]  # the lookup orders by store time; show the newest first
    return ([FoundMessage(row_to_message(r), r["broker_name"], r["msg_id"]) for r in rows],
            [r[TIER_COLUMN] for r in rows])


def _table(found, tiers: list[str] | None = None) -> None:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    table = Table(title=f"{len(found)} message(s)")
    columns = ("msg id (offset)", "uniq key", "broker", "queue", "offset", "keys", "tags", "store time", "body")
    for name in ("tier", *columns) if tiers is not None else columns:
        table.add_column(name, justify="right" if name in ("queue", "offset") else "left")
    for i, f in enumerate(found):
        m = f.message
        cells = [f.msg_id, f.uniq_key or "-", f.broker_name or "-", str(m.queue_id), str(m.queue_offset),
                 " ".join(m.keys) or "-", m.tags or "-", format_ms(m.store_timestamp), body_preview(m.body)]
        table.add_row(*([tiers[i], *cells] if tiers is not None else cells))
    console().print(table)
