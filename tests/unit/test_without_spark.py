"""What must run without Spark does not load it: ``spark_mq.arrow``, ``spark_mq.tiered``, the web console and
every ``spark-mq`` command module (``spark-mq offload`` and ``spark-mq query --archive`` need only pyarrow and
deltalake), imported in a fresh interpreter."""

from __future__ import annotations

from pathlib import Path

from fresh_imports import loaded_by

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
    code = f"import importlib\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
    assert [m for m in loaded_by(code, ("pyspark",)) if m == "pyspark" or m.startswith("pyspark.")] == []
