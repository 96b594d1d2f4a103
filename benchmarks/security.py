"""What ACL and TLS cost the send path (issue 25): the same produce workloads against a broker and
NameServer run plain, with ``aclEnable`` (every request signed by the client and checked by the servers),
with TLS enforcing on every port (the client dialling over TLS), and with both.

Per setting, on fresh server processes:

1. produce throughput, 100-byte bodies: ``Producer.send(list)``, batches of ``PRODUCE_BATCH`` with
   ``PRODUCE_WINDOW`` in flight (as ``peers.py`` sends), and the broker's CPU seconds per message;
2. send latency: one message per request, one request in flight, p50/p99 of the round trip.

Each repetition runs every setting in turn (the order rotates between repetitions); a figure is the
median over repetitions. Ratios are of the plain figure measured in the same run (issue 25's targets:
>= 0.9 with ACL, >= 0.7 with TLS, on throughput).

    .venv/bin/python benchmarks/security.py            # full size (~3 min)
    .venv/bin/python benchmarks/security.py --quick    # smoke sizes (seconds)
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import dump_json, machine_line, parser, scratch_dir
from peer_systems.base import Child, batches, free_port, windowed
from peer_systems.spark_mq_broker import (
    BROKER_CONF,
    BROKER_READY,
    NAMESRV_READY,
    PRODUCE_BATCH,
    PRODUCE_WINDOW,
    _read_ready,
)

from spark_mq.client.admin import Admin
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.commands.certs import make_certs
from spark_mq.common.message import Message

ADMIN_KEY, ADMIN_SECRET = "bench_admin", "bench_admin_secret_1"  # throwaway accounts of a temp plain_acl.yml
BODY = b"x" * 100
QUEUES = 4
SETTINGS = ("plain", "acl", "tls", "acl+tls")
FULL = {"messages": 200_000, "sends": 3000, "reps": 3}
QUICK = {"messages": 4096, "sends": 200, "reps": 1}
WARMUP_SENDS = 200
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""


@dataclass(frozen=True)
class Figures:
    msgs_per_s: float
    broker_cpu_us_per_msg: float
    p50_ms: float
    p99_ms: float


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` from /proc (clock ticks to seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _conf_lines(setting: str, work: Path, certs: Path) -> str:
    lines = []
    if "acl" in setting:
        (work / "plain_acl.yml").write_text(PLAIN_ACL)
        lines += ["aclEnable=true", f"aclFile={work / 'plain_acl.yml'}", f"accessKey={ADMIN_KEY}",
                  f"secretKey={ADMIN_SECRET}"]
    if "tls" in setting:
        lines += ["tls.server.mode=enforcing", f"tls.server.certPath={certs / 'server.pem'}",
                  f"tls.server.keyPath={certs / 'server.key'}", "tls.enable=true",
                  f"tls.client.trustCertPath={certs / 'ca.pem'}"]
    return "\n".join(lines) + "\n"


def _ready(child: Child, prefix: str) -> str:
    return _read_ready(child, prefix, prefix.strip())


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "spark_mq.cli", *args]


async def _measure(config: ClientConfig, broker_addr: str, broker_pid: int, messages: int, sends: int) -> Figures:
    topic = f"bench_sec_{time.monotonic_ns()}"
    async with Admin(config) as admin:
        await admin.create_topic(topic, broker_addr=broker_addr, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    producer = await Producer(f"bench_sec_producer_{time.monotonic_ns()}", config).start()
    try:
        pool = [Message(topic, BODY) for _ in range(PRODUCE_BATCH)]
        await producer.send(pool[:16])  # the route, the connection (and its TLS handshake) before the clock
        cpu0, t0 = _cpu_seconds(broker_pid), time.perf_counter()
        await windowed(producer.send, batches(pool, messages, PRODUCE_BATCH), PRODUCE_WINDOW)
        seconds, cpu = time.perf_counter() - t0, _cpu_seconds(broker_pid) - cpu0
        one = Message(topic, BODY)
        times = []
        for i in range(WARMUP_SENDS + sends):
            s0 = time.perf_counter()
            await producer.send(one)
            if i >= WARMUP_SENDS:
                times.append((time.perf_counter() - s0) * 1000)
    finally:
        await producer.shutdown()
    times.sort()
    return Figures(messages / seconds, cpu / messages * 1e6, statistics.median(times),
                   times[min(len(times) - 1, int(len(times) * 0.99))])


def run_setting(setting: str, work: Path, certs: Path, messages: int, sends: int) -> Figures:
    """Fresh NameServer and broker with ``setting``, the workloads, then both stopped."""
    work.mkdir(parents=True)
    extra = _conf_lines(setting, work, certs)
    (work / "namesrv.conf").write_text(extra)
    (work / "broker.conf").write_text(BROKER_CONF.read_text() + "\n" + extra)
    namesrv = Child(_cli("namesrv", "-c", str(work / "namesrv.conf"), "--port", "0"), work / "namesrv.log",
                    stdout_pipe=True)
    broker = None
    try:
        namesrv_addr = _ready(namesrv, NAMESRV_READY)
        port = free_port()
        argv = _cli("broker", "-c", str(work / "broker.conf"), "--namesrv", namesrv_addr, "--port", str(port),
                    "--store", str(work / "store"), "--metrics-port", "0")
        broker = Child(argv, work / "broker.log", stdout_pipe=True)
        _ready(broker, BROKER_READY)
        tls = "tls" in setting
        config = ClientConfig(namesrv_addr=namesrv_addr, instance_name=f"bench_sec_{setting}",
                              access_key=ADMIN_KEY if "acl" in setting else "",
                              secret_key=ADMIN_SECRET if "acl" in setting else "",
                              tls_enable=tls, tls_trust_cert_path=str(certs / "ca.pem") if tls else "")
        return asyncio.run(_measure(config, f"127.0.0.1:{port}", broker.pid, messages, sends))
    finally:
        if broker is not None:
            broker.stop()
        namesrv.stop()


def main() -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {','.join(SETTINGS)}")
    args = p.parse_args()
    size = QUICK if args.quick else FULL
    settings = [s for s in args.settings.split(",") if s]
    if unknown := set(settings) - set(SETTINGS):
        p.error(f"unknown settings {sorted(unknown)}: choose from {','.join(SETTINGS)}")
    print(machine_line(args.dir))
    results: dict[str, list[Figures]] = {s: [] for s in settings}
    with scratch_dir(args.dir, "security") as scratch:
        certs = scratch / "certs"
        make_certs(certs, [], [])
        for rep in range(size["reps"]):
            order = settings[rep % len(settings):] + settings[:rep % len(settings)]
            for setting in order:
                fig = run_setting(setting, scratch / f"{rep}_{setting.replace('+', '_')}", certs, size["messages"],
                                  size["sends"])
                results[setting].append(fig)
                print(f"rep {rep} {setting:8} {fig.msgs_per_s:10,.0f} msg/s  broker {fig.broker_cpu_us_per_msg:6.2f} "
                      f"us CPU/msg  send p50 {fig.p50_ms:.2f} ms p99 {fig.p99_ms:.2f} ms", flush=True)
    medians = {s: Figures(*(statistics.median(getattr(f, k) for f in figs) for k in Figures.__dataclass_fields__))
               for s, figs in results.items()}
    base = medians.get("plain")
    print(f"\nmedians of {size['reps']} reps; load average at the end {os.getloadavg()[0]:.2f}")
    print(f"{'setting':8} {'msg/s':>10} {'ratio':>6} {'CPU us/msg':>10} {'p50 ms':>7} {'p99 ms':>7} {'p99 ratio':>9}")
    for s, m in medians.items():
        ratio = f"{m.msgs_per_s / base.msgs_per_s:.2f}" if base else "-"
        p99 = f"{m.p99_ms / base.p99_ms:.2f}" if base else "-"
        print(f"{s:8} {m.msgs_per_s:10,.0f} {ratio:>6} {m.broker_cpu_us_per_msg:10.2f} {m.p50_ms:7.2f} "
              f"{m.p99_ms:7.2f} {p99:>9}")
    dump_json(args.json, {"medians": {s: dataclasses.asdict(m) for s, m in medians.items()},
                          "runs": {s: [dataclasses.asdict(f) for f in figs] for s, figs in results.items()},
                          "machine": machine_line(args.dir)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
