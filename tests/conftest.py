"""Puts ``tests/`` on ``sys.path``: the shared process helpers are ``import servers`` from any test;
``api`` is the one fixture every kind of test shares: a blocking client of the remoting requests.

Hypothesis runs under one profile: no per-example deadline (a wall-clock limit that a loaded
machine breaks, not the code) and a failure prints its ``@reproduce_failure`` blob, so the
random example that failed can be replayed.

Every JVM a Spark test starts (the shared session, a driver or job subprocess, a notebook's kernel, a
benchmark's smoke run: they inherit the environment) compiles with C1 only (``SPARK_SUBMIT_OPTS``, which Spark's
launcher adds to the driver's java command): the tests' JVMs live seconds to minutes, and C2's compiler threads
cost them about half their CPU on a 2-core machine (22.5 → 12 CPU-s for a session's start and a few small jobs),
as the ZooKeeper servers of ``consensus.py`` already run. A value set in the environment is kept. When a run
collects a test of ``SPARK_TEST_DIRS``, those options also map a class-data-sharing archive of Spark's classes
(``spark_cds.py``: about half a JVM's start, made once per machine).

Under pytest-xdist's ``--dist loadfile`` (``-n 2``) a test file runs whole on one worker (its module-scoped servers
start once), and the files under one of ``ONE_WORKER_DIRS`` all run on the same worker, one after another.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from spark_mq.client.sync_api import SyncMQClientAPI

sys.path.insert(0, str(Path(__file__).parent))

SPARK_TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1"
OWN_JVM_OPTS = "SPARK_SUBMIT_OPTS" not in os.environ
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM_OPTS)
# the tests that start Spark JVMs (sessions, drivers, jobs, the benchmarks' smoke runs, a standalone cluster)
SPARK_TEST_DIRS = ("tests/spark/", "tests/integration/benchmarks/", "tests/integration/machines/")

# Spark's tests: one worker, so one session-scoped SparkSession JVM in the run, not one per worker, and no two of
# their Spark jobs compete for the 2 cores
ONE_WORKER_DIRS = ("tests/spark/",)

settings.register_profile("spark_mq", deadline=None, print_blob=True)
settings.load_profile("spark_mq")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The CDS archive in the Spark JVMs' options, before any test starts one (made here when missing)."""
    if OWN_JVM_OPTS and any(item.nodeid.startswith(SPARK_TEST_DIRS) for item in session.items):
        from spark_cds import archive_opts

        os.environ["SPARK_SUBMIT_OPTS"] = archive_opts(SPARK_TEST_JVM_OPTS)


@pytest.fixture
def api():
    with SyncMQClientAPI(timeout=10.0) as client:
        yield client


if importlib.util.find_spec("xdist") is not None:  # the hook is xdist's: pytest rejects it where xdist is missing

    def pytest_xdist_make_scheduler(config, log):
        """``--dist loadfile`` with each of ``ONE_WORKER_DIRS`` scheduled as one file."""
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class OneWorkerDirsScheduling(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = super()._split_scope(nodeid)
                return next((d for d in ONE_WORKER_DIRS if path.startswith(d)), path)

        return OneWorkerDirsScheduling(config, log)
