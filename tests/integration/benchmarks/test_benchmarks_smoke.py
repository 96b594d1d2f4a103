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


@pytest.mark.parametrize("script", ["disk_write.py", "store_append.py", "store_read.py", "store_recovery.py",
                                    "arrow_decode.py"])
def test_benchmark_runs_quick(script: str, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result, "the benchmark wrote an empty result"


def test_tiered_lookup_runs_quick(tmp_path: Path) -> None:
    """The key-lookup benchmark at --quick size, Spark cases included: every case found its key."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tiered_lookup.py"), "--quick", "--json", str(out), "--dir",
         str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases = json.loads(out.read_text())["results"]["cases"]
    assert set(cases) == {"hot: broker index", "cold: archive, window", "cold: archive, no window",
                          "full scan: Spark", "by_key: both tiers"}
    assert all(c["lookups"] > 0 for c in cases.values())


def test_spark_ingest_runs_quick(tmp_path: Path) -> None:
    """The Spark ingest benchmark at --quick size (real NameServer, broker and local[2] session): the stream
    and the Parquet read each saw every produced row."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "spark_ingest.py"), "--quick", "--json", str(out), "--dir",
         str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    produced = result["produced"]["messages"]
    assert produced > 0
    assert result["stream ingest"]["rows"] == result["parquet read"]["rows"] == produced
    assert result["ratio_to_parquet"] > 0
