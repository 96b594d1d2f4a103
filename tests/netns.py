"""Machines for the tests: Linux network namespaces on one private bridge, so a cluster's processes run
on separate hosts with their own addresses, as on a real network.

``Network(["namesrv", "b1", ...])`` makes one namespace per host (``smq<pid><letter>``), each with ``lo``
up and a veth into a bridge in the root namespace; the hosts are ``10.231.X.2``, ``.3``, ... of a /24
picked from the pid (one not routed here already) and the root namespace is ``.1`` on the bridge, so
the test process itself is one more machine. No namespace has a default route: nothing leaves the
bridge. ``network.popen(host, args)`` runs a command on a host (``ip netns exec`` execs it, so the PID is
the command's own); ``close()`` kills what is still running there by PID, then deletes the links, the
namespaces and the bridge, also after a failed test.

Importable as ``netns`` from any test (``tests/conftest.py`` puts ``tests/`` on ``sys.path``); the
``network`` fixture skips, saying why, where namespaces cannot be made (not root, no ``ip``, no
permission).
"""

from __future__ import annotations

import os
import shutil
import signal
import string
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

SUBNET_PREFIX = "10.231"  # 10.231.X.0/24: private, and unlikely to be a network this machine uses
ROOT_HOST = 1  # the root namespace's address on the bridge: 10.231.X.1
FIRST_HOST = 2
STOP_TIMEOUT_S = 20.0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; a failure raises naming the command and what ``ip`` said."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _free_subnet() -> str:
    """``10.231.X`` with X from the pid, moved on past any /24 this machine already routes."""
    routes = ip("-4", "route", "show", "table", "all").stdout
    start = os.getpid() % 250 + 1
    for i in range(250):
        prefix = f"{SUBNET_PREFIX}.{(start + i - 1) % 250 + 1}"
        if f"{prefix}." not in routes:
            return prefix
    raise RuntimeError(f"every {SUBNET_PREFIX}.X.0/24 is routed here already")


@dataclass(frozen=True)
class Host:
    """One machine: its namespace's name and its address on the bridge."""

    netns: str
    address: str


class Network:
    """Namespaces ``hosts`` (by role) on one bridge; the root namespace is ``gateway`` on it.

    Not thread-safe: build, use and close it from the test's thread.
    """

    def __init__(self, roles: list[str]) -> None:
        if len(set(roles)) != len(roles) or len(roles) > len(string.ascii_lowercase):
            raise ValueError(f"roles must be distinct, at most {len(string.ascii_lowercase)}: {roles}")
        pid = os.getpid()
        self.tag = f"smq{pid}"
        self.bridge = f"{self.tag}br"
        self.prefix = _free_subnet()
        self.gateway = f"{self.prefix}.{ROOT_HOST}"
        self.hosts: dict[str, Host] = {}
        self._veths: list[str] = []
        self._procs: list[subprocess.Popen] = []
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for i, role in enumerate(roles):
                self._add_host(role, i)
        except BaseException:
            self.close()
            raise

    def _add_host(self, role: str, i: int) -> None:
        netns = f"{self.tag}{string.ascii_lowercase[i]}"
        outside, inside = f"{self.tag}v{i}", f"{self.tag}p{i}"
        ip("netns", "add", netns)
        self.hosts[role] = host = Host(netns, f"{self.prefix}.{FIRST_HOST + i}")
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self._veths.append(outside)
        ip("link", "set", inside, "netns", netns)
        ip("link", "set", outside, "master", self.bridge, "up")
        ns = ("-n", netns)
        ip(*ns, "link", "set", "lo", "up")
        ip(*ns, "link", "set", inside, "name", "eth0")
        ip(*ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip(*ns, "link", "set", "eth0", "up")

    def launcher(self, role: str) -> list[str]:
        """The prefix that runs a command on host ``role`` (it execs in the namespace: same PID)."""
        return ["ip", "netns", "exec", self.hosts[role].netns]

    def command(self, role: str, args: list[str]) -> list[str]:
        """``args`` as run on host ``role``."""
        return [*self.launcher(role), *args]

    def popen(self, role: str, args: list[str], **kwargs) -> subprocess.Popen:
        """Start ``args`` on host ``role``; ``close()`` kills it by PID if it still runs."""
        proc = subprocess.Popen(self.command(role, args), **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, role: str, args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """Run ``args`` on host ``role`` to its end (killed after ``timeout``)."""
        return subprocess.run(self.command(role, args), timeout=timeout, check=False, **kwargs)

    def pids(self, role: str) -> list[int]:
        """The processes running on host ``role`` now."""
        out = ip("netns", "pids", self.hosts[role].netns, check=False).stdout
        return [int(p) for p in out.split()]

    def close(self) -> None:
        """Kill what runs in the namespaces (started by this test) by PID, then delete links, namespaces, bridge."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        for role in self.hosts:
            for pid in self.pids(role):  # e.g. a JVM a test's process started there
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for veth in self._veths:
            ip("link", "del", veth, check=False)
        for host in self.hosts.values():
            ip("netns", "del", host.netns, check=False)
        ip("link", "del", self.bridge, check=False)


def why_no_namespaces() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (the tests make and delete them with ip netns)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces with"
    probe = f"smq{os.getpid()}probe"
    done = ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot make a network namespace here: {done.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


@pytest.fixture
def network() -> Iterator[Callable[[list[str]], Network]]:
    """Makes ``Network``s for the test (``network(["namesrv", ...])``) and tears each down after it; skips
    where namespaces cannot be made."""
    reason = why_no_namespaces()
    if reason:
        pytest.skip(reason)
    made: list[Network] = []

    def make(roles: list[str]) -> Network:
        made.append(Network(roles))
        return made[-1]

    yield make
    for net in made:
        net.close()
