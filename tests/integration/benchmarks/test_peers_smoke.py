"""benchmarks/peers.py keeps working: every system runs every workload at --quick size.

One run per system (a peer whose server or Python client is not installed is skipped, saying
so); the table and its ratios are checked on made-up figures. No figure is judged here: a test
is no place for timing, BENCHMARKS.md holds them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 280  # RabbitMQ boots three times (rep, fill, restart) at a few seconds each
CLIENT_MODULES = {"redis": "redis", "nats": "nats", "rabbitmq": "rstream"}  # the bench extra
ROW_KEYS = ("produce_100", "produce_1024", "drain", "latency_p50", "latency_p99", "restart")


bench = load_benchmark("bench_peers", BENCHMARKS / "peers.py")
SYSTEMS = bench.SYSTEMS


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_system_runs_every_workload_quick(system: str, tmp_path: Path) -> None:
    why = SYSTEMS[system].missing()
    if why:
        pytest.skip(f"{system}: {why}")
    if system in CLIENT_MODULES and importlib.util.find_spec(CLIENT_MODULES[system]) is None:
        pytest.skip(f"{system}: Python client {CLIENT_MODULES[system]!r} not installed "
                    f"(scripts/install_peers.sh installs the bench extra)")
    out = tmp_path / "peers.json"
    md = tmp_path / "peers.md"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peers.py"), "--quick", "--systems", system, "--dir", str(tmp_path),
         "--json", str(out), "--markdown", str(md)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    values = result["values"][system]
    assert set(ROW_KEYS) <= set(values), f"missing rows: {set(ROW_KEYS) - set(values)}"
    assert all(v > 0 for key in ROW_KEYS for v in values[key]), values
    lat = result["details"][system]["latency"][0]
    assert lat["received"] == lat["sent"], lat
    assert "Machine:" in md.read_text()
    assert not list(tmp_path.glob("peers-*")), "a server's temp dir was left behind"


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
