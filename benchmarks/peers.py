"""spark_mq against Redis Streams, NATS JetStream and RabbitMQ Streams, side by side (issue 7).

Each system runs on loopback as a child process with its data in a temp dir and comparable
durability (ours ASYNC_FLUSH, Redis AOF everysec, NATS JetStream file store, RabbitMQ a stream
queue), and each does the same workloads through its own Python client:

1. produce throughput, 100-byte and 1 KiB bodies, batched/pipelined as each client does best;
2. drain throughput: the 100-byte backlog of step 1 read back from its first message;
3. produce-to-consume latency p50/p99 at a fixed rate, consumer in another process (push or
   long polling);
4. restart time: a clean stop with a ~1 GiB backlog, then from spawning the server to the first
   message read back;
5. variants, produce 100-byte bodies as in 1: ``replicated``, three replicas on three processes, a
   send acknowledged once a majority has it (ours a SYNC_MASTER and two slaves, NATS a three-node
   cluster and an R3 stream, RabbitMQ a three-node cluster and a stream of three replicas; Redis
   has none: its replicas acknowledge nothing to the writer); ``acl``, the system's own
   authentication on (ours ACL, Redis an ACL user, NATS user/password, RabbitMQ a dedicated user).

Every figure is the median of ``--reps`` repetitions; each repetition starts every server
afresh, and the systems take turns (the order rotates between repetitions). The table's ratio
is ours / the peer's: >= 1.0 leads on throughput, <= 1.0 leads on latency and restart time.

    .venv/bin/python benchmarks/peers.py                        # full size (~30 min)
    .venv/bin/python benchmarks/peers.py --quick                # smoke sizes (seconds per system)
    .venv/bin/python benchmarks/peers.py --systems spark_mq,redis --workloads produce,drain
    .venv/bin/python benchmarks/peers.py --workloads replicated,acl     # the variant rows only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common
from _common import GiB, MiB, machine_line, parser, scratch_dir
from peer_systems import OURS, SYSTEMS, VARIANTS
from peer_systems.base import AUTH, REPLICAS, REPLICATED, Server, dir_bytes
from peer_systems.workloads import body_pool, measure_latency, measure_restart, timed_drain, timed_produce

KiB = 1 << 10
VARIANT_WORKLOADS = (REPLICATED, AUTH)  # a produce run on each system's variant of that name
WORKLOADS = ("produce", "drain", "latency", "restart", *VARIANT_WORKLOADS)
DRAIN_BODY = 100  # the drained backlog is the produce run of this body size
VARIANT_BODY = 100
VARIANT_LABELS = {REPLICATED: f"produce {VARIANT_BODY} B, {REPLICAS} replicas, acked by a majority",
                  AUTH: f"produce {VARIANT_BODY} B, ACL / authentication on"}
QUICK = {"messages": 2000, "reps": 1, "restart_bytes": 2 * MiB, "rate": 1000.0, "latency_seconds": 1.0,
         "warmup_seconds": 0.2}


@dataclass(frozen=True)
class Row:
    """One table row: a metric key, its label, unit and which way is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool


@dataclass
class Figures:
    """Per system, per metric key: the value of every repetition (and details for the JSON)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, system: str, key: str, value: float) -> None:
        self.values.setdefault(system, {}).setdefault(key, []).append(value)

    def note(self, system: str, key: str, value: Any) -> None:
        self.details.setdefault(system, {}).setdefault(key, []).append(value)

    def median(self, system: str, key: str) -> float | None:
        vals = sorted(self.values.get(system, {}).get(key, []))
        return vals[(len(vals) - 1) // 2] if vals else None


def rows(args: argparse.Namespace) -> list[Row]:
    out = []
    if "produce" in args.workloads:
        out += [Row(f"produce_{b}", f"produce {_size(b)} bodies", "msg/s", True) for b in args.body_sizes]
    if "drain" in args.workloads:
        out.append(Row("drain", f"drain a {args.messages:,}-message backlog ({_size(DRAIN_BODY)})", "msg/s", True))
    if "latency" in args.workloads:
        rate = f"{args.rate:,.0f} msg/s"
        out += [Row("latency_p50", f"produce-to-consume latency p50 @ {rate}", "ms", False),
                Row("latency_p99", f"produce-to-consume latency p99 @ {rate}", "ms", False)]
    if "restart" in args.workloads:
        out.append(Row("restart", f"restart with a {_bytes(args.restart_bytes)} backlog", "s", False))
    out += [Row(w, VARIANT_LABELS[w], "msg/s", True) for w in VARIANT_WORKLOADS if w in args.workloads]
    return out


def _size(n: int) -> str:
    return f"{n // KiB} KiB" if n >= KiB and n % KiB == 0 else f"{n} B"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


# -- running ------------------------------------------------------------------------------


def run_rep(cls: type[Server], rep: int, args: argparse.Namespace, figures: Figures) -> None:
    """Produce, drain and latency on a fresh server of ``cls``."""
    with scratch_dir(args.dir, f"peers-{cls.name}-") as workdir:
        server = cls(workdir)
        try:
            server.start()
            server.wait_ready()
            asyncio.run(_throughput(server, rep, args, figures))
            if "latency" in args.workloads:
                stream = f"bench_latency_{rep}"
                asyncio.run(_create(server, stream))
                lat = measure_latency(server, stream, args.rate, args.latency_seconds, args.warmup_seconds,
                                      DRAIN_BODY)
                figures.add(cls.name, "latency_p50", lat.p50_ms)
                figures.add(cls.name, "latency_p99", lat.p99_ms)
                figures.note(cls.name, "latency", lat.__dict__)
                _say(f"  {cls.name}: latency p50 {lat.p50_ms:.2f} ms, p99 {lat.p99_ms:.2f} ms, max "
                     f"{lat.max_ms:.1f} ms ({lat.received}/{lat.sent} received, sent at {lat.send_rate:,.0f} msg/s)")
                if lat.received < lat.sent:
                    raise RuntimeError(f"{cls.name} lost {lat.sent - lat.received} of {lat.sent} messages")
        finally:
            server.close()


async def _create(server: Server, stream: str) -> None:
    async with server.client_class(server.endpoint) as client:
        await client.create(stream)


async def _throughput(server: Server, rep: int, args: argparse.Namespace, figures: Figures) -> None:
    name = server.name
    sizes = args.body_sizes if "produce" in args.workloads else [DRAIN_BODY] if "drain" in args.workloads else []
    for size in sizes:
        stream = f"bench_{size}_{rep}"
        seconds = await _produce(server, stream, size, args.messages)
        if "produce" in args.workloads:
            figures.add(name, f"produce_{size}", args.messages / seconds)
            _say(f"  {name}: produce {_size(size)}: {args.messages / seconds:,.0f} msg/s "
                 f"({args.messages * size / seconds / MiB:,.1f} MiB/s of bodies)")
        if size == DRAIN_BODY and "drain" in args.workloads:
            async with server.client_class(server.endpoint) as client:  # a fresh connection, as a consumer's
                seconds, got_bytes = await timed_drain(client, stream, args.messages)
            figures.add(name, "drain", args.messages / seconds)
            _say(f"  {name}: drain: {args.messages / seconds:,.0f} msg/s ({got_bytes / seconds / MiB:,.1f} MiB/s)")


def run_variant(cls: type[Server], workload: str, rep: int, args: argparse.Namespace, figures: Figures) -> None:
    """One produce run of ``VARIANT_BODY`` bodies on a fresh set of ``cls`` (the variant
    ``workload`` of its system), figure under the workload's name."""
    with scratch_dir(args.dir, f"peers-{cls.name}-{workload}-") as workdir:
        server = cls(workdir)
        try:
            server.start()
            server.wait_ready()
            cpu0 = _server_cpu(server)
            seconds = asyncio.run(_produce(server, f"bench_{workload}_{rep}", VARIANT_BODY, args.messages))
            cpu_us = (_server_cpu(server) - cpu0) / args.messages * 1e6
        finally:
            server.close()
    figures.add(cls.name, workload, args.messages / seconds)
    figures.note(cls.name, f"{workload}_server_cpu_us_per_msg", cpu_us)
    _say(f"  {cls.name}: {VARIANT_LABELS[workload]}: {args.messages / seconds:,.0f} msg/s, servers' CPU "
         f"{cpu_us:.2f} us/msg")


def _server_cpu(server: Server) -> float:
    """CPU seconds (user + system) so far of every process the server started and their
    descendants: on a shared machine a steadier comparison than wall time."""
    roots = [c.pid for c in (server.helper, server.child, *server.nodes) if c is not None]
    return sum(own for root in roots for _cmd, own, _reaped in _common.process_tree_cpu(root).values())


async def _produce(server: Server, stream: str, size: int, count: int) -> float:
    async with server.client_class(server.endpoint) as client:
        await client.create(stream)
        return await timed_produce(client, stream, size, count)


def run_restart(cls: type[Server], args: argparse.Namespace, figures: Figures) -> None:
    """Fill a fresh server with ``restart_bytes`` of bodies, stop it cleanly, then time
    ``reps`` restarts (each stopped cleanly again, untimed)."""
    count = max(1, args.restart_bytes // args.restart_body)
    stream = "bench_restart"
    with scratch_dir(args.dir, f"peers-{cls.name}-restart-") as workdir:
        server = cls(workdir)
        try:
            server.start()
            server.wait_ready()
            t0 = time.perf_counter()
            asyncio.run(_fill(server, stream, args.restart_body, count))
            fill_s = time.perf_counter() - t0
            server.stop()
            on_disk = dir_bytes(server.data_dir)
            figures.note(cls.name, "restart_backlog", {"messages": count, "body": args.restart_body,
                                                       "on_disk_bytes": on_disk, "fill_seconds": fill_s})
            _say(f"  {cls.name}: restart backlog {count:,} x {_size(args.restart_body)} = {_bytes(on_disk)} "
                 f"on disk (filled in {fill_s:.1f}s)")
            backlog = set(body_pool(args.restart_body))
            for rep in range(args.reps):
                seconds = measure_restart(server, stream, backlog)
                server.stop()
                figures.add(cls.name, "restart", seconds)
                _say(f"  {cls.name}: restart {rep + 1}/{args.reps}: {seconds:.2f} s to the first message")
        finally:
            server.close()


async def _fill(server: Server, stream: str, body: int, count: int) -> None:
    async with server.client_class(server.endpoint) as client:
        await client.create(stream)
        await client.produce(stream, body_pool(body), count)


def _guarded(figures: Figures, system: str, step: Callable[..., None], *args: Any) -> None:
    """Run one system's step; a failure is recorded (its rows stay short) and the run goes on,
    so one peer's trouble does not throw away the others' figures."""
    try:
        step(*args)
    except Exception:
        figures.errors.append(f"{system}: {traceback.format_exc(limit=-3).strip().splitlines()[-1]}")
        _say(f"  {system}: FAILED\n{traceback.format_exc()}")


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {text}", flush=True)


# -- reporting ----------------------------------------------------------------------------


def table(args: argparse.Namespace, systems: list[str], figures: Figures) -> tuple[list[str], list[list[str]]]:
    peers = [s for s in systems if s != OURS]
    columns = ["workload", OURS] + [c for p in peers for c in (p, f"ratio {OURS}/{p}")]
    body = []
    for row in rows(args):
        ours = figures.median(OURS, row.key) if OURS in systems else None
        cells = [f"{row.label} ({row.unit})", _value(ours)]
        for p in peers:
            theirs = figures.median(p, row.key)
            cells += [_value(theirs), _ratio(ours, theirs, row.higher_is_better)]
        body.append(cells)
    return columns, body


def _value(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"


def _ratio(ours: float | None, theirs: float | None, higher_is_better: bool) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "-"
    r = ours / theirs
    lead = r >= 1.0 if higher_is_better else r <= 1.0
    return f"{r:.2f} {'lead' if lead else 'TRAIL'}"


def notes(args: argparse.Namespace, systems: list[str], skipped: dict[str, str], figures: Figures,
          load: tuple[float, float], wall_s: float) -> list[str]:
    out = [
        f"Machine: {machine_line(args.dir)}.",
        f"Load average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end; run time {wall_s / 60:.1f} min.",
        f"Code: {_common.code_version()}.",
        f"Settings: {args.messages:,} messages per produce, drain and variant run, bodies "
        f"{', '.join(map(_size, args.body_sizes))}; "
        f"latency {args.rate:,.0f} msg/s for {args.latency_seconds:g}s ({args.warmup_seconds:g}s warm-up not "
        f"counted); restart backlog {_bytes(args.restart_bytes)} of {_size(args.restart_body)} bodies; median of "
        f"{args.reps}.",
    ]
    for name in systems:
        cls = SYSTEMS[name]
        out.append(f"{name}: {cls.versions()}; durability: {cls.durability}.")
        out += [f"{name} ({w}): {VARIANTS[name][w].durability}." for w in VARIANT_WORKLOADS
                if w in args.workloads and w in VARIANTS[name]]
    for w in VARIANT_WORKLOADS:
        cpu = {name: per[f"{w}_server_cpu_us_per_msg"] for name in systems
               if (per := figures.details.get(name, {})).get(f"{w}_server_cpu_us_per_msg")}
        if cpu:
            out.append(f"Servers' CPU per message, {w} (median, us): "
                       + ", ".join(f"{n} {sorted(v)[(len(v) - 1) // 2]:.2f}" for n, v in cpu.items()) + ".")
    for name, why in skipped.items():
        out.append(f"{name}: skipped, {why}.")
    return out


def markdown(columns: list[str], body: list[list[str]], lines: list[str]) -> str:
    md = ["| " + " | ".join(columns) + " |", "|" + "---|" + "---:|" * (len(columns) - 1)]
    md += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(md) + "\n\n" + "\n".join(f"- {n}" for n in lines) + "\n"


# -- command line -------------------------------------------------------------------------


def parse_bytes(text: str) -> int:
    """``1073741824``, ``1GiB``, ``512MiB``, ``64KiB``."""
    t = text.strip()
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB), ("B", 1)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * scale)
    return int(t)


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda text: [kind(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--systems", type=_csv(str), default=list(SYSTEMS), help="comma-separated, of " + ",".join(SYSTEMS))
    p.add_argument("--workloads", type=_csv(str), default=list(WORKLOADS), help="comma-separated, of "
                   + ",".join(WORKLOADS))
    p.add_argument("--messages", type=int, default=1_000_000, help="messages per produce run (and drained backlog)")
    p.add_argument("--body-sizes", type=_csv(int), default=[100, 1024], help="produce body sizes in bytes")
    p.add_argument("--reps", type=int, default=3, help="repetitions; every figure is their median")
    p.add_argument("--rate", type=float, default=5000.0, help="latency workload send rate, msg/s")
    p.add_argument("--latency-seconds", type=float, default=10.0, help="latency workload duration")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="first seconds of the latency run not counted")
    p.add_argument("--restart-bytes", type=parse_bytes, default=GiB, help="restart backlog (bodies), e.g. 1GiB")
    p.add_argument("--restart-body", type=int, default=KiB, help="body size of the restart backlog")
    p.add_argument("--skip-missing", action="store_true",
                   help="leave out a system whose server is not installed (default: fail)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the table and notes as Markdown here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like an error: every server started so far is stopped by its finally block
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) == build_parser().get_default(k):
                setattr(args, k, v)
    unknown = [s for s in args.systems if s not in SYSTEMS] + [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        sys.exit(f"unknown system or workload: {', '.join(unknown)}")
    if "drain" in args.workloads and DRAIN_BODY not in args.body_sizes:
        args.body_sizes.append(DRAIN_BODY)
    skipped = {s: why for s in args.systems if (why := SYSTEMS[s].missing())}
    if skipped and not args.skip_missing:
        sys.exit("; ".join(f"{s}: {why}" for s, why in skipped.items()) + " (or pass --skip-missing)")
    systems = [s for s in args.systems if s not in skipped]
    _common.code_version()
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    figures = Figures()
    _say(f"systems {', '.join(systems)}; {machine_line(args.dir)}")
    variants = [w for w in VARIANT_WORKLOADS if w in args.workloads]
    for rep in range(args.reps):
        k = rep % len(systems)
        for name in systems[k:] + systems[:k]:
            if {"produce", "drain", "latency"} & set(args.workloads):
                _say(f"rep {rep + 1}/{args.reps}: {name}")
                _guarded(figures, name, run_rep, SYSTEMS[name], rep, args, figures)
            for w in variants:
                if w in VARIANTS[name]:
                    _say(f"rep {rep + 1}/{args.reps}: {name} ({w})")
                    _guarded(figures, name, run_variant, VARIANTS[name][w], w, rep, args, figures)
    if "restart" in args.workloads:
        for name in systems:
            _say(f"restart: {name}")
            _guarded(figures, name, run_restart, SYSTEMS[name], args, figures)
    wall = time.perf_counter() - t0
    columns, body = table(args, systems, figures)
    lines = notes(args, systems, skipped, figures, (load0, os.getloadavg()[0]), wall)
    lines += [f"FAILED, rows left out: {e}" for e in figures.errors]
    _common.print_table(f"spark_mq against the peers, {time.strftime('%Y-%m-%d')}", columns, body,
                        caption="\n".join(lines))
    if args.markdown is not None:
        args.markdown.write_text(markdown(columns, body, lines))
    _common.dump_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args),
                                  "systems": systems, "skipped": skipped, "values": figures.values,
                                  "details": figures.details, "table": {"columns": columns, "rows": body},
                                  "notes": lines, "errors": figures.errors})
    if figures.errors:
        print(f"{len(figures.errors)} failed step(s): " + "; ".join(figures.errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
