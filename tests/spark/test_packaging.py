"""A plain ``pip install`` of the wheel is enough for ``spark.read.format("spark_mq")``: Spark's Python
workers find the top-level ``pyspark_spark_mq`` module (its ``DefaultSource``) on ``sys.path``.

The wheel is built from a copy of the sources (so the worktree gets no ``build/``) and installed
into a fresh venv of the same base Python (by the test venv's pip, ``pip --python``: the fresh one has no pip);
the venv sees the test venv's dependencies (pyspark, pyarrow, ...) through a plain path line in a ``.pth`` file,
which does not run that venv's own ``.pth`` files, so the repository's compat-mode editable install stays
invisible to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "spark_mq", "pyspark_spark_mq")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(work / "dist"), str(src)], check=True, capture_output=True, timeout=120)
    (built,) = (work / "dist").glob("spark_mq-*.whl")
    return built


def test_wheel_holds_the_data_source_spark_discovers(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert "pyspark_spark_mq/__init__.py" in names
        assert "DefaultSource" in z.read("pyspark_spark_mq/__init__.py").decode()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert set(z.read(top_level).decode().split()) == {"spark_mq", "pyspark_spark_mq"}
    packaged = {n for n in names if n.startswith("spark_mq/") and n.endswith(".py")}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spark_mq").rglob("*.py")}
    assert sources <= packaged, sorted(sources - packaged)


READ = textwrap.dedent("""
    import sys
    import pyspark_spark_mq
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    rows = (spark.read.format("spark_mq").option("namesrv", sys.argv[1]).option("topic", sys.argv[2])
            .load().count())
    print("module", pyspark_spark_mq.__file__)
    print("rows", rows)
    spark.stop()
""")


def test_wheel_install_serves_format_spark_mq_from_any_directory(wheel, tmp_path, cluster, produced):
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    # no pip of its own (ensurepip costs seconds)
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "spark_mq_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True, capture_output=True, timeout=120)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "read.py").write_text(READ)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    proc = subprocess.run([str(python), "read.py", cluster.namesrv, produced.topic], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"module {site / 'pyspark_spark_mq' / '__init__.py'}" in proc.stdout  # the wheel's, not the repo's
    assert f"rows {len(produced.results)}" in proc.stdout
