"""What must run without Spark does not load it: ``spark_mq.arrow``, ``spark_mq.tiered``, the web console and
every ``spark-mq`` command module (``spark-mq offload`` and ``spark-mq query --archive`` need only pyarrow and
deltalake), imported in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "spark_mq"
WITHOUT_SPARK = ("arrow", "tiered", "commands", "dashboard")


def modules_of(part: str) -> list[str]:
    base = PACKAGE_DIR / part
    names = []
    for path in sorted(base.rglob("*.py")):
        parts = ["spark_mq", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_arrow_tiered_and_commands_import_without_pyspark():
    modules = [m for part in WITHOUT_SPARK for m in modules_of(part)]
    assert "spark_mq.tiered.offload" in modules and "spark_mq.commands.query" in modules
    assert "spark_mq.dashboard.app" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
