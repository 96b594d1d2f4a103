"""A class-data-sharing archive of Spark's JVM classes for every JVM the tests start (``tests/conftest.py`` adds it to
``SPARK_SUBMIT_OPTS`` when a run collects a test that starts Spark).

A Spark driver JVM spends most of its start loading and verifying ~10,000 classes from Spark's jars; a dynamic CDS
archive (``-XX:ArchiveClassesAtExit``, JDK 13+) maps them ready-made instead. Measured on the 2-core machine (load
9-10): a session's start and two small jobs, 9.2-9.8 → 4.9-6.1 CPU-s of the JVM, 8.0-8.3 → 4.6-4.7 s to the session.
The archive is made once per JDK, pyspark and JVM options by one session started here with a few small jobs
(``python tests/spark_cds.py OUT``), kept under the system's temp directory, and made again only when missing. A JVM
whose class path does not start with the archive's (a driver given ``--driver-class-path``), or another JDK, starts
without it, as before: its warning is switched off (``-Xlog``), so no test sees a line it did not print.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD_TIMEOUT_S = 300.0  # one session's start, a few jobs and the archive's dump, on a loaded machine
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # an archive a JVM cannot use is skipped without a warning on stdout
CACHE = Path(tempfile.gettempdir()) / "spark_mq-tests-cds"


def archive_opts(jvm_opts: str) -> str:
    """``jvm_opts`` plus the archive's options, the archive made first when missing; ``jvm_opts`` alone when it
    cannot be made (no java, no pyspark: the tests that need them say so themselves)."""
    try:
        archive = _archive(jvm_opts)
    except (OSError, subprocess.SubprocessError, ImportError):
        return jvm_opts
    return f"{jvm_opts} -XX:SharedArchiveFile={archive} {QUIET}" if archive else jvm_opts


def _archive(jvm_opts: str) -> Path | None:
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    key = hashlib.sha256("\n".join([java, pyspark.__version__, pyspark.__file__, jvm_opts,
                                    Path(__file__).read_text()]).encode()).hexdigest()[:16]
    CACHE.mkdir(exist_ok=True)
    archive = CACHE / f"spark-{key}.jsa"
    with open(CACHE / f"spark-{key}.lock", "w") as lock:  # another run (an xdist worker) making the same one waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            part = archive.with_suffix(f".{os.getpid()}.part")
            env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{jvm_opts} -XX:ArchiveClassesAtExit={part}"}
            done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0 or not part.exists() or part.stat().st_size == 0:
                part.unlink(missing_ok=True)
                return None
            part.replace(archive)
    return archive


def _train() -> None:
    """A session as the tests' own (local[2], no UI) running a few small jobs, Python workers included; returns once
    its JVM has exited, i.e. written the archive."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark_mq-tests-cds")
             .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.range(1000).selectExpr("sum(id)").collect()
    spark.createDataFrame([(1, "a")], "a int, b string").groupBy("b").count().collect()
    spark.stop()
    gateway = SparkContext._gateway
    gateway.shutdown()
    gateway.proc.stdin.close()  # the JVM exits at its stdin's end, dumping the archive on the way out
    gateway.proc.wait(BUILD_TIMEOUT_S)


if __name__ == "__main__":
    _train()
