"""``spark-mq status``: a cluster overview."""

from __future__ import annotations

import argparse

from spark_mq.commands.common import add_command, client_config, console
from spark_mq.common.errors import SparkMQError


def add_parser(sub: argparse._SubParsersAction) -> None:
    add_command(sub, "status", run, help="cluster overview: brokers, versions, commitlog, disk, topics, traffic",
                description="Every broker the NameServer knows, with its address, version, commitlog min/max "
                            "offset, disk ratio, topic count and messages in/out today.")


def _num(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def run(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    from spark_mq.client.admin import SyncAdmin

    with SyncAdmin(client_config(args)) as admin:
        brokers = admin.brokers()
        topics = admin.list_topics()
    out = console()
    if not brokers:
        raise SparkMQError(f"no broker is registered with the NameServer at {args.namesrv}: start `spark-mq broker`")
    table = Table(title=f"spark-mq cluster at {args.namesrv}")
    columns = ("cluster", "broker", "id", "address", "version", "commitlog min", "commitlog max", "disk ratio",
               "topics", "msgs in", "msgs out")
    for name in columns:
        table.add_column(name, justify="right" if name in columns[5:] or name == "id" else "left")
    for b in brokers:
        if b.error is not None:
            table.add_row(b.cluster, b.broker_name, str(b.broker_id), b.addr, f"[red]unreachable: {b.error}[/]",
                          *["-"] * 6)
            continue
        table.add_row(b.cluster, b.broker_name, str(b.broker_id), b.addr, b.version or "-",
                      _num(b.commitlog_min_offset), _num(b.commitlog_max_offset),
                      "-" if b.disk_ratio is None else f"{b.disk_ratio:.1%}", _num(b.topic_count),
                      _num(b.msg_put_total), _num(b.msg_get_total))
    out.print(table)
    out.print(f"{len(brokers)} broker(s), {len(topics)} topic(s) on the NameServer")
    return 0 if all(b.error is None for b in brokers) else 1
