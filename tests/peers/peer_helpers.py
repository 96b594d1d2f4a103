"""Helpers of the peer tests: real ``spark-mq namesrv`` / ``spark-mq broker`` processes.

Each server is a subprocess on a free loopback port (``--port 0``), its stderr (debug log) in a
file under the test's tmp_path; it is ready once it prints its address, and it is stopped by
PID with SIGTERM.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# small files so a broker starts fast in a temp dir (the defaults map a 1 GiB commitlog and a 420 MB index)
SMALL_BROKER_CONF = """\
mapedFileSizeCommitLog=16777216
mapedFileSizeConsumeQueue=60000
maxHashSlotNum=50000
maxIndexNum=200000
"""


def free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def cpp_log(home: Path) -> str:
    """What the C++ client logged under ``home`` (it writes ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.N``)."""
    return "".join(p.read_text(errors="replace") for p in (home / "logs" / "rocketmq-cpp").glob("*rocketmq-cpp.log*"))


@dataclass
class ServerProcess:
    """One running ``spark-mq`` server subprocess."""

    proc: subprocess.Popen
    addr: str
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM by PID and wait; returns the exit code (SIGKILL after STOP_TIMEOUT_S, then -9)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def start_server(args: list[str], log_path: Path) -> ServerProcess:
    """Run ``python -m spark_mq.cli -v <args>`` and wait for its ready line (its last word is the address)."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "spark_mq.cli", "-v", *args],
                                stdout=subprocess.PIPE, stderr=log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            break
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:  # exited
            break
        line += chunk
    if not line.endswith(b"\n"):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)
        proc.stdout.close()
        pytest.fail(f"spark-mq {args[0]} did not get ready (exit {proc.returncode}, printed {line!r}):\n"
                    f"{log_path.read_text(errors='replace')[-4000:]}")
    return ServerProcess(proc, line.split()[-1].decode(), log_path)


def start_namesrv(log_path: Path) -> ServerProcess:
    return start_server(["namesrv", "--port", "0"], log_path)


def start_broker(namesrv: str, store: Path, log_path: Path, port: int = 0) -> ServerProcess:
    conf = store.parent / "broker.conf"
    if not conf.exists():
        conf.write_text(SMALL_BROKER_CONF)
    return start_server(["broker", "-c", str(conf), "--namesrv", namesrv, "--port", str(port),
                         "--store", str(store), "--metrics-port", "0"], log_path)


def stop_cleanly(server: ServerProcess, store: Path | None = None) -> None:
    """Stop ``server``; it must exit 0 and, for a broker, leave no abort file (a clean shutdown)."""
    code = server.stop()
    assert code == 0, f"{server.log_path.name} exited {code}:\n{server.log()[-4000:]}"
    if store is not None:
        assert not (store / "abort").exists(), f"abort file left after a clean stop:\n{server.log()[-4000:]}"
