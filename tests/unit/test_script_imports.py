"""The scripts outside the package (benchmarks/, jobs/, scripts/, the Spark entry module) import names
that exist: a module moved or split inside ``spark_mq`` breaks them only at run time, often inside a
function of a benchmark that no quick test reaches. Read with ``ast``, resolved with importlib."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_DIRS = ("benchmarks", "jobs", "scripts", "pyspark_spark_mq")
SCRIPTS = sorted(p for d in SCRIPT_DIRS for p in (ROOT / d).rglob("*.py"))


def unresolved(path: Path) -> list[str]:
    """``module.name`` of every ``from spark_mq... import name`` in ``path`` that does not resolve."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "spark_mq"):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
            except ImportError:
                out.append(f"{node.module}.{alias.name} (line {node.lineno})")
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_script_imports_resolve(path):
    assert not unresolved(path), f"{path.relative_to(ROOT)} imports names that do not exist: {unresolved(path)}"
