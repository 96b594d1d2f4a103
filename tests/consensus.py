"""Real ZooKeeper servers for the controller tests: one standalone server or an ensemble of several,
each a ``java ... QuorumPeerMain`` child process on free loopback ports with its data in a temp dir, or
each on a machine of its own (``machines``: a ``netns.Network`` host's address and launcher per member, on
ZooKeeper's usual ports), so the network between members can be cut (``tests/faults.py``).

Importable as ``consensus`` from any test (``tests/conftest.py`` puts ``tests/`` on ``sys.path``).
ZooKeeper comes from Debian's ``zookeeper`` package (``scripts/install_consensus.sh``, which
``scripts/test.sh`` runs); :func:`require_zookeeper` skips a test, naming that script, when it is
missing. Members are stopped by PID; ``kill`` is a SIGKILL (a crashed member).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from servers import free_port, wait_until

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # the server's log goes to its log file
TICK_MS = 250  # sessions may then be as short as 2 ticks: tests use ~2 s so a takeover is quick
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
LOOPBACK = "127.0.0.1"
MACHINE_PORTS = (2181, 2888, 3888)  # client, quorum, election: each member on a machine of its own


def require_zookeeper() -> None:
    """Skip the calling test when the ZooKeeper server is not installed (its client, kazoo, is a dependency
    of spark-mq itself)."""
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        pytest.skip(f"ZooKeeper is not installed ({ZOOKEEPER_JAR} or java missing): "
                    "scripts/install_consensus.sh failed or was not run")


def four_letter(port: int, command: str, host: str = LOOPBACK) -> str:
    """A ZooKeeper four-letter command's answer ('' when the member does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.sendall(command.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperMember:
    """One ZooKeeper server process of an ensemble (``myid`` counts from 1)."""

    def __init__(self, root: Path, myid: int, client_port: int, servers: str, host: str = LOOPBACK,
                 launcher: list[str] | None = None) -> None:
        self.myid = myid
        self.client_port = client_port
        self.host = host
        self.launcher = launcher or []
        self.dir = root / f"zk{myid}"
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{myid}\n")
        self.conf = self.dir / "zoo.cfg"
        self.conf.write_text(
            f"tickTime={TICK_MS}\ninitLimit=20\nsyncLimit=8\ndataDir={data}\n"
            f"clientPort={client_port}\nclientPortAddress={host}\n"
            "admin.enableServer=false\n4lw.commands.whitelist=srvr,cons\n"
            f"maxSessionTimeout=30000\n{servers}")
        self.log_path = self.dir / "zookeeper.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        java = shutil.which("java")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.launcher, java, "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_BINDING}", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                 str(self.conf)],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def mode(self) -> str:
        """'standalone', 'leader' or 'follower' once it serves clients, else ''."""
        for line in four_letter(self.client_port, "srvr", self.host).splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return ""

    def sessions(self) -> int:
        """How many client sessions are connected to this member (the four-letter query is none)."""
        return four_letter(self.client_port, "cons", self.host).count("sid=0x")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL by PID and reap: a crashed member."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on free loopback ports under ``root`` (1: standalone), or one on each of
    ``machines`` ((address, launcher) pairs: ``size`` is their number), started and serving when the
    constructor returns; ``hosts`` is the client connection string."""

    def __init__(self, root: Path, size: int = 1, machines: list[tuple[str, list[str]]] | None = None) -> None:
        require_zookeeper()
        if machines is None:
            machines = [(LOOPBACK, [])] * size
            ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
        else:
            ports = [MACHINE_PORTS] * len(machines)
        servers = "" if len(machines) == 1 else "".join(
            f"server.{i}={host}:{peer}:{election}\n"
            for i, ((host, _), (_, peer, election)) in enumerate(zip(machines, ports, strict=True), 1))
        self.members = [ZooKeeperMember(root, i, client, servers, host, launcher)
                        for i, ((host, launcher), (client, _, _)) in enumerate(zip(machines, ports, strict=True), 1)]
        try:
            for member in self.members:
                member.start()
            for member in self.members:
                wait_until(lambda m=member: m.mode() or not m.alive(), READY_TIMEOUT_S,
                           f"ZooKeeper {member.myid} serving")
                assert member.alive(), f"ZooKeeper {member.myid} exited:\n{member.log()[-4000:]}"
        except BaseException:
            self.stop()
            raise

    @property
    def hosts(self) -> str:
        return ",".join(m.address for m in self.members)

    def leader(self) -> ZooKeeperMember:
        """The member the ensemble elected (the standalone server for one)."""
        return wait_until(lambda: next((m for m in self.members if m.alive() and m.mode() in ("leader", "standalone")),
                                       None), READY_TIMEOUT_S, "a ZooKeeper leader")

    def stop(self) -> None:
        for member in self.members:
            member.stop()
