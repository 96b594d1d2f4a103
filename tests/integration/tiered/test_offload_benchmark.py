"""``benchmarks/tiered_offload.py`` keeps working: it runs end to end at --quick size and reports every
case (figures are not checked here; BENCHMARKS.md holds them)."""

from __future__ import annotations

import json
import subprocess
import sys

from ._support import ROOT


def test_tiered_offload_benchmark_runs_quick(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tiered_offload.py"), "--quick", "--json",
                           str(out), "--dir", str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    cases = {"pull + decode", "offload delta", "offload parquet", "append delta", "append parquet", "write_table"}
    assert set(result["results"]) == cases
    assert all(r["messages"] == result["results"]["write_table"]["messages"] for r in result["results"].values())
