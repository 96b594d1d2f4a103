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


def figures(tree: object, name: str) -> list[float]:
    """Every value called ``name`` in a result's nested dicts."""
    if not isinstance(tree, dict):
        return []
    return [v for k, v in tree.items() if k == name] + [f for v in tree.values() for f in figures(v, name)]


@pytest.mark.parametrize(("script", "section"), [("disk_write.py", "disk"), ("store_append.py", "append"),
                                                 ("store_read.py", "read"), ("store_recovery.py", "recovery"),
                                                 ("arrow_decode.py", "decode")])
def test_benchmark_runs_quick(script: str, section: str, tmp_path: Path) -> None:
    """Each script reports its measurements: a throughput (MB/s) for every case it ran."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rates = figures(json.loads(out.read_text())[section], "mb_s")
    assert rates and all(r > 0 for r in rates), f"{script} reported {section} MB/s {rates}"


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
    """The Spark ingest benchmark at --quick size (real NameServer, broker and local[2] session): the stream,
    the Parquet read and the memory ceiling (ready Arrow batches), full and pruned, each saw every produced
    row, and the stream is rated against both ceilings."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "spark_ingest.py"), "--quick", "--json", str(out), "--dir",
         str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    produced = result["produced"]["messages"]
    assert produced > 0
    cases = result["cases"]
    assert set(cases) == {f"{case} {kind}" for case in ("stream", "parquet", "memory") for kind in ("full", "pruned")}
    assert all(c["rows"] == produced for c in cases.values())
    # the Python workers read the streams' partitions: their CPU counted, even of a worker that exited meanwhile
    # (never negative, as when an exited worker's CPU left the tree). One case's figure may be 0 at --quick size:
    # /proc counts CPU in 10 ms ticks, and a reused worker can serve a small case within one
    workers = [cases[f"{case} {kind}"]["cpu_s"]["python workers"] for case in ("stream", "memory")
               for kind in ("full", "pruned")]
    assert min(workers) >= 0 and sum(workers) > 0, cases
    ratios = result["ratios"]
    assert set(ratios) == {f"{kind} / {ceiling}" for kind in ("full", "pruned") for ceiling in ("parquet", "memory")}
    assert all(r["wall"] > 0 and r["cpu"] > 0 for r in ratios.values()), ratios


def test_security_benchmark_runs_quick(tmp_path: Path) -> None:
    """The ACL/TLS cost benchmark at --quick size: every setting produced and sent, with figures > 0."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "security.py"), "--quick", "--json", str(out), "--dir",
         str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    medians = json.loads(out.read_text())["medians"]
    assert set(medians) == {"plain", "acl", "tls", "acl+tls"}
    assert all(m["msgs_per_s"] > 0 and m["p99_ms"] > 0 for m in medians.values()), medians


def test_latency_stages_traces_every_process(tmp_path: Path) -> None:
    """One short latency run, every process traced: each step between the stamp and ``poll`` returning is
    timed, and they add up to the total (the stages of one message, in order)."""
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "latency_stages.py"), "--quick", "--json",
                           str(out), "--dir", str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    *steps, (_, *_, total_mean) = result["steps"]
    assert len(steps) == 13 and total_mean > 0
    assert sum(mean for *_, mean in steps) == pytest.approx(total_mean, rel=1e-6)
    assert result["holds"]["sends"] > 0 and 0 < result["holds"]["sends finding the next pull held (%)"] <= 100
