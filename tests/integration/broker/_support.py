"""Shared pieces of the broker integration tests: real ``spark-mq namesrv`` / ``spark-mq broker``
subprocesses on free loopback ports, and builders for the request headers the tests send.

Each server is started as ``python -m spark_mq.cli ...`` with its log in a file next to its
store; it is ready once it prints its ready line (whose last word is its address), and it is
stopped by PID with SIGTERM (a clean stop must exit 0 and, for a broker, leave no abort file).
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_mq.common.properties import encode_properties
from spark_mq.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader, build_pull_sys_flag

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# small files so a broker starts fast in a temp dir (the defaults map a 1 GiB commitlog and a 420 MB index)
SMALL_BROKER_CONF = """\
mapedFileSizeCommitLog=16777216
mapedFileSizeConsumeQueue=60000
maxHashSlotNum=50000
maxIndexNum=200000
"""

_unique = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test of this session uses (topics, groups, client ids)."""
    return f"{prefix}_{os.getpid()}_{next(_unique)}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One running ``spark-mq`` server subprocess; ``addr`` is what its ready line printed."""

    def __init__(self, args: list[str], log_path: Path, ready_prefix: str) -> None:
        self.args = args
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "spark_mq.cli", *args],
                                         stdout=subprocess.PIPE, stderr=log)
        line = self._read_line(READY_TIMEOUT_S)
        if not line.startswith(ready_prefix):
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT_S)
            self.proc.stdout.close()
            pytest.fail(f"spark-mq {args[0]} did not get ready (exit {self.proc.returncode}, printed {line!r}):\n"
                        f"{self.log()[-4000:]}")
        self.addr = line.split()[-1]

    def _read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                break
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:  # exited
                break
            line += chunk
        return line.decode(errors="replace")

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Wait for the exit (SIGKILL after ``timeout``); returns the exit code."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def terminate(self) -> int:
        """SIGTERM by PID and wait; returns the exit code."""
        if self.alive():
            self.signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        """SIGKILL by PID (a crash) and reap."""
        if self.alive():
            self.signal(signal.SIGKILL)
        self.wait()

    def stop_cleanly(self, store: Path | None = None) -> None:
        code = self.terminate()
        assert code == 0, f"{self.log_path.name} exited {code}:\n{self.log()[-4000:]}"
        if store is not None:
            assert not (store / "abort").exists(), f"abort file left after a clean stop:\n{self.log()[-4000:]}"


def start_namesrv(root: Path) -> ServerProcess:
    root.mkdir(parents=True, exist_ok=True)
    return ServerProcess(["namesrv", "--port", "0"], root / "namesrv.log", "spark-mq namesrv listening on ")


class Broker:
    """A ``spark-mq broker`` process registered with ``namesrv``.

    The store is ``root / "store"``, the config ``root / "broker.conf"`` (the small-file settings
    plus ``extra_conf``), the log ``root / "broker.log"``. ``restart`` keeps port, metrics port
    and store.
    """

    def __init__(self, namesrv: str, root: Path, extra_conf: str = "", metrics: bool = True,
                 broker_name: str = "broker-a") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.namesrv = namesrv
        self.root = root
        self.store = root / "store"
        self.conf = root / "broker.conf"
        self.conf.write_text(f"{SMALL_BROKER_CONF}brokerName={broker_name}\n{extra_conf}")
        self.log_path = root / "broker.log"
        self.name = broker_name
        self.metrics_port = free_port() if metrics else 0
        self.server = self._start(0)

    def _start(self, port: int) -> ServerProcess:
        return ServerProcess(self.args(port, self.metrics_port), self.log_path, "spark-mq broker serving at ")

    def args(self, port: int, metrics_port: int) -> list[str]:
        return ["broker", "-c", str(self.conf), "--namesrv", self.namesrv, "--port", str(port),
                "--store", str(self.store), "--metrics-port", str(metrics_port)]

    @property
    def addr(self) -> str:
        return self.server.addr

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Stop cleanly: exit code 0 and no abort file left in the store."""
        self.server.stop_cleanly(self.store)

    def start_again(self) -> None:
        """Start on the same port, metrics port and store (after a stop or a kill)."""
        assert not self.server.alive()
        self.server = self._start(self.server.port)

    def restart(self) -> None:
        self.stop()
        self.start_again()


# --- request builders -----------------------------------------------------------------------


def send_header(topic: str, queue_id: int = -1, *, tags: str | None = None, keys: str | None = None,
                uniq_key: str | None = None, props: dict[str, str] | None = None,
                group: str = "itest_producer") -> SendMessageRequestHeader:
    """A SEND_MESSAGE header as a RocketMQ producer builds it (default topic TBW102, 4 queues)."""
    p = dict(props or {})
    if tags is not None:
        p["TAGS"] = tags
    if keys is not None:
        p["KEYS"] = keys
    if uniq_key is not None:
        p["UNIQ_KEY"] = uniq_key
    p.setdefault("WAIT", "true")
    return SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0, properties=encode_properties(p).decode())


def pull_header(group: str, topic: str, queue_id: int, offset: int, *, max_nums: int = 32,
                suspend_ms: int = 0, subscription: str | None = None,
                commit_offset: int | None = None) -> PullMessageRequestHeader:
    """A PULL_MESSAGE header; ``suspend_ms`` > 0 sets the suspend flag (long polling)."""
    return PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=build_pull_sys_flag(commit_offset=commit_offset is not None, suspend=suspend_ms > 0,
                                     subscription=subscription is not None),
        commit_offset=commit_offset if commit_offset is not None else 0, suspend_timeout_millis=suspend_ms,
        sub_version=0, subscription=subscription)


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.1f} s waiting for {what} (last: {value!r})")
        time.sleep(interval)
