"""The SPARK_HOME of local sessions (spark_mq/spark/spark_home.py): Spark's Python processes, started with the
path Spark gives them, import the installed pyspark and py4j, and the home is only used where nobody chose
one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from spark_mq.spark.spark_home import HANDS_OFF_ENV, local_spark_home


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in HANDS_OFF_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_python_processes_spark_starts_import_the_installed_pyspark(clean_env):
    home = local_spark_home()
    assert home is not None and home.is_relative_to(clean_env / "cache")
    assert (home / "bin" / "spark-submit").is_file() and (home / "jars").is_dir()
    lib = home / "python" / "lib"
    assert not (lib / "pyspark.zip").exists()
    assert not any(p.name.startswith("py4j") for p in lib.iterdir())
    # the path PythonUtils.sparkPythonPath gives every worker, with this home: the zips Spark's own home has
    zips = sorted(p.name for p in (Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))
    assert "pyspark.zip" in zips and len(zips) == 2
    path = os.pathsep.join(str(lib / name) for name in zips)
    out = subprocess.run([sys.executable, "-c", "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"],
                         env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True).stdout
    assert all(".zip" not in line and line.endswith("__init__.py") for line in out.splitlines()), out
    assert local_spark_home() == home  # built once


@pytest.mark.parametrize("name", ["SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "MASTER"])
def test_a_home_or_master_chosen_elsewhere_is_kept(clean_env, monkeypatch, name):
    monkeypatch.setenv(name, "x")
    assert local_spark_home() is None


def test_a_cache_that_cannot_be_written_keeps_sparks_home(clean_env, monkeypatch):
    blocked = clean_env / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert local_spark_home() is None
    assert not any(Path(clean_env).glob("**/spark-home-*"))
