"""benchmarks/replication.py keeps working: at --quick size it starts a lone master, an ASYNC_MASTER + slave
and a SYNC_MASTER + slave (real processes), loads each, and a slave catches up with a filled master; every
figure it reports is there and sane (no timing is judged: BENCHMARKS.md holds the figures). The lag it
derives from the master's samples is checked on made-up samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 300  # six broker starts, four rounds of spawned producers, a catch-up, on a loaded machine

bench = load_benchmark("bench_replication", BENCHMARKS / "replication.py")


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "replication.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "replication.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    quick = bench.QUICK

    runs = result["throughput"]["runs"]
    assert set(runs) == {"lone", "async", "sync"}
    for setup, (run,) in runs.items():
        assert run["messages"] >= quick["messages"], (setup, run["messages"])
        assert run["statuses"] == {"SEND_OK": run["messages"]}, (setup, run["statuses"])
        assert run["msg_s"] > 0 and run["cpu_seconds"]["master"] > 0, (setup, run)
        # every message (and each producer's warm-up batch) is in the consume queues of each broker
        assert run["queued_expected"] == run["messages"] + result["args"]["producers"] * result["args"]["batch"]
        assert set(run["queued"].values()) == {run["queued_expected"]}, (setup, run["queued"])
        assert run["latency"]["sends"] == quick["latency_sends"] and run["latency"]["not_ok"] == 0
        assert 0 < run["latency"]["p50_ms"] <= run["latency"]["p99_ms"] <= run["latency"]["max_ms"]
        if setup == "lone":
            assert run["slave_end"] is None and run["lag"] == {"samples": 0} and set(run["queued"]) == {"master"}
        else:  # the slave ended with every byte, its work counted, its lag sampled
            assert run["slave_end"] == run["master_end"] > 0, (setup, run)
            assert run["cpu_seconds"]["slave"] > 0
            lag = run["lag"]
            assert lag["samples"] >= 1
            assert 0 <= lag["bytes_p50"] <= lag["bytes_p99"] <= lag["bytes_max"]
            assert 0 <= lag["ms_p50"] <= lag["ms_p99"] <= lag["ms_max"]

    summary = result["throughput"]["summary"]
    for setup, target in bench.TARGET_RATIO.items():
        s = summary[setup]
        assert s["ratio"] == pytest.approx(s["msg_s"] / summary["lone"]["msg_s"])
        assert s["target"] == target and s["met"] == (s["ratio"] >= target)

    catchup = result["catchup"]
    behind = catchup["runs"][0]["bytes"]
    assert behind >= quick["catchup_mb"] << 20
    assert [r["slave_end"] for r in catchup["runs"]] == [behind] * quick["reps"]
    assert catchup["mb_s"] > 0 and catchup["disk"]["mb_s"] > 0
    assert catchup["fraction_of_disk"] == pytest.approx(catchup["mb_s"] / catchup["disk"]["mb_s"])

    assert len(result["load"]["start"]) == len(result["load"]["end"]) == 3
    assert "ratio to lone" in proc.stdout and "catch-up of a slave" in proc.stdout
    assert not list(tmp_path.glob("bench-repl-*")), "a temp dir was left behind"


def test_time_lag_is_how_long_ago_the_master_had_what_the_slave_has() -> None:
    """Samples once a second: the master's end 0, 100, 200, 300 bytes; at the last sample the slave lacks
    150 bytes, i.e. it holds offset 150, which the master reached half-way between the 2nd and the 3rd
    sample: 1.5 s behind. A slave lacking nothing is 0 s behind."""
    samples = bench.LagSamples()
    second = 1_000_000_000
    for i, (put, behind) in enumerate([(0, 0), (100, 0), (200, 50), (300, 150)]):
        samples.t_ns.append(i * second)
        samples.put_where.append(put)
        samples.behind.append(behind)
        samples.behind_s.append(0.0)
    assert samples.time_lag_s().tolist() == pytest.approx([0.0, 0.0, 0.5, 1.5])
    summary = samples.summary()
    assert summary["samples"] == 4 and summary["bytes_max"] == 150 and summary["ms_max"] == pytest.approx(1500)
