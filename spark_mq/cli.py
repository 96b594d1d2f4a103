"""spark-mq: a RocketMQ-compatible message store whose consumers are Spark drivers.

Every command has --help. Errors exit non-zero with one line that says what to do.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from spark_mq.common.config import ControllerConfig
from spark_mq.common.errors import PortInUseError, SparkMQError


def _demo(args: argparse.Namespace) -> int:
    """Exercise the store end to end: produce, read back, look up by time and key, recover."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    import tempfile
    import time

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from spark_mq.common.config import BrokerConfig
    from spark_mq.common.message import MessageBatch
    from spark_mq.common.properties import encode_properties
    from spark_mq.common.unit.decode import decode_message
    from spark_mq.store.message_store import MessageStore

    console = Console()
    root = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="spark-mq-demo-"))
    config = BrokerConfig(store_path_root_dir=str(root), maped_file_size_commit_log=64 << 20,
                          max_hash_slot_num=500_000, max_index_num=2_000_000)
    topic, queues, batch_size = "DemoTopic", 4, 64
    body = b"x" * args.body_size
    console.print(f"[bold]spark-mq demo[/]: embedded store at {root}")
    with MessageStore(config) as store:
        start_offsets = {q: store.get_max_offset(topic, q) for q in range(queues)}
        t0 = time.perf_counter()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("producing", total=args.messages)
            sent = 0
            while sent < args.messages:
                n = min(batch_size, args.messages - sent)
                props = [encode_properties({"KEYS": f"order-{sent + i}", "TAGS": "even" if (sent + i) % 2 == 0
                                            else "odd"}) for i in range(n)]
                store.put_messages(MessageBatch.of(topic, (sent // batch_size) % queues, [body] * n, props))
                sent += n
                progress.update(task, advance=n)
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        read = 0
        for q in range(queues):
            offset = start_offsets[q]
            while True:
                got = store.get_messages(topic, q, offset, 1024)
                if got.count == 0:
                    break
                read += got.count
                offset = got.next_begin_offset
        get_s = time.perf_counter() - t0
        hits = store.query_by_key(topic, "order-42")
        table = Table(title="store demo")
        table.add_column("step")
        table.add_column("result", justify="right")
        table.add_row("messages produced", f"{args.messages:,} in {put_s:.2f}s ({args.messages / put_s:,.0f} msg/s)")
        table.add_row("messages read back", f"{read:,} in {get_s:.2f}s ({read / max(get_s, 1e-9):,.0f} msg/s)")
        table.add_row("query key order-42", f"{len(hits)} hit(s), body {decode_message(hits[0]).body[:8]!r}..."
                      if hits else "no hit")
        table.add_row("queues", ", ".join(f"{q}: [{store.get_min_offset(topic, q)}, {store.get_max_offset(topic, q)})"
                                           for q in range(queues)))
        console.print(table)
    with MessageStore(config) as store:
        console.print(f"reopened: recovery took {store.recovery.seconds * 1000:.1f} ms, "
                      f"commitlog ends at {store.commitlog.max_offset():,}")
    return 0 if read >= args.messages else 1


def _namesrv(args: argparse.Namespace) -> int:
    """Run a NameServer until SIGTERM/SIGINT; prints its listening address once bound."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.common.config import load_namesrv_config
    from spark_mq.namesrv.controller import serve

    overrides = {"listen_port": args.port} if args.port is not None else {}
    config, controller_config = load_namesrv_config(args.config, **overrides)
    return _run_until_signal(
        lambda: serve(config, lambda addr: print(f"spark-mq namesrv listening on {addr}", flush=True),
                      controller_config),
        "the NameServer", f"{config.listen_address}:{config.listen_port}")


def _controller(args: argparse.Namespace) -> int:
    """Run a replication controller (RocketMQ 5's mqcontroller) until SIGTERM/SIGINT: it keeps each broker
    set's master, SyncStateSet and epochs, and elects a new master when one dies. Prints its address once
    bound. Several sharing one ZooKeeper (controllerType=zookeeper) elect one leader; the others answer
    CONTROLLER_NOT_LEADER naming it, and one takes over when it dies."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.common.config import load_config
    from spark_mq.controller.server import serve

    overrides: dict[str, object] = {}
    if args.port is not None:
        overrides["listen_port"] = args.port
    if args.store is not None:
        overrides["controller_store_path"] = args.store
    config = load_config(ControllerConfig, args.config, **overrides) if args.config else ControllerConfig(**overrides)
    return _run_until_signal(
        lambda: serve(config, lambda addr: print(f"spark-mq controller listening on {addr}", flush=True)),
        "the controller", f"{config.listen_address}:{config.listen_port}")


def _controller_store_keys() -> str:
    """The controller's --help epilog: the keys that choose and reach its state store, with their defaults."""
    c = ControllerConfig
    return f"""where decisions and leadership live (controller.conf keys):
  controllerType=zookeeper|file   zookeeper: controllers sharing one ZooKeeper ensemble elect a leader
                                  and replace a dead one; file: one controller (a second on the same
                                  controllerStorePath is refused). Default: {c.controller_type}
  controllerStorePath=DIR         file: the state's directory, DIR/state.json (--store overrides it;
                                  default {c.controller_store_path})
  zookeeperConnectString=H:P,...  zookeeper: every ensemble member (default {c.zookeeper_connect_string})
  zookeeperRootPath=/PATH         zookeeper: the znode the state lives under (default {c.zookeeper_root_path})
  zookeeperSessionTimeoutMills=MS zookeeper: a dead leader is replaced after about this long (default
                                  {c.zookeeper_session_timeout_mills}; ZooKeeper raises it to 2 x its tickTime at least)
"""


def _run_until_signal(main: Callable[[], Awaitable[None]], what: str, where: str = "") -> int:
    """Run a server command's ``main`` (which stops on SIGTERM/SIGINT) on a new event loop; a port in use
    or another failure to listen on ``where`` (its address, when known) is one line naming ``what``."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.remoting.loop import new_event_loop

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    except PortInUseError as e:
        raise SparkMQError(f"cannot start {what}: {e}") from e
    except OSError as e:
        raise SparkMQError(f"cannot start {what}{f' on {where}' if where else ''}: {e.strerror or e}") from e
    finally:
        loop.close()
    return 0


def _broker_config(args: argparse.Namespace, **overrides: object):
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.common.config import BrokerConfig, load_config

    if getattr(args, "namesrv", None) is not None:
        overrides["namesrv_addr"] = args.namesrv
    if getattr(args, "port", None) is not None:
        overrides["listen_port"] = args.port
    if getattr(args, "store", None) is not None:
        overrides["store_path_root_dir"] = args.store
    if getattr(args, "metrics_port", None) is not None:
        overrides["metrics_port"] = args.metrics_port
    if getattr(args, "config", None):
        return load_config(BrokerConfig, args.config, **overrides)
    return BrokerConfig(**overrides)


def _broker(args: argparse.Namespace) -> int:
    """Run a broker until SIGTERM/SIGINT; prints its address once it serves."""
    # the start path's ~400 modules make ~30k objects that live as long as the process: with the cyclic GC on it
    # scans them ~90 times while they load (~10 ms of every start), so they load with it off and are then frozen
    # out of its way (the few cycles left over by imports are kept, not collected)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
        from spark_mq.broker.controller import serve
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()

    config = _broker_config(args)
    return _run_until_signal(
        lambda: serve(config, lambda addr: print(f"spark-mq broker serving at {addr}", flush=True)), "the broker")


def _dashboard(args: argparse.Namespace) -> int:
    """Serve the web console of the cluster --namesrv names (overview, topics, groups and lag, messages,
    the controller's view) on http://--host:--port/ until SIGTERM/SIGINT. Bound to 127.0.0.1 by default:
    the console changes the cluster. With ACL on the servers, operators log in with their account (kept
    in the console's memory, never in a page); --access-key signs the console's own sampling."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.commands.common import client_config
    from spark_mq.common.serve_until_signal import serve_until_signal

    config = _dashboard_config(client_config(args), args.host, args.port, args.controller, args.sample_interval,
                               args.allow_insecure_remote, args.archive)
    return _run_until_signal(lambda: serve_until_signal(lambda stop: _serve_dashboard(config, stop)),
                             "the console", f"{args.host}:{args.port}")


def _dashboard_config(client, host: str, port: int, controller: str | None = None,
                      sample_interval_s: float | None = None, allow_insecure_remote: bool = False,
                      archive: str | None = None):
    # lazy import: the console's web stack loads only for the commands that serve it
    import dataclasses

    from spark_mq.dashboard.auth import ANONYMOUS, Account
    from spark_mq.dashboard.server import DashboardConfig

    account = Account(client.access_key, client.secret_key, admin=True) if client.access_key else ANONYMOUS
    client = dataclasses.replace(client, access_key="", secret_key="")  # operators sign with their own account
    controllers = tuple(a.strip() for a in (controller or "").split(";") if a.strip())
    interval = {} if sample_interval_s is None else {"sample_interval_s": sample_interval_s}
    return DashboardConfig(client, host, port, account, controllers, allow_insecure_remote=allow_insecure_remote,
                           archive_root=archive or "", **interval)


async def _serve_dashboard(config, stop) -> None:
    # lazy import: the console's web stack loads only for the commands that serve it
    from spark_mq.dashboard.server import serve

    await serve(config, stop, lambda url: print(f"spark-mq dashboard: console on {url}", flush=True))


def _replica_configs(master, replicas: int) -> list:
    """The other members of ``master``'s set for ``spark-mq dev --replicas``: member k = 1.. on the master's
    port + 10 * k (any free one if the master's is 0), metrics port + k (off if the master's is), and its
    store next to the master's. Master/slave: slaves, id k, store ``<store>-slave<k>``. Controller mode
    (the master is replica 1): replicas k + 1 whose role the controller decides, store ``<store>-replica<k + 1>``."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    import dataclasses

    from spark_mq.common.config import SLAVE

    first = master.broker_id + 1
    store = "replica" if master.enable_controller_mode else "slave"
    return [dataclasses.replace(master, broker_id=first + k - 1, broker_role=SLAVE, ha_listen_port=0,
                                listen_port=master.listen_port and master.listen_port + 10 * k,
                                metrics_port=master.metrics_port and master.metrics_port + k,
                                store_path_root_dir=f"{master.store_path_root_dir}-{store}{first + k - 1}")
            for k in range(1, replicas)]


def _dev(args: argparse.Namespace) -> int:
    """Run a NameServer and a broker in one process, the store under ./data (the embedded
    broker the demo uses); with --replicas 2 or more, the broker is a master (--role) with that
    many members in its set, slaves replicating it. With --controller the NameServer also runs the
    replication controller (enableControllerInNamesrv, its state in <store>-controller) and the
    members are controller-mode replicas 1..N (allAckInSyncStateSet): the controller elects the
    master (replica 1 first) and a new one if it dies. With --tls every port (remoting, HA, metrics)
    serves TLS only, with throwaway certificates made in <store's directory>/tls (scripts/make_certs.py),
    and the servers dial each other over TLS. With --acl every server checks RocketMQ's ACL (aclEnable)
    against a plain_acl.yml written beside the store with fresh secrets: an admin account the servers
    sign their own requests with, and a publisher/subscriber account for you, exported by
    credentials.env (both files mode 0600; the secrets are never printed or logged). Stops on
    SIGTERM/SIGINT."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    import asyncio

    from spark_mq.acl.dev_accounts import write_dev_accounts
    from spark_mq.broker.controller import BrokerController, run
    from spark_mq.common.config import NamesrvConfig
    from spark_mq.common.serve_until_signal import serve_until_signal
    from spark_mq.namesrv.controller import NamesrvController

    if args.replicas < 1:
        raise SparkMQError(f"--replicas {args.replicas}: give the number of brokers in the set, 1 or more")
    if args.controller and args.replicas < 2:
        raise SparkMQError("--controller elects a master among replicas: give --replicas 2 or more (3 to survive "
                           "a death with a replica to spare)")

    accounts = write_dev_accounts(Path(args.store).resolve().parent) if args.acl else None
    security = _dev_tls(args)
    if accounts is not None:
        security.update(acl_enable=True, acl_file=str(accounts.acl_file), access_key=accounts.admin_access_key,
                        secret_key=accounts.admin_secret)

    async def main(stop: asyncio.Event) -> None:
        controller = (ControllerConfig(controller_store_path=f"{args.store}-controller", **security)
                      if args.controller else None)
        namesrv = NamesrvController(NamesrvConfig(listen_port=args.namesrv_port, **security),
                                    controller_config=controller)
        await namesrv.start()
        role = {"broker_role": args.role} if args.replicas > 1 else {}
        if controller is not None:  # replica ids start at 1: 0 is whichever replica is master
            role.update(enable_controller_mode=True, controller_addr=namesrv.address, broker_id=1,
                        all_ack_in_sync_state_set=True)
        master_config = _broker_config(args, namesrv_addr=namesrv.address, **role, **security)
        loop = asyncio.get_running_loop()
        brokers: list[BrokerController] = []
        tasks: list[asyncio.Task] = []
        try:
            for config in (master_config, *_replica_configs(master_config, args.replicas)):
                ready: asyncio.Future[BrokerController] = loop.create_future()
                tasks.append(loop.create_task(run(config, stop, ready.set_result)))
                await asyncio.wait([tasks[-1], ready], return_when=asyncio.FIRST_COMPLETED)
                if not ready.done():
                    tasks[-1].result()  # its start failed: raise why
                    return  # stopped by a signal while starting
                brokers.append(ready.result())
            _print_dev(args, namesrv, brokers, controller, accounts)
            if args.dashboard:
                tasks.append(loop.create_task(_serve_dashboard(_dev_dashboard_config(args, namesrv, accounts),
                                                               stop)))
            done, _ = await asyncio.wait([loop.create_task(stop.wait()), *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done & set(tasks):
                task.result()  # a broker that ended by itself failed (a role switch that could not start): why
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)  # every broker stopped; a failure was raised above
            await namesrv.stop()

    return _run_until_signal(lambda: serve_until_signal(main), "the dev servers")


def _dev_dashboard_config(args: argparse.Namespace, namesrv, accounts):
    """``spark-mq dev --dashboard``: the console of the dev cluster, on 127.0.0.1:--dashboard-port; with
    --acl it samples with the admin account and asks the operator to log in (credentials.env has theirs)."""
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.client.config import ClientConfig

    ca = str(Path(args.store).resolve().parent / "tls" / "ca.pem") if args.tls else ""
    client = ClientConfig(namesrv.address, tls_enable=args.tls, tls_trust_cert_path=ca,
                          access_key=accounts.admin_access_key if accounts else "",
                          secret_key=accounts.admin_secret if accounts else "")
    return _dashboard_config(client, "127.0.0.1", args.dashboard_port, namesrv.address if args.controller else None)


def _dev_tls(args: argparse.Namespace) -> dict[str, object]:
    """``spark-mq dev --tls``: the certificates (made once, in the store's directory) and the TLS keys every
    dev server gets: TLS only on every port, peers dialled over TLS; {} without --tls."""
    if not args.tls:
        return {}
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from pathlib import Path

    from spark_mq.commands.certs import make_certs

    certs = Path(args.store).resolve().parent / "tls"
    make_certs(certs, [], [])
    return {"tls_server_mode": "enforcing", "tls_server_cert_path": str(certs / "server.pem"),
            "tls_server_key_path": str(certs / "server.key"), "tls_enable": True,
            "tls_client_trust_cert_path": str(certs / "ca.pem")}


def _print_dev(args: argparse.Namespace, namesrv, brokers: list, controller: ControllerConfig | None,
               accounts) -> None:
    master = brokers[0]
    print(f"spark-mq dev: namesrv {namesrv.address}, broker {master.address}, store {master.config.root}",
          flush=True)
    if args.tls:
        ca = master.config.tls_client_trust_cert_path
        print(f"spark-mq dev: TLS only on every port; clients connect with `spark-mq produce --namesrv "
              f"{namesrv.address} --tls --tls-ca {ca} ...` (or SPARK_MQ_TLS_CA={ca}), ClientConfig(tls_enable=True, "
              f"tls_trust_cert_path={ca!r}); metrics on https", flush=True)
    if controller is not None:
        print(f"spark-mq dev: controller in the namesrv {namesrv.address} (state {controller.controller_store_path}); "
              f"replica 1 asks for the first election, `spark-mq admin controller` shows the set", flush=True)
        for b in brokers:
            print(f"spark-mq dev: replica {b.config.broker_id} {b.address} (store {b.config.root})", flush=True)
    elif args.replicas > 1:
        print(f"spark-mq dev: master {master.address} ({args.role}, HA port {master.ha_port})", flush=True)
        for slave in brokers[1:]:
            print(f"spark-mq dev: slave {slave.config.broker_id} {slave.address} (SLAVE, store "
                  f"{slave.config.root})", flush=True)
    if accounts is not None:
        print(f"spark-mq dev: ACL on: accounts in {accounts.acl_file} (mode 0600); the servers sign with admin account "
              f"{accounts.admin_access_key}; yours is {accounts.user_access_key} (send and read any topic)", flush=True)
        print(f"spark-mq dev: for the CLI and jobs: source {accounts.credentials_file} (exports SPARK_MQ_ACCESS_KEY "
              f"and SPARK_MQ_SECRET_KEY); in Spark: .option('accessKey', '{accounts.user_access_key}')"
              f".option('secretKey', os.environ['SPARK_MQ_SECRET_KEY'])", flush=True)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; when ``only`` names a server command, without the client
    commands, so a starting server does not import and build their parsers."""
    parser = argparse.ArgumentParser(prog="spark-mq", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if only in SERVER_COMMANDS:  # argparse's formatter and translations cost ~1 ms a parser at a server's start
        SERVER_COMMANDS[only](sub)
        return parser
    for add_command in SERVER_COMMANDS.values():
        add_command(sub)
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.commands import add_client_commands, copy_store, offload

    add_client_commands(sub)  # produce, consume, admin, query, status
    offload.add_parser(sub)
    copy_store.add_parser(sub)
    _add_dashboard_command(sub)
    return parser


def _add_dashboard_command(sub: argparse._SubParsersAction) -> None:
    # lazy import: a command loads only what it runs (a broker's restart time is mostly imports)
    from spark_mq.commands.common import add_command

    dashboard = add_command(sub, "dashboard", _dashboard, help="serve the web console of a cluster",
                            description=_dashboard.__doc__)
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="address to listen on (default 127.0.0.1: this machine only; the console changes "
                                "the cluster)")
    dashboard.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080, 0 picks one)")
    dashboard.add_argument("--controller", help="replication controller address(es), ';'-separated, for the "
                                                "controller's view (default: ask the NameServers)")
    dashboard.add_argument("--sample-interval", type=float,
                           help="seconds between the samples the charts draw (default 10; an hour is kept)")
    dashboard.add_argument("--archive", metavar="ROOT",
                           help="the tiered archive's root (tieredStoreRoot, as spark-mq offload --root): topic pages "
                                "then show each queue's archived range, bytes and table version")
    dashboard.add_argument("--allow-insecure-remote", action="store_true",
                           help="let --host be other than loopback: the console then serves plain HTTP to the "
                                "network (a trusted one only; better, a TLS reverse proxy on this machine)")


def _add_demo_command(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run the demo on an embedded local store",
                          description=_demo.__doc__)
    demo.add_argument("--messages", type=int, default=200_000, help="messages to produce (default 200000)")
    demo.add_argument("--body-size", type=int, default=100, help="body bytes per message (default 100)")
    demo.add_argument("--store", help="store directory (default: a new temporary directory)")
    demo.set_defaults(func=_demo)


def _add_namesrv_command(sub: argparse._SubParsersAction) -> None:
    namesrv = sub.add_parser("namesrv", help="run a NameServer", description=_namesrv.__doc__)
    namesrv.add_argument("-c", "--config", help="namesrv.conf properties file (default: built-in defaults)")
    namesrv.add_argument("--port", type=int, help="listen port, overriding the file (0 picks a free port)")
    namesrv.set_defaults(func=_namesrv)


def _add_controller_command(sub: argparse._SubParsersAction) -> None:
    controller = sub.add_parser("controller", help="run a replication controller (automatic failover)",
                                description="\n".join(line.strip() for line in _controller.__doc__.splitlines()),
                                epilog=_controller_store_keys(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    controller.add_argument("-c", "--config", help="controller.conf properties file (default: built-in defaults)")
    controller.add_argument("--port", type=int, help="listen port, overriding listenPort (0 picks a free port)")
    controller.add_argument("--store", help="state directory, overriding controllerStorePath (controllerType=file)")
    controller.set_defaults(func=_controller)


def _add_broker_command(sub: argparse._SubParsersAction) -> None:
    broker = sub.add_parser("broker", help="run a broker", description=_broker.__doc__)
    broker.add_argument("-c", "--config", help="broker.conf properties file (default: built-in defaults)")
    broker.add_argument("--namesrv", help="NameServer address(es), ';'-separated, overriding namesrvAddr")
    broker.add_argument("--port", type=int, help="listen port, overriding listenPort (0 picks a free port)")
    broker.add_argument("--store", help="store directory, overriding storePathRootDir")
    broker.add_argument("--metrics-port", type=int, help="Prometheus port, overriding metricsPort (0 = off)")
    broker.set_defaults(func=_broker)


def _add_dev_command(sub: argparse._SubParsersAction) -> None:
    dev = sub.add_parser("dev", help="run a NameServer and a broker (or a master/slave set) in one process",
                         description=_dev.__doc__)
    dev.add_argument("--namesrv-port", type=int, default=9876, help="NameServer port (default 9876)")
    dev.add_argument("--port", type=int, default=10911, help="broker port (default 10911)")
    dev.add_argument("--store", default="./data/store", help="store directory (default ./data/store)")
    dev.add_argument("--metrics-port", type=int, default=9100, help="Prometheus port (default 9100, 0 = off)")
    dev.add_argument("--replicas", type=int, default=1,
                     help="brokers in the set (default 1): 2 starts a master and a slave replicating it, slave N "
                          "on --port + 10*N with its store at <store>-slaveN and metrics on --metrics-port + N")
    dev.add_argument("--controller", action="store_true",
                     help="with --replicas 2+: run the replication controller in the NameServer and the members as "
                          "controller-mode replicas 1..N (automatic failover); its state at <store>-controller")
    dev.add_argument("--acl", action="store_true",
                     help="check RocketMQ's ACL on every server: a plain_acl.yml with fresh secrets beside the store "
                          "(an admin account for the servers, a publisher/subscriber one for you, exported by "
                          "credentials.env; both mode 0600)")
    dev.add_argument("--role", choices=("ASYNC_MASTER", "SYNC_MASTER"), default="ASYNC_MASTER",
                     help="the master's brokerRole with --replicas 2+ (default ASYNC_MASTER: a send returns once "
                          "stored on the master; SYNC_MASTER: once a slave has it)")
    dev.add_argument("--tls", action="store_true",
                     help="TLS only on every port (remoting, HA, metrics), with throwaway certificates made in "
                          "<store's directory>/tls; prints how clients connect")
    dev.add_argument("--dashboard", action="store_true",
                     help="also serve the web console (as `spark-mq dashboard`) on 127.0.0.1:--dashboard-port")
    dev.add_argument("--dashboard-port", type=int, default=8080, help="the console's port (default 8080)")
    dev.set_defaults(func=_dev)


# a server command's parser, built alone when that command runs (``build_parser``)
SERVER_COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "demo": _add_demo_command, "namesrv": _add_namesrv_command, "controller": _add_controller_command,
    "broker": _add_broker_command, "dev": _add_dev_command,
}


def _command_of(argv: list[str]) -> str | None:
    """The command ``argv`` runs (top-level options take no value), None if it asks for the
    top-level help or names no command."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


# numpy's OpenBLAS starts a thread per core as numpy loads (~50 ms of CPU in every broker start on 2 cores),
# for the float linear algebra no command does; one thread unless the operator asks for more
BLAS_THREADS_DEFAULT = "1"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", BLAS_THREADS_DEFAULT)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_of(argv)).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format='{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}',
    )
    try:
        return args.func(args)
    except SparkMQError as e:
        print(f"spark-mq: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
