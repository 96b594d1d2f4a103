"""``spark-mq consume``: print a topic's messages as a consumer group member, then commit."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from spark_mq.commands.common import add_command, client_api, client_config, message_json, parse_time_ms
from spark_mq.common.errors import SparkMQError

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_INVISIBLE_S = 30.0
MAX_POP = 32  # messages per pop (the broker's maximum)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "consume", run, help="print messages of a topic as a member of a consumer group",
                    description="Print the bodies (or JSON lines) of a topic's messages as a member of "
                                "--group, until --max messages or until nothing arrives for --timeout seconds; "
                                "then commit the group's offsets just past the last message printed of each "
                                "queue. --from applies to queues the group has no committed offset for.")
    p.add_argument("--topic", required=True, help="topic to consume")
    p.add_argument("--group", required=True, help="consumer group")
    p.add_argument("--tags", default="*", help="subscription expression (default '*'; e.g. 'a || b')")
    p.add_argument("--from", dest="from_", default="last", metavar="FROM",
                   help="where a queue with no committed offset starts: first, last (default), or a time "
                        "(ISO 8601 or ms since the epoch)")
    p.add_argument("--max", type=int, help="stop after this many messages")
    p.add_argument("--json", action="store_true",
                   help="print JSON lines (topic, queue_id, queue_offset, msg_id, keys, tags, properties, body, "
                        "store_timestamp; body in base64 with body_base64=true when not UTF-8)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"stop when nothing arrives for this many seconds (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--pop", action="store_true",
                   help="pop consumption (RocketMQ 5's SimpleConsumer): the broker hands messages out, each printed "
                        "one is acknowledged; any number of consumers of the group share the queues. --from takes "
                        "first or last only")
    p.add_argument("--invisible", type=float, default=DEFAULT_INVISIBLE_S,
                   help="with --pop: seconds a received message stays invisible to the group's other consumers "
                        f"(default {DEFAULT_INVISIBLE_S:g}); one received but not printed (past --max) comes back "
                        "after it")


def _consume_from(text: str) -> str | int:
    return text if text in ("first", "last") else parse_time_ms(text, "--from")


def run(args: argparse.Namespace) -> int:
    if args.max is not None and args.max < 1:
        raise SparkMQError("--max must be at least 1")
    consume_from = _consume_from(args.from_)
    if args.pop:
        return _run_pop(args)
    # offsets are committed by this command, exactly past what it printed: a poll may return more
    # messages than --max leaves room for, and those must stay unconsumed for the group
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.admin import SyncAdmin
    from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer

    with SyncAdmin(client_config(args)) as admin:  # a clear error before a consumer starts its threads
        if admin.route(args.topic) is None:
            raise SparkMQError(f"topic {args.topic!r} is not known to the NameServer at {args.namesrv}: check the "
                               f"name (`spark-mq admin topic list`) or create it (`spark-mq admin topic create`)")
    consumer = SyncLitePullConsumer(args.group, client_config(args), auto_commit=False, consume_from=consume_from)
    next_offsets: dict[tuple[bytes, str, int], int] = {}  # (store host, topic, queue) -> offset past the last printed
    printed = 0

    def emit(m) -> None:
        _print(sys.stdout, m, args.json)
        next_offsets[(m.store_host, m.topic, m.queue_id)] = m.queue_offset + 1

    try:
        consumer.subscribe(args.topic, args.tags)
        consumer.start()
        printed = _until_idle(args, lambda room, wait_s: consumer.poll(wait_s), emit)
    finally:
        consumer.shutdown()
        if next_offsets:
            _commit(args, next_offsets)
    print(f"consumed {printed} message(s) from {args.topic} as group {args.group}", file=sys.stderr, flush=True)
    return 0


def _until_idle(args: argparse.Namespace, receive: Callable[[int, float], list], emit: Callable[[Any], None]) -> int:
    """``receive(room, wait_s)`` and ``emit`` each message, until --max messages or nothing for --timeout seconds;
    returns how many were emitted (a message past --max is not: it stays unconsumed for the group)."""
    printed = 0
    idle_since = time.monotonic()
    while args.max is None or printed < args.max:
        left = args.timeout - (time.monotonic() - idle_since)
        if left <= 0:
            break
        room = sys.maxsize if args.max is None else args.max - printed
        messages = receive(room, min(left, 1.0))
        if messages:
            idle_since = time.monotonic()
        for m in messages[:room]:
            emit(m)
            printed += 1
        sys.stdout.flush()
    return printed


def _print(out, m, as_json: bool) -> None:
    out.write((message_json(m) if as_json else m.body.decode("utf-8", "replace")) + "\n")


def _run_pop(args: argparse.Namespace) -> int:
    """``--pop``: receive, print and acknowledge, until --max or --timeout."""
    if args.from_ not in ("first", "last"):
        raise SparkMQError("--pop takes --from first or --from last (a group new to a queue starts at its first "
                           "message or at its end)")
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.simple_consumer import INIT_MODE_MAX, INIT_MODE_MIN, SyncSimpleConsumer

    init_mode = INIT_MODE_MIN if args.from_ == "first" else INIT_MODE_MAX
    with SyncSimpleConsumer(args.group, client_config(args), {args.topic: args.tags}, init_mode=init_mode) as consumer:
        consumer.start()

        def emit(r) -> None:
            _print(sys.stdout, r.message, args.json)
            consumer.ack(r)

        printed = _until_idle(args, lambda room, wait_s: consumer.receive(min(room, MAX_POP), args.invisible, wait_s),
                              emit)
    print(f"consumed {printed} message(s) from {args.topic} as group {args.group} (pop)", file=sys.stderr, flush=True)
    return 0


def _commit(args: argparse.Namespace, next_offsets: dict[tuple[bytes, str, int], int]) -> None:
    """UPDATE_CONSUMER_OFFSET to the broker that stored each queue (its address is the messages' store host)."""
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.common.message import unpack_host

    with client_api(args) as api:
        for (host, topic, queue_id), offset in sorted(next_offsets.items()):
            api.update_consumer_offset(unpack_host(host), args.group, topic, queue_id, offset)
