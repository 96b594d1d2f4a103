"""``spark-mq admin``: topics (create, list, delete, stats), broker sets and replication lag, the
replication controllers (leader, epochs, SyncStateSets), group lag, offset resets."""

from __future__ import annotations

import argparse

from spark_mq.commands.common import add_command, client_config, console, format_ms, parse_time_ms
from spark_mq.common.config import split_addresses
from spark_mq.common.errors import SparkMQError

_PERMS = {"rw": 6, "r": 4, "w": 2, "-": 0}


def _perm(text: str) -> int:
    if text in _PERMS:
        return _PERMS[text]
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"perm {text!r}: give rw, r, w, or RocketMQ's number (6 = read+write)")


def _actions(what: argparse._SubParsersAction, name: str, *, help: str, description: str) -> argparse._SubParsersAction:
    """``spark-mq admin <name>`` and its ACTION subcommands (chosen in ``args.<name>_command``)."""
    parser = what.add_parser(name, help=help, description=description)
    return parser.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def add_parser(sub: argparse._SubParsersAction) -> None:
    admin = sub.add_parser("admin", help="administer topics, consumer groups and offsets",
                           description="Administer topics, consumer groups and offsets through the NameServers.")
    what = admin.add_subparsers(dest="admin_command", required=True, metavar="WHAT")

    actions = _actions(what, "topic", help="create, list, delete topics; show a topic's queues",
                       description="Create, list and delete topics; show a topic's queue offsets.")
    create = add_command(actions, "create", _topic_create, help="create or update a topic",
                         description="Create or update a topic on every broker of --cluster (default: of "
                                     "every cluster), or on one --broker-addr.")
    create.add_argument("--topic", required=True)
    create.add_argument("--cluster", help="cluster whose brokers get the topic (default: every cluster)")
    create.add_argument("--broker-addr", help="one broker (host:port) instead of a cluster")
    create.add_argument("--queues", type=int, default=8, help="read and write queue count (default 8)")
    create.add_argument("--read-queues", type=int, help="read queue count (default: --queues)")
    create.add_argument("--write-queues", type=int, help="write queue count (default: --queues)")
    create.add_argument("--perm", type=_perm, default=6, help="rw (default), r, w, or a RocketMQ perm number")
    create.add_argument("--order", action="store_true", help="mark the topic as ordered")
    add_command(actions, "list", _topic_list, help="list every topic the NameServer knows",
                          description="List every topic the NameServer knows, sorted.")
    delete = add_command(actions, "delete", _topic_delete, help="delete a topic from its brokers and the NameServers",
                         description="Delete a topic from its brokers (of --cluster only, if given) and "
                                     "from every NameServer.")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--cluster", help="only from this cluster's brokers")
    stats = add_command(actions, "stats", _topic_stats,
                        help="min/max offset, last store time and archived offset per queue",
                        description="Min and max offset, the last message's store time and the archived-up-to "
                                    "offset (tiered storage) of every queue.")
    stats.add_argument("--topic", required=True)

    add_command(what, "cluster", _cluster, help="broker sets: members, roles and replication lag",
                description="Every broker set the NameServer knows: each member's name, id, address and role, "
                            "and each slave's replication lag in bytes and seconds as its master reports it "
                            "(GET_BROKER_RUNTIME_INFO: slaveFallBehindMuch; with several slaves, the figures "
                            "are the most advanced one's); for controller-mode brokers also each one's replica id "
                            "at the controller and the last master epoch in its epoch file, with the commitlog "
                            "offset that epoch starts at.")

    controller = add_command(
        what, "controller", _controller, help="replication controllers: leader, masters, epochs, SyncStateSets",
        description="Each replication controller's role, and from the leader every broker set's master, master "
                    "epoch, SyncStateSet (with its epoch) and the replicas outside it, alive or not "
                    "(CONTROLLER_GET_METADATA_INFO, CONTROLLER_GET_SYNC_STATE_DATA).")
    controller.add_argument("--controller", help="controller address(es), ';'-separated (default: the NameServers, "
                                                 "for a controller embedded in them)")
    controller.add_argument("--broker-name", action="append",
                            help="only this broker set (repeatable; default: every set the NameServers know)")

    group_actions = _actions(what, "group", help="consumer group settings and progress",
                             description="Consumer group settings and progress.")
    update = add_command(
        group_actions, "update", _group_update, help="create or update a group's settings on its brokers",
        description="Create or update the consumer group on every master (of --cluster, default every cluster): "
                    "RocketMQ's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, an admin request when the brokers check ACLs. "
                    "The group's settings are replaced whole.")
    update.add_argument("--group", required=True)
    update.add_argument("--orderly", action="store_true",
                        help="consumeMessageOrderly: RocketMQ 5.x consumers of the group read each queue in order "
                             "(FIFO messages of a message group one after another)")
    update.add_argument("--retry-max-times", type=int, default=16, help="redeliveries before the DLQ (default 16)")
    update.add_argument("--cluster", help="only this cluster's masters")
    clients = add_command(group_actions, "clients", _group_clients, help="the group's online clients per broker",
                          description="The online consumers of the group (with --producer: producers of the "
                                      "producer group), remoting and RocketMQ 5.x gRPC clients, on every master: "
                                      "client id, address, language, version.")
    clients.add_argument("--group", required=True)
    clients.add_argument("--producer", action="store_true", help="a producer group (5.x producers of topic T: "
                                                                 "rmq_grpc_producer_T)")
    lag = add_command(group_actions, "lag", _group_lag, help="broker offset, committed offset and lag per queue",
                      description="The group's broker offset, committed offset, lag and last consumed "
                                  "store time per queue, and the total lag.")
    lag.add_argument("--group", required=True)
    lag.add_argument("--topic", help="only this topic (default: every topic the group has offsets for)")

    offset_actions = _actions(what, "offsets", help="reset a group's offsets", description="Reset a group's offsets.")
    reset = add_command(
        offset_actions, "reset", _offsets_reset, help="move a group's offsets to the first message at or after a time",
        description="Move the group's committed offset of every queue of --topic to the first message stored at "
                    "or after --to-time (the brokers do it: with ACLs on, an admin account). The group's online "
                    "consumers go on from the new offsets.")
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True)
    reset.add_argument("--to-time", required=True, help="ISO 8601 time (local unless it has an offset) or ms")


def _admin(args: argparse.Namespace):
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from spark_mq.client.admin import SyncAdmin

    return SyncAdmin(client_config(args))


def _topic_create(args: argparse.Namespace) -> int:
    read = args.read_queues or args.queues
    write = args.write_queues or args.queues
    with _admin(args) as admin:
        addrs = admin.create_topic(args.topic, cluster=args.cluster, broker_addr=args.broker_addr,
                                   read_queue_nums=read, write_queue_nums=write, perm=args.perm, order=args.order)
    print(f"topic {args.topic} created/updated on {', '.join(addrs)} ({read} read / {write} write queues, "
          f"perm {args.perm}{', ordered' if args.order else ''})")
    return 0


def _topic_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        topics = admin.list_topics()
    for topic in topics:
        print(topic)
    return 0


def _topic_delete(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        addrs = admin.delete_topic(args.topic, cluster=args.cluster)
    where = ", ".join(addrs) if addrs else "no broker (it was routed nowhere)"
    print(f"topic {args.topic} deleted from {where} and from the NameServers")
    return 0


def _topic_stats(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    with _admin(args) as admin:
        stats = admin.topic_stats(args.topic)
    table = Table(title=f"topic {args.topic}")
    for name, justify in (("broker", "left"), ("queue", "right"), ("min offset", "right"), ("max offset", "right"),
                          ("messages", "right"), ("last store time", "left"), ("archived to", "right")):
        table.add_column(name, justify=justify)
    for q in stats.queues:
        table.add_row(q.broker_name, str(q.queue_id), str(q.min_offset), str(q.max_offset), str(q.count),
                      format_ms(q.last_update_timestamp), "-" if q.archived_offset is None else str(q.archived_offset))
    out = console()
    out.print(table)
    out.print(f"total messages: {stats.total_messages}")
    return 0


def _cluster(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    with _admin(args) as admin:
        brokers = admin.brokers()
    if not brokers:
        raise SparkMQError(f"no broker is registered with the NameServer at {args.namesrv}: start `spark-mq broker`")
    masters = {b.broker_name: b for b in brokers if b.broker_id == 0}
    controller_mode = any(b.replica_id is not None for b in brokers)
    table = Table(title=f"broker sets at {args.namesrv}")
    for name, justify in (("cluster", "left"), ("broker", "left"), ("id", "right"), ("address", "left"),
                          ("role", "left"), ("commitlog max", "right"), ("lag bytes", "right"),
                          ("lag seconds", "right"), ("state", "left")):
        table.add_column(name, justify=justify)
    if controller_mode:
        table.add_column("replica id", justify="right")
        table.add_column("epoch (from offset)", justify="right")
    for b in brokers:
        lag_bytes = lag_seconds = "-"
        master = masters.get(b.broker_name)
        if b.broker_id != 0 and master is not None and master.error is None:
            if master.slave_lag_bytes is None:
                lag_bytes = lag_seconds = "not connected"
            else:
                lag_bytes = str(master.slave_lag_bytes)
                lag_seconds = f"{master.slave_lag_seconds or 0.0:.1f}"
        state = "ok" if b.error is None else f"unreachable: {b.error}"
        max_offset = "-" if b.commitlog_max_offset is None else str(b.commitlog_max_offset)
        row = [b.cluster, b.broker_name, str(b.broker_id), b.addr, b.role, max_offset, lag_bytes, lag_seconds, state]
        if controller_mode:
            epoch = b.epoch
            row += ["-" if b.replica_id is None else str(b.replica_id),
                    "-" if epoch is None else f"{epoch[0]} ({epoch[1]})"]
        table.add_row(*row)
    console().print(table)
    return 0 if all(b.error is None for b in brokers) else 1


def _controller(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    addrs = split_addresses(args.controller or args.namesrv)
    with _admin(args) as admin:
        view = admin.controller_view(addrs, args.broker_name)
    out = console()
    roles = Table(title="controllers")
    roles.add_column("address")
    roles.add_column("role")
    for addr, role in view.roles.items():
        roles.add_row(addr, role)
    out.print(roles)
    if view.leader is None:
        out.print("no controller leads: nothing to show (start one, or check --controller)")
        return 1
    sets = Table(title=f"broker sets (from the leader, {view.leader})")
    for name, justify in (("broker", "left"), ("master", "left"), ("master epoch", "right"),
                          ("SyncStateSet", "left"), ("set epoch", "right"), ("not in sync", "left")):
        sets.add_column(name, justify=justify)

    def members(replicas) -> str:
        return ", ".join(f"{r.broker_id}@{r.broker_address}{'' if r.alive else ' (dead)'}" for r in replicas) or "-"

    for name, info in sorted(view.broker_sets.items()):
        master = "none" if info.master_broker_id is None else f"{info.master_broker_id}@{info.master_address}"
        sets.add_row(name, master, str(info.master_epoch), members(info.in_sync_replicas),
                     str(info.sync_state_set_epoch), members(info.not_in_sync_replicas))
    out.print(sets)
    return 0


def _group_update(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        addrs = admin.update_group(args.group, orderly=args.orderly, retry_max_times=args.retry_max_times,
                                   cluster=args.cluster)
    console().print(f"group {args.group} (orderly {args.orderly}, retryMaxTimes {args.retry_max_times}) "
                    f"written to {', '.join(addrs)}")
    return 0


def _group_clients(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    with _admin(args) as admin:
        listing = admin.group_clients(args.group, producers=args.producer)
    if not listing:
        raise SparkMQError(f"{'producer' if args.producer else 'consumer'} group {args.group} has no client online")
    table = Table(title=f"{'producer' if args.producer else 'consumer'} group {args.group}")
    for name in ("broker", "client id", "address", "language", "version"):
        table.add_column(name)
    for addr, conns in listing.items():
        for c in conns:
            table.add_row(addr, c.client_id, c.client_addr, c.language, str(c.version))
    console().print(table)
    return 0


def _group_lag(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    with _admin(args) as admin:
        progress = admin.group_progress(args.group, args.topic)
    out = console()
    if not progress.queues:
        raise SparkMQError(f"group {args.group} has no offsets{' on topic ' + args.topic if args.topic else ''} "
                           f"and no online member: has it consumed anything yet?")
    table = Table(title=f"group {args.group}")
    for name, justify in (("topic", "left"), ("broker", "left"), ("queue", "right"), ("broker offset", "right"),
                          ("consumer offset", "right"), ("lag", "right"), ("last consumed store time", "left")):
        table.add_column(name, justify=justify)
    for q in progress.queues:
        table.add_row(q.topic, q.broker_name, str(q.queue_id), str(q.broker_offset), str(q.consumer_offset),
                      str(q.lag), format_ms(q.last_timestamp))
    out.print(table)
    out.print(f"total lag: {progress.total_lag}  consume tps: {progress.consume_tps:.1f}")
    return 0


def _offsets_reset(args: argparse.Namespace) -> int:
    # lazy import: loaded when the command runs, so `spark-mq --help` and a broker's start stay fast
    from rich.table import Table

    when = parse_time_ms(args.to_time, "--to-time")
    with _admin(args) as admin:
        offsets = admin.reset_offsets_by_time(args.group, args.topic, when)
    table = Table(title=f"group {args.group} on {args.topic} reset to {format_ms(when)}")
    for name, justify in (("broker", "left"), ("queue", "right"), ("new offset", "right")):
        table.add_column(name, justify=justify)
    for mq, offset in sorted(offsets.items()):
        table.add_row(mq.broker_name, str(mq.queue_id), str(offset))
    console().print(table)
    return 0
