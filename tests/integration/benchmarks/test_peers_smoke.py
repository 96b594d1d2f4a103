"""benchmarks/peers.py keeps working: every system runs every workload at --quick size, its
variant rows too, and an ACL variant really refuses a client without the credentials.

One run per system (a peer whose server or Python client is not installed is skipped, saying
so); the table and its ratios are checked on made-up figures. No figure is judged here: a test
is no place for timing, BENCHMARKS.md holds them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 280  # RabbitMQ boots three times (rep, fill, restart) at a few seconds each
REFUSAL_TIMEOUT_S = 60.0  # an anonymous client's first requests: a refusal, never a hang
CREDENTIALS = ("user", "password", "access_key", "secret_key", "admin_key", "admin_secret")  # endpoint keys
CLIENT_MODULES = {"redis": "redis", "nats": "nats", "rabbitmq": "rstream"}  # the bench extra
ROW_KEYS = ("produce_100", "produce_1024", "drain", "latency_p50", "latency_p99", "restart")


bench = load_benchmark("bench_peers", BENCHMARKS / "peers.py")
SYSTEMS = bench.SYSTEMS


def _skip_unless_installed(system: str) -> None:
    why = SYSTEMS[system].missing()
    if why:
        pytest.skip(f"{system}: {why}")
    if system in CLIENT_MODULES and importlib.util.find_spec(CLIENT_MODULES[system]) is None:
        pytest.skip(f"{system}: Python client {CLIENT_MODULES[system]!r} not installed "
                    f"(scripts/install_peers.sh installs the bench extra)")


def _run_quick(system: str, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peers.py"), "--quick", "--systems", system, "--dir", str(tmp_path),
         "--json", str(out), *extra],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(tmp_path.glob("peers-*")), "a server's temp dir was left behind"
    return json.loads(out.read_text())


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_system_runs_every_workload_quick(system: str, tmp_path: Path) -> None:
    _skip_unless_installed(system)
    md = tmp_path / "peers.md"
    plain = [w for w in bench.WORKLOADS if w not in bench.VARIANT_WORKLOADS]  # the variants: the test below
    result = _run_quick(system, tmp_path, "--workloads", ",".join(plain), "--markdown", str(md))
    values = result["values"][system]
    assert set(ROW_KEYS) <= set(values), f"missing rows: {set(ROW_KEYS) - set(values)}"
    assert all(v > 0 for key in ROW_KEYS for v in values[key]), values
    lat = result["details"][system]["latency"][0]
    assert lat["received"] == lat["sent"], lat
    assert "Machine:" in md.read_text()


# a three-node RabbitMQ cluster takes ~40 s to form on a 2-core machine: behind the slow marker
VARIANT_SYSTEMS = [pytest.param(s, marks=pytest.mark.slow) if s == "rabbitmq" else s for s in SYSTEMS]


@pytest.mark.parametrize("system", VARIANT_SYSTEMS)
def test_system_runs_its_variant_rows_quick(system: str, tmp_path: Path) -> None:
    """Replicated (three processes, a majority acknowledging) and ACL rows, as far as the system
    has them (Redis: ACL only); every server of a cluster is stopped and its files removed."""
    _skip_unless_installed(system)
    result = _run_quick(system, tmp_path, "--workloads", ",".join(bench.VARIANT_WORKLOADS))
    values = result["values"][system]
    assert set(values) == set(bench.VARIANTS[system]), values
    assert all(v > 0 for runs in values.values() for v in runs), values
    assert any(line.startswith(f"{system} (acl): ") for line in result["notes"]), result["notes"]


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_acl_variant_refuses_a_client_without_credentials(system: str, tmp_path: Path) -> None:
    """The ACL row measures authenticated traffic: the same server refuses the plain client given
    the endpoint without its credentials, and serves the variant's client."""
    _skip_unless_installed(system)
    cls = bench.VARIANTS[system][bench.AUTH]
    server = cls(tmp_path)
    try:
        server.start()
        server.wait_ready()
        anonymous = {k: v for k, v in server.endpoint.items() if k not in CREDENTIALS}
        with pytest.raises(Exception) as refused:
            asyncio.run(_create_and_send(SYSTEMS[system].client_class, anonymous, "bench_anonymous"))
        assert not isinstance(refused.value, asyncio.TimeoutError), "no refusal, no answer either"
        asyncio.run(_create_and_send(cls.client_class, server.endpoint, "bench_signed"))
    finally:
        server.close()


async def _create_and_send(client_class: type, endpoint: dict, stream: str) -> None:
    async def work() -> None:
        async with client_class(endpoint) as client:
            await client.create(stream)
            await client.send(stream, [b"x" * 100])

    await asyncio.wait_for(work(), REFUSAL_TIMEOUT_S)


def test_table_ratios_say_who_leads() -> None:
    """Ratio = ours / theirs; >= 1 leads on throughput, <= 1 on latency and restart time."""
    args = argparse.Namespace(workloads=list(bench.WORKLOADS), body_sizes=[100], messages=10, rate=5.0,
                              restart_bytes=bench.GiB)
    figures = bench.Figures()
    for system, produce, p50, restart in (("spark_mq", [3.0, 1.0, 2.0], 4.0, 1.0), ("redis", [1.0], 2.0, 2.0)):
        for v in produce:
            figures.add(system, "produce_100", v)
        figures.add(system, "latency_p50", p50)
        figures.add(system, "restart", restart)
    assert figures.median("spark_mq", "produce_100") == 2.0
    columns, rows = bench.table(args, ["spark_mq", "redis"], figures)
    assert columns == ["workload", "spark_mq", "redis", "ratio spark_mq/redis"]
    by_key = {r[0].split(" (")[0]: r for r in rows}
    assert by_key["produce 100 B bodies"][1:] == ["2.00", "1.00", "2.00 lead"]
    assert by_key["produce-to-consume latency p50 @ 5 msg/s"][3] == "2.00 TRAIL"
    assert by_key["restart with a 1 GiB backlog"][3] == "0.50 lead"
    assert by_key["drain a 10-message backlog"][1:] == ["-", "-", "-"]
