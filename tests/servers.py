"""Real ``spark-mq namesrv`` / ``spark-mq broker`` subprocesses for the integration and peer tests,
plus the small helpers every such test needs (``unique`` names, free ports, ``wait_until``, and
``until_held``: a running broker's held pulls, observed).

Importable as ``servers`` from any test (``tests/conftest.py`` puts ``tests/`` on ``sys.path``).

Each server is started as ``python -m spark_mq.cli ...`` with its stderr (log) in a file; it is
ready once it prints its ready line (whose last word is its address), and it is stopped by PID
with SIGTERM (a clean stop must exit 0 and, for a broker, leave no abort file).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from spark_mq.acl.dev_accounts import DevAccounts, write_dev_accounts
from spark_mq.client.api import MQClientAPI

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

NAMESRV_READY = "spark-mq namesrv listening on "
BROKER_READY = "spark-mq broker serving at "

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


def load_script(name: str, path: Path) -> ModuleType:
    """A script (a benchmark, a job: not in a package) as module ``name``, registered in ``sys.modules`` while and
    after it executes (dataclasses look their module up then)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_addr() -> str:
    return f"127.0.0.1:{free_port()}"


def wait_until(predicate, timeout: float = 10.0, what: str = "condition", interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last: {value!r})")
        time.sleep(interval)


@contextlib.contextmanager
def small_tmpfs(point: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``point`` (created) while the block runs: a disk a test
    can fill. Skips the test where mounting is not allowed (it needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for a test to fill needs root")
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


class ServerProcess:
    """One running ``spark-mq`` server subprocess; ``addr`` is what its ready line printed.

    ``verbose`` runs it with ``-v`` (debug log). ``launcher`` runs it through a command that execs it
    (``ip netns exec NS``: on another machine, ``tests/netns.py``), so its PID is still the server's.
    """

    def __init__(self, args: list[str], log_path: Path, ready_prefix: str, verbose: bool = True,
                 launcher: list[str] | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.launcher = launcher or []
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([*self.launcher, sys.executable, "-m", "spark_mq.cli",
                                          *(["-v"] if verbose else []), *args], stdout=subprocess.PIPE, stderr=log)
        line = self._read_line(READY_TIMEOUT_S)
        if not line.startswith(ready_prefix) or not line.endswith("\n"):
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT_S)
            self.proc.stdout.close()
            pytest.fail(f"spark-mq {args[0]} did not get ready (exit {self.proc.returncode}, printed {line!r}):\n"
                        f"{self.log()[-4000:]}")
        self.addr = line.split()[-1]
        self.ready_output = line  # what it printed up to its ready line (and any lines read with it)

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
        """SIGTERM by PID and wait; returns the exit code. SIGCONT first: a process a test left stopped
        (SIGSTOP, the test failed before its SIGCONT) would hold the SIGTERM pending until the SIGKILL."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        """SIGKILL by PID (a crash: the NameServer is not told) and reap."""
        if self.alive():
            self.signal(signal.SIGKILL)
        self.wait()

    def stop_cleanly(self, store: Path | None = None) -> None:
        """SIGTERM; it must exit 0 and, for a broker (``store``), leave no abort file."""
        code = self.terminate()
        assert code == 0, f"{self.log_path.name} exited {code}:\n{self.log()[-4000:]}"
        if store is not None:
            assert not (store / "abort").exists(), f"abort file left after a clean stop:\n{self.log()[-4000:]}"


def start_namesrv(log_path: Path, verbose: bool = True) -> ServerProcess:
    """A NameServer on a free port, logging to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return ServerProcess(["namesrv", "--port", "0"], log_path, NAMESRV_READY, verbose)


class Broker:
    """A ``spark-mq broker`` process registered with ``namesrv``, started on a free port.

    The store is ``root / "store"``, the config ``root / "broker.conf"`` (the small-file settings,
    ``brokerName`` and ``extra_conf``), the log ``root / "broker.log"``. ``metrics`` serves Prometheus
    on a free port (else off). ``restart`` / ``start_again`` keep port, metrics port and store.
    ``launcher``: as ``ServerProcess``'s (another machine).
    """

    def __init__(self, namesrv: str, root: Path, extra_conf: str = "", *, broker_name: str = "broker-a",
                 metrics: bool = False, verbose: bool = True, launcher: list[str] | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.namesrv = namesrv
        self.root = root
        self.store = root / "store"
        self.conf = root / "broker.conf"
        self.conf.write_text(f"{SMALL_BROKER_CONF}brokerName={broker_name}\n{extra_conf}")
        self.log_path = root / "broker.log"
        self.name = broker_name
        self.metrics_port = free_port() if metrics else 0
        self.verbose = verbose
        self.launcher = launcher
        self.server = self._start(0)

    def _start(self, port: int) -> ServerProcess:
        return ServerProcess(self.args(port, self.metrics_port), self.log_path, BROKER_READY, self.verbose,
                             self.launcher)

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

    def stop_if_running(self) -> None:
        if self.server.alive():
            self.stop()

    def kill(self) -> None:
        """SIGKILL: a crash, the NameServer is not told."""
        self.server.kill()

    def start_again(self) -> None:
        """Start on the same port, metrics port and store (after a stop or a kill)."""
        assert not self.server.alive()
        self.server = self._start(self.server.port)

    def restart(self) -> None:
        self.stop()
        self.start_again()


class AclCluster:
    """A NameServer and a broker with aclEnable, on the accounts of ``spark-mq dev --acl`` (written under ``root``):
    both sign their own requests with its admin account; ``user`` is its publisher/subscriber account. ``extra_conf``:
    more config lines of both (TLS, say)."""

    def __init__(self, root: Path, extra_conf: str = "") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.accounts: DevAccounts = write_dev_accounts(root)
        a = self.accounts
        security = (f"aclEnable=true\naclFile={a.acl_file}\naccessKey={a.admin_access_key}\n"
                    f"secretKey={a.admin_secret}\n{extra_conf}")
        conf = root / "namesrv.conf"
        conf.write_text(security)
        self.namesrv = ServerProcess(["namesrv", "-c", str(conf), "--port", "0"], root / "namesrv.log", NAMESRV_READY)
        try:
            self.broker = Broker(self.namesrv.addr, root / "broker", security)
        except BaseException:
            self.namesrv.stop_cleanly()
            raise

    @property
    def user(self) -> tuple[str, str]:
        return self.accounts.user_access_key, self.accounts.user_secret

    @property
    def admin(self) -> tuple[str, str]:
        return self.accounts.admin_access_key, self.accounts.admin_secret

    def stop(self) -> None:
        self.broker.stop()
        self.namesrv.stop_cleanly()


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


# --- long polling, observed -------------------------------------------------------------------

LONG_SUSPEND_MS = 30_000  # the broker's cap (MAX_SUSPEND_S): a pull held this long is not answered by a timeout
WOKEN_WITHIN_S = LONG_SUSPEND_MS / 1000 / 2  # answered within half its suspend: woken, not timed out
HOLD_TIMEOUT_S = 10.0


async def held_pulls(api: MQClientAPI, addr: str) -> int:
    """How many pulls the broker holds right now, as its runtime info reports (``pullHoldWaiters``)."""
    return int((await api.get_broker_runtime_info(addr))["pullHoldWaiters"])


async def until_held(api: MQClientAPI, addr: str, count: int) -> None:
    """Wait until the broker holds exactly ``count`` pulls: what a test sends next then wakes held
    pulls instead of racing their arrival (no "sleep and assume they are held")."""
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while (held := await held_pulls(api, addr)) != count:
        if time.monotonic() > deadline:
            pytest.fail(f"the broker holds {held} pulls, not {count}, after {HOLD_TIMEOUT_S:g} s")
        await asyncio.sleep(0.02)
