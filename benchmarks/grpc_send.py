"""gRPC send (RocketMQ 5.x's official Python client) against remoting send (our ``Producer``) to one broker (issue 28).

A NameServer and a broker with ``enableGrpcEndpoint=true`` (default config otherwise, store in a temp dir under
``--dir``). Each run sends ``--messages`` 100-byte messages to a topic of 4 queues, after an untimed warm-up: one at a
time (sync) and ``--inflight`` at a time (async), over remoting with ``spark_mq.client.producer.Producer`` in this
process and over gRPC with the 5.x client (``benchmarks/_rmq5_send.py`` in ``.venv-rmq5``, or the python RMQ5_PYTHON
names; made by scripts/install_rmq5_client.sh), each ``--reps`` times, taking turns. Per run: msg/s (messages over
the seconds from the first send to the last answer), each send's latency (p50, p99: call to answer, as the client
sees it) and the broker process's CPU seconds (user + system, ``/proc``) per message. The median run of each kind
is shown.

    .venv/bin/python benchmarks/grpc_send.py [--messages 5000] [--inflight 32] [--reps 3] [--json FILE] [--quick]
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import TOPIC, code_version, create_topic, dump_json, local_cluster, machine_line, parser, print_table

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.common.message import Message

QUEUES = 4
BODY = b"x" * 100
WARMUP = 50
QUICK = {"messages": 300, "inflight": 8, "reps": 1}
ROOT = Path(__file__).resolve().parents[1]
RMQ5_PYTHON = Path(os.environ.get("RMQ5_PYTHON", ROOT / ".venv-rmq5" / "bin" / "python"))
RMQ5_SENDER = Path(__file__).with_name("_rmq5_send.py")
RMQ5_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _remoting(namesrv: str, topic: str, count: int, inflight: int) -> tuple[float, list[float]]:
    """Seconds and per-send latencies (ms) of ``count`` sends, ``inflight`` at a time, with our Producer."""
    latencies: list[float] = []
    async with Producer("bench_grpc_vs_remoting", ClientConfig(namesrv_addr=namesrv)) as p:
        for _ in range(WARMUP):
            await p.send(Message(topic, BODY))
        left = count

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = time.perf_counter()
                await p.send(Message(topic, BODY))
                latencies.append((time.perf_counter() - t0) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return time.perf_counter() - started, latencies


def _grpc(endpoint: str, topic: str, count: int, inflight: int) -> tuple[float, list[float]]:
    """The same with the 5.x client, in its own venv."""
    if not RMQ5_PYTHON.exists():
        raise SystemExit(f"no RocketMQ 5.x client at {RMQ5_PYTHON}: run scripts/install_rmq5_client.sh (or name its "
                         f"python in RMQ5_PYTHON)")
    done = subprocess.run([str(RMQ5_PYTHON), str(RMQ5_SENDER), endpoint, topic, str(count), str(inflight),
                           str(WARMUP)], capture_output=True, text=True, timeout=RMQ5_TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the 5.x sender failed: {done.stdout[-1000:]}{done.stderr[-2000:]}")
    out = json.loads(lines[-1])
    return out["seconds"], out["latencies_ms"]


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=5_000)
    p.add_argument("--inflight", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.messages, args.inflight, args.reps = QUICK["messages"], QUICK["inflight"], QUICK["reps"]
    grpc_port = _free_port()
    kinds = [(proto, mode) for proto in ("remoting", "gRPC 5.x") for mode in ("sync", "async")]
    runs: dict[str, list[dict[str, Any]]] = {f"{proto} {mode}": [] for proto, mode in kinds}
    conf = f"enableGrpcEndpoint=true\ngrpcListenPort={grpc_port}\n"
    with local_cluster(args.dir / f"grpc-bench-{time.time_ns()}", conf) as cluster:
        endpoint = f"127.0.0.1:{grpc_port}"
        for rep in range(args.reps):
            for proto, mode in (kinds if rep % 2 == 0 else kinds[::-1]):
                topic = f"{TOPIC}_grpc_{rep}_{proto.split()[0]}_{mode}"
                create_topic(cluster, topic, QUEUES)
                inflight = 1 if mode == "sync" else args.inflight
                cpu0 = _cpu_s(cluster.broker_pid)
                if proto == "remoting":
                    seconds, latencies = asyncio.run(_remoting(cluster.namesrv, topic, args.messages, inflight))
                else:
                    seconds, latencies = _grpc(endpoint, topic, args.messages, inflight)
                cpu = _cpu_s(cluster.broker_pid) - cpu0  # includes the warm-up's and the client's start-up share
                p50, p99 = np.percentile(latencies, [50, 99])
                runs[f"{proto} {mode}"].append({
                    "messages": args.messages, "inflight": inflight, "seconds": seconds,
                    "msg_s": args.messages / seconds, "p50_ms": float(p50), "p99_ms": float(p99),
                    "broker_cpu_us_per_msg": cpu / (args.messages + WARMUP) * 1e6})
    summary = {kind: min(rs, key=lambda r: abs(r["msg_s"] - statistics.median(x["msg_s"] for x in rs)))
               for kind, rs in runs.items()}
    print_table("gRPC (5.x client) vs remoting (our Producer) send, 100 B bodies",
                ["send", "in flight", "msg/s", "p50 ms", "p99 ms", "broker CPU µs/msg", "runs"],
                [[kind, r["inflight"], r["msg_s"], r["p50_ms"], r["p99_ms"], r["broker_cpu_us_per_msg"],
                  len(runs[kind])] for kind, r in summary.items()],
                caption=f"median run of each; {machine_line(args.dir)}")
    dump_json(args.json, {"args": vars(args), "code": code_version(), "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
