"""A broker's restart up to its first served pull, in one process: what an instruction count of a restart
measures (``peers.py --workloads restart`` times the same path from outside, through a client and the
NameServer, and its wall seconds swing with the machine's load; instructions do not).

  prepare  a NameServer and a broker (``conf/broker.conf``, as ``peers.py`` runs them) filled with
           ``--messages`` bodies of ``--body`` bytes on topic ``bench_restart``, then stopped cleanly
  serve    in this process, what ``spark-mq broker`` runs (its config from the same parser, the start path
           imported with the cyclic GC off, ``broker.controller.run``) on ``--store``; once it serves, one
           plain PULL_MESSAGE (queue 0, offset 0, 1 message, no subscription filter) over a loopback socket,
           its answer checked (FOUND; the background start-up check, 2 s after the start, is held off: under
           valgrind it would begin before the pull); then a JSON line (numpy loaded?, CPU s) and ``os._exit``
           at once: the store is not stopped, so ``measure`` gives every run a fresh copy of the prepared one
  measure  ``--reps`` runs of ``serve`` (``--cachegrind``: each under ``valgrind --tool=cachegrind
           --cache-sim=no``, ``OPENBLAS_NUM_THREADS=1``), with a NameServer of its own; prints the
           instructions (M), CPU seconds and whether numpy was loaded, per run and their medians

    .venv/bin/python benchmarks/first_pull.py prepare --store /tmp/fp-store [--messages 20000 --body 1024]
    PYTHONPATH=TREE .venv/bin/python benchmarks/first_pull.py measure --store /tmp/fp-store --cachegrind
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOPIC = "bench_restart"
PULL_MESSAGES = 1  # as peers.py's restart probe asks (PullConsumer.pull(mq, 0, 1))
_INSTRUCTIONS = r"I\s+refs:\s+([\d,]+)"  # cachegrind's summary line


def prepare(store: Path, messages: int, body: int) -> None:
    """A store as ``peers.py``'s restart leaves it: filled by our client, stopped cleanly."""
    import shutil
    import tempfile

    from peer_systems.spark_mq_broker import SparkMQServer
    from peer_systems.workloads import body_pool

    workdir = Path(tempfile.mkdtemp(prefix="first-pull-prepare-"))
    server = SparkMQServer(workdir)
    try:
        server.start()
        server.wait_ready()

        async def fill() -> None:
            async with server.client_class(server.endpoint) as client:
                await client.create(TOPIC)
                await client.produce(TOPIC, body_pool(body), messages)

        asyncio.run(fill())
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(server.data_dir, store)
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)


def serve(store: Path, namesrv: str) -> None:
    """The restart up to the first served pull (see the module's docstring); never returns."""
    import gc

    from spark_mq.cli import _broker_config, build_parser

    root = Path(__file__).resolve().parents[1]
    args = build_parser("broker").parse_args(["broker", "-c", str(root / "conf" / "broker.conf"), "--namesrv",
                                              namesrv, "--port", "0", "--store", str(store), "--metrics-port", "0"])
    gc.disable()  # as cli._broker imports the start path
    from spark_mq.broker.controller import run

    gc.freeze()
    gc.enable()
    config = _broker_config(args)
    # the background start-up check waits 2 s after the store starts, ten times a restart's first pull; under
    # valgrind (~30x slower) it would begin before the pull and be counted: not part of the path measured
    from spark_mq.store import unit_checks

    unit_checks.STARTUP_CHECK_DELAY_S = 3600.0

    async def first_pull(address: str) -> None:
        from spark_mq.remoting.codec import decode_frame, encode
        from spark_mq.remoting.codes import RequestCode, ResponseCode
        from spark_mq.remoting.command import RemotingCommand

        fields = {"consumerGroup": "first_pull", "topic": TOPIC, "queueId": "0", "queueOffset": "0",
                  "maxMsgNums": str(PULL_MESSAGES), "sysFlag": "0", "commitOffset": "0",
                  "suspendTimeoutMillis": "0", "subVersion": "0"}
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(encode(RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)))
        size = int.from_bytes(await reader.readexactly(4), "big")
        response = decode_frame(await reader.readexactly(size))
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise SystemExit(f"the first pull was not served: {response.describe()}")
        print(json.dumps({"numpy": "numpy" in sys.modules, "cpu_s": time.process_time(),
                          "body_bytes": len(response.body)}), flush=True)
        os._exit(0)

    async def main() -> None:
        stop = asyncio.Event()
        tasks: list[asyncio.Task] = []
        await run(config, stop, lambda broker: tasks.append(asyncio.ensure_future(first_pull(broker.address))))

    asyncio.run(main())
    raise SystemExit("the broker stopped before its first pull was served")


def measure(store: Path, reps: int, cachegrind: bool) -> None:
    """``reps`` runs of ``serve``, each on its own copy of ``store`` (imports here stay out of ``serve``)."""
    import re
    import shutil
    import statistics
    import subprocess
    import tempfile

    from peer_systems.base import Child
    from peer_systems.spark_mq_broker import NAMESRV_READY, _cli, _read_ready

    workdir = Path(tempfile.mkdtemp(prefix="first-pull-"))
    namesrv = Child(_cli("namesrv", "--port", "0"), workdir / "namesrv.log", stdout_pipe=True)
    rows = []
    try:
        addr = _read_ready(namesrv, NAMESRV_READY, "spark-mq namesrv")
        for rep in range(reps):
            copy = workdir / f"store-{rep}"
            subprocess.run(["cp", "-a", "--sparse=always", str(store), str(copy)], check=True)
            cmd = [sys.executable, __file__, "serve", "--store", str(copy), "--namesrv", addr]
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
            if cachegrind:
                cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            shutil.rmtree(copy, ignore_errors=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                raise SystemExit(f"serve failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
            row = json.loads(lines[-1])
            found = re.search(_INSTRUCTIONS, done.stderr)
            row["instructions_m"] = int(found.group(1).replace(",", "")) / 1e6 if found else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        namesrv.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {"load": os.getloadavg()[0], "cpu_s_median": statistics.median(r["cpu_s"] for r in rows)}
    if cachegrind:
        summary["instructions_m_median"] = statistics.median(r["instructions_m"] for r in rows)
    print(json.dumps(summary))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("prepare", "serve", "measure"))
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--namesrv", default="127.0.0.1:9876")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cachegrind", action="store_true")
    args = p.parse_args()
    if args.mode == "prepare":
        prepare(args.store, args.messages, args.body)
    elif args.mode == "serve":
        serve(args.store, args.namesrv)
    else:
        measure(args.store, args.reps, args.cachegrind)


if __name__ == "__main__":
    main()
