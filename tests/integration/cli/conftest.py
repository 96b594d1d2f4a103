"""Fixtures of the CLI tests (``cluster``, a real NameServer and broker per module, is in
``tests/integration/conftest.py``): ``spark_mq_cli`` running the real ``spark-mq`` command in a subprocess."""

from __future__ import annotations

import subprocess

import pytest
from servers import run_cli

__all__ = ["run_cli"]  # the CLI tests import it from here


@pytest.fixture
def cli(cluster):
    """``cli(*args, input=...)``: the real command against the module's cluster; must exit 0."""

    def call(*args: str, input: str | bytes | None = None, ok: bool = True) -> subprocess.CompletedProcess:
        result = run_cli(*args, input=input, namesrv=cluster.namesrv)
        if ok:
            assert result.returncode == 0, f"spark-mq {' '.join(args)} exited {result.returncode}:\n" \
                                           f"{result.stdout}\n{result.stderr}"
        return result

    return call
