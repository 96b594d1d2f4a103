"""benchmarks/transactions.py keeps working: at --quick size it starts a NameServer and a broker, sends
plain and transactional messages, and every committed transaction is in the topic (no timing is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ._support import BENCHMARKS, ROOT, load_benchmark

RUN_TIMEOUT_S = 180

bench = load_benchmark("bench_transactions", BENCHMARKS / "transactions.py")


def test_quick_run_reports_both_rates(tmp_path: Path) -> None:
    out = tmp_path / "transactions.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "transactions.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for kind in ("plain", "transactional"):
        (run,) = result["runs"][kind]
        assert run["messages"] == bench.QUICK["messages"] and run["queued"] == run["messages"] + 1
        assert run["msg_s"] > 0
    assert result["ratio"] == result["summary"]["transactional"] / result["summary"]["plain"]
