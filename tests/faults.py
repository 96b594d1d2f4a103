"""Network faults between the machines of ``tests/netns.py``: partitions, one-way partitions, packet loss and
added latency, and heals, each made and removed by the test.

Every rule lives on a host's own link, in its own namespace: one nftables table ``netdev smq_faults`` per
host, hooked on the ingress and egress of the host's device (``eth0`` in ``netns.Network``). A packet from
``a`` to ``b`` is cut at ``b``'s ingress, or at ``a``'s egress when ``b`` is the root namespace (the test
process and its clients, role ``GATEWAY``), which never gets a rule (so two root-namespace hosts cannot be
cut from each other). Dropping on the link, below IP, drops
every packet, established connections' too: an open TCP connection stalls and retransmits, as across a
real partition, and carries on after the heal (nothing is reset, no sender is told). Loss is nftables'
``numgen random``; latency is ``tc netem`` on the host's egress where the kernel has it, else ``netdelay.py``
(a process in the host's namespace holding each incoming packet's NFQUEUE verdict for the delay: on the
ingress, because a packet held on its sender's egress still counts against the sending socket's TCP Small
Queues budget, which throttled a bulk flow to 1 MB/s under +10 ms; held on arrival it made 119 MB/s).

Each change re-renders the host's whole table in one ``nft -f`` transaction, from what ``Faults`` holds;
``heal()`` deletes them all. ``Network.close()`` deletes the namespaces, with the tables and the delayers in
them, also after a failed test. Needs ``nft`` (and ``iptables`` for the latency fallback):
``scripts/install_netfaults.sh`` installs them, ``why_no_faults()`` says why a test must skip.

Importable as ``faults`` from any test (``tests/conftest.py`` puts ``tests/`` on ``sys.path``);
``scripts/netfaults.py`` is the operator's entry to the same code.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import netdelay

if TYPE_CHECKING:
    from netns import Network

GATEWAY = "gateway"  # the root namespace's role: the test process and its clients
TABLE = "smq_faults"
DEVICE = "eth0"  # every host's link in netns.Network
NFT_TIMEOUT_S = 10.0
INSTALL_HINT = "run scripts/install_netfaults.sh (as root) to install nftables and iptables"


@dataclass(frozen=True)
class Machine:
    """One host the faults act on: its namespace ('' for the root one), its address, its link's device."""

    netns: str
    address: str
    device: str = DEVICE


def _run(netns: str, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """``args`` in namespace ``netns``; a failure raises naming the command and what it said."""
    done = subprocess.run(["ip", "netns", "exec", netns, *args], input=stdin, capture_output=True, text=True,
                          timeout=NFT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} in {netns}: {(done.stderr or done.stdout).strip()}")
    return done


def _queue_rule(m: Machine) -> list[str]:
    """The iptables rule (after -A/-D) handing the packets arriving on ``m``'s link to its delayer."""
    return ["PREROUTING", "-i", m.device, "-j", "NFQUEUE", "--queue-num", str(netdelay.QUEUE), "--queue-bypass"]


def clear(m: Machine) -> list[str]:
    """Remove from ``m``'s namespace whatever a ``Faults`` killed before its heal left there (its table, its
    delayer's rule and process, a netem qdisc); what was removed."""
    removed = []
    if subprocess.run(["ip", "netns", "exec", m.netns, "nft", "delete", "table", "netdev", TABLE],
                      capture_output=True, check=False).returncode == 0:
        removed.append(f"nft table netdev {TABLE}")
    while subprocess.run(["ip", "netns", "exec", m.netns, "iptables", "-t", "mangle", "-D", *_queue_rule(m)],
                         capture_output=True, check=False).returncode == 0:
        removed.append("the NFQUEUE rule")
    for pid in subprocess.run(["ip", "netns", "pids", m.netns], capture_output=True, text=True,
                              check=False).stdout.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"netdelay.py") for arg in cmdline):
            os.kill(int(pid), signal.SIGTERM)
            removed.append(f"netdelay (pid {pid})")
    qdisc = subprocess.run(["ip", "netns", "exec", m.netns, "tc", "qdisc", "show", "dev", m.device],
                           capture_output=True, text=True, check=False).stdout
    if "netem" in qdisc:
        _run(m.netns, ["tc", "qdisc", "del", "dev", m.device, "root"])
        removed.append("the netem qdisc")
    return removed


def why_no_faults() -> str | None:
    """Why faults cannot be injected here (no nft or iptables), or None when they can."""
    missing = [tool for tool in ("nft", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"no {' or '.join(missing)} to inject network faults with: {INSTALL_HINT}"
    return None


def _has_netem(machine: Machine) -> bool:
    """Whether this kernel has sch_netem (probed once per Faults, on a host's link)."""
    add = subprocess.run(["ip", "netns", "exec", machine.netns, "tc", "qdisc", "add", "dev", machine.device, "root",
                          "netem", "delay", "1ms"], capture_output=True, text=True, check=False)
    if add.returncode == 0:
        subprocess.run(["ip", "netns", "exec", machine.netns, "tc", "qdisc", "del", "dev", machine.device, "root"],
                       capture_output=True, check=False)
    return add.returncode == 0


class Faults:
    """The faults on the hosts of ``machines`` (by role); a machine with no namespace (the root namespace,
    ``GATEWAY`` in a ``netns.Network``) gets no rules: its packets are cut on the other side's link.

    ``Faults.on(network)`` for a ``netns.Network``. Not thread-safe: use it from one thread.
    """

    def __init__(self, machines: dict[str, Machine], spawn: Callable[..., subprocess.Popen] | None = None) -> None:
        """``spawn(role, args, **popen_kwargs)`` starts a process on a host (default: ``ip netns exec``)."""
        self.machines = machines
        self._cuts: set[tuple[str, str]] = set()  # (from, to): packets from `from` to `to` are dropped
        self._loss: dict[str, int] = {}
        self._latency: dict[str, int] = {}
        self._delayers: dict[str, subprocess.Popen] = {}
        self._spawn = spawn or (lambda role, args, **kw: subprocess.Popen(
            ["ip", "netns", "exec", machines[role].netns, *args], **kw))
        self._netem: bool | None = None

    @classmethod
    def on(cls, net: Network) -> Faults:
        """The faults of a ``netns.Network``: its hosts, and its root namespace as ``GATEWAY``; the latency
        delayers are started with ``net.popen``, so ``net.close()`` stops them."""
        machines = {role: Machine(h.netns, h.address) for role, h in net.hosts.items()}
        machines[GATEWAY] = Machine("", net.gateway)
        return cls(machines, spawn=net.popen)

    # --- the faults ------------------------------------------------------------------------------------

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        """Nothing passes between a host of ``side_a`` and one of ``side_b``, either way, until healed."""
        self._check_sides(side_a, side_b)
        self._cut({(a, b) for a in side_a for b in side_b} | {(b, a) for a in side_a for b in side_b})

    def one_way(self, src: list[str], dst: list[str]) -> None:
        """Packets from ``src`` to ``dst`` are dropped; the other way passes (a TCP handshake from either
        side then fails, an open connection stalls one way)."""
        self._check_sides(src, dst)
        self._cut({(s, d) for s in src for d in dst})

    def loss(self, hosts: list[str], percent: int) -> None:
        """Each packet ``hosts`` send or receive is dropped with probability ``percent``/100."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss percent must be 0..100, not {percent}")
        self._namespaced(hosts, "loss")
        self._loss.update(dict.fromkeys(hosts, percent))
        self._apply(set(hosts))

    def latency(self, hosts: list[str], ms: int) -> None:
        """A round trip between one of ``hosts`` and anything else takes ``ms`` longer (between two of them,
        2 x ``ms``): netem holds the packets they send, the delayer those they receive."""
        if ms <= 0:
            raise ValueError(f"latency must be a positive number of ms, not {ms}")
        self._namespaced(hosts, "latency")
        for host in hosts:
            self._clear_latency(host)
            if self._netem is None:
                self._netem = _has_netem(self.machines[host])
            m = self.machines[host]
            if self._netem:
                _run(m.netns, ["tc", "qdisc", "add", "dev", m.device, "root", "netem", "delay", f"{ms}ms"])
            else:
                self._start_delayer(host, ms)
            self._latency[host] = ms

    def heal_between(self, side_a: list[str], side_b: list[str]) -> None:
        """Packets pass again between ``side_a`` and ``side_b``, both ways (other faults stay)."""
        pairs = {(a, b) for a in side_a for b in side_b}
        gone = {c for c in self._cuts if c in pairs or c[::-1] in pairs}
        self._cuts -= gone
        self._apply({h for c in gone for h in c})

    def heal(self) -> None:
        """Every fault removed: no cut, loss or latency left on any host."""
        touched = {h for c in self._cuts for h in c} | set(self._loss)
        self._cuts.clear()
        self._loss.clear()
        for host in list(self._latency):
            self._clear_latency(host)
        self._apply(touched)

    def describe(self) -> list[str]:
        """The faults in force, one line each (for a failing test's message)."""
        lines = [f"{a} -x-> {b}" for a, b in sorted(self._cuts)]
        lines += [f"{h}: {p}% loss" for h, p in sorted(self._loss.items())]
        lines += [f"{h}: +{ms} ms" for h, ms in sorted(self._latency.items())]
        return lines

    # --- rules -----------------------------------------------------------------------------------------

    def _known(self, hosts: list[str]) -> None:
        unknown = [r for r in hosts if r not in self.machines]
        if unknown:
            raise ValueError(f"unknown hosts {unknown}: the hosts are {sorted(self.machines)}")

    def _check_sides(self, side_a: list[str], side_b: list[str]) -> None:
        self._known([*side_a, *side_b])
        if not side_a or not side_b or set(side_a) & set(side_b):
            raise ValueError(f"two non-empty sides with no host on both needed, not {side_a} | {side_b}")
        if any(not self.machines[h].netns for h in side_a) and any(not self.machines[h].netns for h in side_b):
            raise ValueError(f"{side_a} | {side_b}: hosts outside namespaces (the root one) get no rules, so two of "
                             "them cannot be cut from each other: put one side's processes on namespace hosts")

    def _namespaced(self, hosts: list[str], what: str) -> None:
        self._known(hosts)
        if not hosts or any(not self.machines[h].netns for h in hosts):
            raise ValueError(f"{what} acts on namespace hosts (not the root namespace, {GATEWAY!r}): {hosts}")

    def _cut(self, pairs: set[tuple[str, str]]) -> None:
        self._cuts |= pairs
        self._apply({h for c in pairs for h in c})

    def _apply(self, hosts: set[str]) -> None:
        """Re-render the table of each of ``hosts`` (the root namespace has none) in one transaction each."""
        for host in sorted(hosts):
            m = self.machines[host]
            if not m.netns:
                continue
            ingress = [f"ip saddr {self.machines[a].address} drop" for a, b in sorted(self._cuts) if b == host]
            egress = [f"ip daddr {self.machines[b].address} drop" for a, b in sorted(self._cuts)
                      if a == host and not self.machines[b].netns]
            if host in self._loss:
                drop = f"meta protocol ip numgen random mod 100 < {self._loss[host]} drop"
                ingress.append(drop)
                egress.append(drop)
            script = f"table netdev {TABLE}\ndelete table netdev {TABLE}\n"
            if ingress or egress:
                script += (f"table netdev {TABLE} {{\n"
                           f"  chain ingress {{ type filter hook ingress device \"{m.device}\" priority 0;\n"
                           + "".join(f"    {r}\n" for r in ingress) + "  }\n"
                           f"  chain egress {{ type filter hook egress device \"{m.device}\" priority 0;\n"
                           + "".join(f"    {r}\n" for r in egress) + "  }\n}\n")
            _run(m.netns, ["nft", "-f", "-"], stdin=script)

    # --- latency ---------------------------------------------------------------------------------------

    def _start_delayer(self, host: str, ms: int) -> None:
        """``netdelay.py`` on the host, then the rule that hands it every packet arriving on the host's link
        (``--queue-bypass``: should the delayer die, packets pass undelayed rather than stop)."""
        m = self.machines[host]
        proc = self._spawn(host, [sys.executable, str(Path(netdelay.__file__)), f"--queue={netdelay.QUEUE}",
                                  f"--ms={ms}"], stdout=subprocess.PIPE)
        self._delayers[host] = proc
        netdelay.wait_bound(proc)
        _run(m.netns, ["iptables", "-t", "mangle", "-A", *_queue_rule(m)])

    def _clear_latency(self, host: str) -> None:
        if self._latency.pop(host, None) is None:
            return
        m = self.machines[host]
        if self._netem:
            _run(m.netns, ["tc", "qdisc", "del", "dev", m.device, "root"])
            return
        _run(m.netns, ["iptables", "-t", "mangle", "-D", *_queue_rule(m)])
        proc = self._delayers.pop(host)
        proc.terminate()  # it lets the packets it still holds go, then exits
        proc.wait(NFT_TIMEOUT_S)
