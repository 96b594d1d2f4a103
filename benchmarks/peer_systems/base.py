"""What every measured system provides, and the process helpers its adapter uses.

A system is two halves so the latency consumer can run in its own process:

- :class:`Server` owns the server process(es): started on free loopback ports with the data in a
  directory of ours, stopped cleanly by PID. It lives in the harness process only.
- :class:`Client` is built from the server's ``endpoint`` (a small picklable dict) in any process
  and does the work of one workload through the system's own Python client.

Every server runs as our child, never as a system service, so stopping it (by PID) is ours to do.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 120.0  # RabbitMQ replaying a 1 GiB stream on a loaded machine
STOP_TIMEOUT_S = 120.0  # a clean stop may flush a whole backlog
POLL_INTERVAL_S = 0.01  # readiness polls; small against every start-up time measured
LOG_TAIL_CHARS = 3000
REPLICATED = "replicated"  # a variant: three replicas, a send acknowledged once a majority has it
AUTH = "acl"  # a variant: the system's own authentication (an account, a user) on every connection
REPLICAS = 3
AUTH_USER, AUTH_PASSWORD = "bench_user", "bench_password_1"  # throwaway accounts of the ACL variants

T = TypeVar("T")
Endpoint = dict[str, Any]
OnBody = Callable[[bytes], None]


class PeerError(RuntimeError):
    """A server did not start or stop as expected; the message carries its log tail."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (sparse files count what they use, as ``du``)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def command_output(argv: Sequence[str]) -> str:
    """First line of a ``--version`` style command, or ``?`` if it cannot run."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "?"


def package_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def batches(pool: Sequence[T], count: int, size: int) -> Iterator[list[T]]:
    """``count`` items of ``pool`` (cycled) in lists of ``size``, made as they are sent."""
    n = len(pool)
    for start in range(0, count, size):
        yield [pool[i % n] for i in range(start, min(start + size, count))]


async def windowed(call: Callable[[T], Awaitable[object]], items: Iterable[T], window: int) -> None:
    """``await call(item)`` for every item, ``window`` calls in flight, issued in order."""
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await call(item)

    await asyncio.gather(*(worker() for _ in range(window)))


class Child:
    """One server process of ours: output to a log file, stopped by PID (SIGTERM, then SIGKILL
    after ``STOP_TIMEOUT_S``, so a stuck server never outlives the harness)."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, stdout_pipe: bool = False) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE if stdout_pipe else log, stderr=log,
                                         env=dict(env) if env is not None else None, cwd=cwd,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def check_alive(self, what: str) -> None:
        if not self.alive():
            raise PeerError(f"{what} exited with {self.proc.returncode} while starting:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Signal by PID and reap; returns the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def stop_cleanly(self, what: str, clean_codes: tuple[int, ...] = (0,)) -> None:
        """SIGTERM and reap (see :meth:`stop`); PeerError when the exit code is not a clean one."""
        code = self.stop()
        if code not in clean_codes:
            raise PeerError(f"{what} exited {code} on SIGTERM")


def wait_for(predicate: Callable[[], bool], child: Child, what: str, timeout: float = READY_TIMEOUT_S) -> None:
    """Poll ``predicate`` until true; fail early (with the log) if ``child`` died."""
    deadline = time.monotonic() + timeout
    while not predicate():
        child.check_alive(what)
        if time.monotonic() > deadline:
            raise PeerError(f"{what} not ready after {timeout:g}s:\n{child.log_tail()}")
        time.sleep(POLL_INTERVAL_S)


class Server(abc.ABC):
    """A system's server, data under ``workdir`` (created by the caller, removed by the caller)."""

    name: ClassVar[str]  # row/column label
    binary: ClassVar[str]  # the executable whose absence skips the system
    client_class: ClassVar[type[Client]]
    durability: ClassVar[str]  # the setting that makes it comparable to our ASYNC_FLUSH, for the notes
    clean_exit_codes: ClassVar[tuple[int, ...]] = (0,)  # what the server exits with on SIGTERM

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.child: Child | None = None  # the server process; ``start`` makes it
        self.nodes: list[Child] = []  # a variant's further server processes (cluster nodes, slaves)
        self.helper: Child | None = None  # a name service kept across restarts (NameServer, epmd)

    @classmethod
    def missing(cls) -> str | None:
        """Why this system cannot run here (None: it can)."""
        if shutil.which(cls.binary) is None:
            return f"{cls.binary} is not installed (scripts/install_peers.sh installs it)"
        return None

    @classmethod
    @abc.abstractmethod
    def versions(cls) -> str:
        """Server and Python client versions, for the table's notes."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start the server on its ports (the same ones again after a ``stop``); return once the
        process is up enough to accept a connection attempt (readiness is the client's to probe)."""

    @abc.abstractmethod
    def wait_ready(self) -> None:
        """Block until the server serves clients (after ``start``, for untimed set-up)."""

    def stop(self) -> None:
        """Stop cleanly: SIGTERM, and an unclean exit code is an error (the state a restart
        recovers from is that of a clean shutdown). The helper keeps running."""
        children = [*reversed(self.nodes), *([self.child] if self.child is not None else [])]
        self.nodes, self.child = [], None
        failed = []
        for child in children:  # every one is stopped, even after one stopped badly
            try:
                child.stop_cleanly(self.name, self.clean_exit_codes)
            except PeerError as e:
                failed.append(e)
        if failed:
            raise failed[0]

    def close(self) -> None:
        """Stop everything this server started, the helper too."""
        self.stop()
        if self.helper is not None:
            helper, self.helper = self.helper, None
            helper.stop()

    @property
    @abc.abstractmethod
    def endpoint(self) -> Endpoint:
        """What a :class:`Client` needs to connect, picklable."""


class PortServer(Server):
    """A server that is one native executable serving on ``self.port``."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.port = free_port()

    def wait_ready(self) -> None:
        assert self.child is not None
        wait_for(lambda: port_open(self.port), self.child, self.binary)
        self.after_listening()

    def after_listening(self) -> None:
        """Wait for what an open port does not promise yet (data loaded, subsystems up)."""


class Client(abc.ABC):
    """One connection's worth of work against a system, made from ``Server.endpoint``.

    Bodies are opaque bytes: the harness stamps latency bodies itself, so every system carries
    exactly the same payload. Coroutines of one client run on one event loop.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abc.abstractmethod
    async def connect(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def create(self, stream: str) -> None:
        """Make ``stream`` (topic / stream / stream queue) with the comparable durability."""

    @abc.abstractmethod
    async def produce(self, stream: str, bodies: Sequence[bytes], count: int) -> None:
        """Send ``count`` messages (``bodies`` cycled) as fast as this client can, batched or
        pipelined as it does best; return once the server acknowledged every one."""

    @abc.abstractmethod
    async def drain(self, stream: str, count: int) -> int:
        """Read ``stream`` from its first message until ``count`` messages arrived, as fast as
        this client can; return the number of body bytes received."""

    @abc.abstractmethod
    async def send(self, stream: str, bodies: list[bytes]) -> None:
        """Send ``bodies`` now (one message each) and wait for the server's acknowledgement."""

    @abc.abstractmethod
    async def subscribe(self, stream: str, on_body: OnBody, ready: asyncio.Event) -> None:
        """Receive ``stream`` from its start with this client's lowest-latency delivery (push or
        long poll), calling ``on_body`` per message as the application would see it. Set
        ``ready`` once subscribed; run until cancelled."""

    @abc.abstractmethod
    async def first(self, stream: str) -> bytes | None:
        """The stream's first message, or None if the server cannot serve it yet. Raises if the
        server does not answer at all (the restart probe retries either way)."""
