"""The benchmark scripts keep working: each runs end to end at --quick size and reports.

Figures are not checked here (a test is no place for timing); BENCHMARKS.md holds them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("script", ["disk_write.py", "store_append.py", "store_read.py", "store_recovery.py"])
def test_benchmark_runs_quick(script: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result, "the benchmark wrote an empty result"
