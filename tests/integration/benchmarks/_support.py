"""Loading a benchmark script as a module, for tests of its pure parts (tables, derived figures)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from servers import load_script

ROOT = Path(__file__).resolve().parents[3]
BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(name: str, path: Path) -> ModuleType:
    """A benchmark module by path (``tests/peers`` would shadow a plain ``import peers``); its own
    imports (``_common``, ``peer_systems``) resolve from ``benchmarks/`` while it loads."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return load_script(name, path)
    finally:
        sys.path.remove(str(BENCHMARKS))
