"""benchmarks/failover.py keeps working: at --quick size it kills the master of a real 3-replica controller-mode
set once under each settings profile and measures a lone master's and the set's throughput; every figure it
reports is there and consistent (no timing is judged: BENCHMARKS.md holds the figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 600  # two replica sets with a kill and a rejoin each, two throughput rounds, on a loaded machine

bench = load_benchmark("bench_failover", BENCHMARKS / "failover.py")


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "failover.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "failover.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())

    assert [r["profile"] for r in result["failover"]] == list(bench.SETTINGS)
    for run in result["failover"]:
        (round_,) = run["rounds"]
        assert round_["new_master"] != round_["killed"]
        # the steps, seconds after the kill, in the order they happen; the producer's SEND_OK last
        steps = [round_[k] for k in ("elected", "learned", "serving", "acked")]
        assert None not in steps and steps == sorted(steps) and steps[-1] == round_["rto_s"] > 0, round_
        summary = run["summary"]
        assert summary["kills"] == 1 and summary["rto_median_s"] == summary["rto_max_s"] == round_["rto_s"]
        assert summary["bound_by"] in {p for p, _, _ in bench.PHASES}
        assert run["acknowledged"] > 0 and run["lost"] == 0, run
    assert result["failover"][1]["settings"]["brokers"] == bench.SETTINGS["fast"][1].split()

    summary = result["throughput"]["summary"]
    for setup in ("lone", "3 replicas"):
        (run,) = result["throughput"]["runs"][setup]
        assert run["messages"] >= bench.QUICK["messages"] and run["statuses"] == {"SEND_OK": run["messages"]}
        assert summary[setup]["msg_s"] == run["msg_s"] > 0
    assert result["throughput"]["runs"]["3 replicas"][0]["in_sync_after"] == [1, 2, 3]
    assert summary["3 replicas"]["ratio"] == summary["3 replicas"]["msg_s"] / summary["lone"]["msg_s"]
    assert "RTO median" in proc.stdout and "ratio to lone" in proc.stdout
    assert not list(tmp_path.glob("bench-failover-*")), "a temp dir was left behind"


def test_the_longest_median_phase_bounds_the_rto() -> None:
    """Phase lengths are differences of the steps' times after the kill; rounds without a step's log line
    count for the RTO only."""
    rounds = [{"rto_s": 3.0, "elected": 0.1, "learned": 2.5, "serving": 2.8, "acked": 3.0},
              {"rto_s": 5.0, "elected": 0.1, "learned": 4.0, "serving": 4.5, "acked": 5.0},
              {"rto_s": 1.0, "elected": None, "learned": 0.5, "serving": 0.8, "acked": 1.0}]
    s = bench.summarize_rto(rounds)
    assert (s["kills"], s["rto_median_s"], s["rto_max_s"]) == (3, 3.0, 5.0)
    assert s["phase_median_s"]["elect"] == 0.1 and s["bound_by"] == "learn"
    assert abs(s["phase_median_s"]["learn"] - 2.4) < 1e-9
