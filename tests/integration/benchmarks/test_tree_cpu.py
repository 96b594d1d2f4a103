"""The benchmarks' process-tree CPU figures keep a child the kernel reaps unseen (PySpark's worker daemon
ignores SIGCHLD, so its workers' CPU is added to no parent's reaped figure when they exit)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.integration.benchmarks._support import BENCHMARKS, load_benchmark

common = load_benchmark("_common", BENCHMARKS / "_common.py")

BURN_S = 0.5  # the CPU the reaped-unseen child spends
# a parent that ignores SIGCHLD (as pyspark.daemon) forks a child that burns BURN_S of CPU and exits; the
# parent outlives it (the kernel removes the child's /proc entry as it reaps it)
PARENT = textwrap.dedent(f"""
    import os, signal, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        start = time.process_time()
        while time.process_time() - start < {BURN_S}:
            pass
        os._exit(0)
    while os.path.exists(f"/proc/{{child}}"):
        time.sleep(0.05)
""")


def total(tree: dict[int, tuple[str, float, float]]) -> float:
    return sum(own + reaped for _cmd, own, reaped in tree.values())


def test_watch_keeps_the_cpu_of_a_child_reaped_unseen() -> None:
    """Two snapshots lose the child's CPU; the watch counts it (its last sample: at most TREE_SAMPLE_S short)."""
    with common.TreeCpuWatch() as watch:
        subprocess.run([sys.executable, "-c", PARENT], check=True, timeout=60)
    snapshots = total(common.process_tree_cpu()) - total(watch.before)
    assert snapshots < BURN_S / 2, snapshots  # what the benchmark counted before the watch
    assert total(watch.after) - total(watch.before) >= BURN_S - 2 * common.TREE_SAMPLE_S
    assert len(watch.lost) == 1
    assert 0 < watch.watch_cpu_s < BURN_S
