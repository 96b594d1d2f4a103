"""benchmarks/timer.py keeps working: at --quick size it starts a NameServer and a broker, samples the
broker's memory while timers are enqueued, and a consumer receives every timer of the due-rate run, none
early (no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 180

bench = load_benchmark("bench_timer", BENCHMARKS / "timer.py")


def test_quick_run_reports_memory_and_delivery_error(tmp_path: Path) -> None:
    out = tmp_path / "timer.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "timer.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    pending = bench.QUICK["pending"]
    for kind in ("pending", "baseline"):
        assert [s["pending"] for s in result[kind]] == [0, pending // 4, pending // 2, 3 * pending // 4, pending]
        assert all(s["VmRSS"] > 0 and s["RssAnon"] > 0 for s in result[kind])
    (error,) = result["error"].values()
    timers = bench.QUICK["due_rate"] * bench.QUICK["due_seconds"]
    assert error["timers"] == error["received"] == timers and error["lost"] == 0
    assert error["early"] == 0 and error["p99_ms"] >= error["p50_ms"] >= 0 and error["broker_p99_ms"] >= 0
