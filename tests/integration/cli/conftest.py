"""Fixtures of the CLI tests (``cluster``, a real NameServer and broker per module, is in
``tests/integration/conftest.py``): ``spark_mq_cli`` running the real ``spark-mq`` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CLI_TIMEOUT_S = 60.0


def run_cli(*args: str, input: str | bytes | None = None, namesrv: str | None = None,
            timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """``python -m spark_mq.cli <args>`` (with ``--namesrv`` from $SPARK_MQ_NAMESRV when given); text output."""
    env = dict(os.environ, COLUMNS="250")
    env.pop("SPARK_MQ_NAMESRV", None)
    if namesrv is not None:
        env["SPARK_MQ_NAMESRV"] = namesrv
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run([sys.executable, "-m", "spark_mq.cli", *args], input=data, capture_output=True,
                          timeout=timeout, env=env)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                       proc.stderr.decode(errors="replace"))


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
