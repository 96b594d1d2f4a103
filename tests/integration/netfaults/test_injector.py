"""The fault injector itself (``tests/faults.py``) on real namespaces: a partition stalls an open TCP connection
and the same connection carries on after the heal; a one-way partition drops one direction only; loss drops
about the share asked; latency adds about the delay asked to a measured round trip; ``heal()`` leaves
nothing behind. Hosts ``a`` and ``b`` run ``echo.py``; the test process is the root namespace (``GATEWAY``).
"""

from __future__ import annotations

import queue
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fault_schedule import Schedule, Step
from faults import GATEWAY, TABLE, Faults, why_no_faults

from .echo import READY

ECHO = Path(__file__).with_name("echo.py")
NETFAULTS = Path(__file__).resolve().parents[3] / "scripts" / "netfaults.py"
PORT = 7000
STALL_S = 1.5  # how long a cut connection must stay silent
RESUME_TIMEOUT_S = 15.0  # TCP's retransmission backoff after a short cut: a few seconds at most
DATAGRAMS = 1000
LOSS_PERCENT = 30
LATENCY_MS = 100
PINGS = 30


def line_within(proc: subprocess.Popen, timeout: float) -> str | None:
    """The next line ``proc`` prints, or None when it prints none within ``timeout`` (a thread per process
    reads its stdout into a queue)."""
    lines = _lines.get(proc.pid)
    if lines is None:
        lines = _lines[proc.pid] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(raw.decode().rstrip("\n")) for raw in proc.stdout],
                         daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return None


_lines: dict[int, queue.Queue] = {}


@pytest.fixture
def hosts(network):
    if reason := why_no_faults():
        pytest.skip(reason)
    net = network(["a", "b"])
    server = net.popen("b", [sys.executable, str(ECHO), "serve", str(PORT)], stdout=subprocess.PIPE)
    assert line_within(server, 10) == READY
    faults = Faults.on(net)
    yield net, faults, server
    faults.heal()


def echo_client(net, server_address: str) -> subprocess.Popen:
    """``echo.py through`` on host ``a``: one TCP connection to ``b``'s echo server."""
    client = net.popen("a", [sys.executable, str(ECHO), "through", f"{server_address}:{PORT}"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert line_within(client, 10) == READY
    return client


def say(client: subprocess.Popen, line: str) -> None:
    client.stdin.write(f"{line}\n".encode())
    client.stdin.flush()


def test_a_partition_stalls_an_open_connection_and_the_same_connection_resumes_after_the_heal(hosts):
    net, faults, _ = hosts
    client = echo_client(net, net.hosts["b"].address)
    say(client, "before")
    assert line_within(client, 5) == "before"
    faults.partition(["a"], ["b"])
    say(client, "during")
    assert line_within(client, STALL_S) is None, "a line crossed the partition"
    faults.heal()
    assert line_within(client, RESUME_TIMEOUT_S) == "during"  # the one connection: echo.py never reconnects
    assert client.poll() is None

    # the root namespace as a side: the test's own connection to b
    with socket.create_connection((net.hosts["b"].address, PORT), timeout=5) as conn:
        conn.sendall(b"x")
        assert conn.recv(1) == b"x"
        faults.partition([GATEWAY], ["b"])
        conn.settimeout(STALL_S)
        conn.sendall(b"y")
        with pytest.raises(TimeoutError):
            conn.recv(1)
        faults.heal()
        conn.settimeout(RESUME_TIMEOUT_S)
        assert conn.recv(1) == b"y"


def datagrams(address: str, count: int, prefix: str, wait_s: float = 1.0) -> int:
    """Send ``count`` UDP datagrams to ``address``'s echo server; how many answers came back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        answers = 0
        for i in range(count):
            s.sendto(f"{prefix}{i}".encode(), (address, PORT))
            time.sleep(0.0005)
            answers += _drain(s)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            select.select([s], [], [], 0.05)
            answers += _drain(s)
        return answers


def _drain(s: socket.socket) -> int:
    n = 0
    while True:
        try:
            s.recv(65536)
            n += 1
        except BlockingIOError:
            return n


def arrived(server: subprocess.Popen, prefix: str, wait_s: float = 0.5) -> int:
    """How many datagrams with ``prefix`` the echo server printed (it prints each it receives)."""
    n = 0
    while (line := line_within(server, wait_s)) is not None:
        n += line.startswith(prefix)
    return n


def test_one_way_drops_only_one_direction(hosts):
    net, faults, server = hosts
    b = net.hosts["b"].address
    faults.one_way([GATEWAY], ["b"])
    assert datagrams(b, 5, "to-b-") == 0
    assert arrived(server, "to-b-") == 0
    faults.heal()
    faults.one_way(["b"], [GATEWAY])
    assert datagrams(b, 5, "from-b-") == 0  # b got them (below) but its answers are dropped
    assert arrived(server, "from-b-") == 5
    faults.heal()
    assert datagrams(b, 5, "healed-") == 5


def test_loss_drops_about_the_share_asked(hosts):
    net, faults, server = hosts
    faults.loss(["b"], LOSS_PERCENT)
    answers = datagrams(net.hosts["b"].address, DATAGRAMS, "lossy-")
    got = arrived(server, "lossy-")
    kept = 1 - LOSS_PERCENT / 100
    assert abs(got / DATAGRAMS - kept) < 0.06, f"{got} of {DATAGRAMS} reached b: {LOSS_PERCENT}% loss asked"
    # an answer is a second packet through b's link: both must survive
    assert abs(answers / DATAGRAMS - kept * kept) < 0.06, f"{answers} of {DATAGRAMS} answered"


def round_trips_ms(address: str, count: int = PINGS) -> list[float]:
    """Round trips of one byte through the echo server at ``address`` over one TCP connection."""
    with socket.create_connection((address, PORT), timeout=10) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(count):
            start = time.monotonic()
            conn.sendall(b"p")
            assert conn.recv(1) == b"p"
            times.append((time.monotonic() - start) * 1000)
        return times


def test_latency_adds_about_the_delay_asked_and_heal_removes_it(hosts):
    net, faults, _ = hosts
    b = net.hosts["b"].address
    before = statistics.median(round_trips_ms(b))
    faults.latency(["b"], LATENCY_MS)
    during = round_trips_ms(b)
    added = statistics.median(during) - before
    print(f"round trip {before:.2f} ms; with +{LATENCY_MS} ms on b: median {statistics.median(during):.1f}, "
          f"min {min(during):.1f}, max {max(during):.1f} ms")
    assert LATENCY_MS * 0.95 <= added <= LATENCY_MS * 1.2, f"added {added:.1f} ms for {LATENCY_MS} asked"
    faults.heal()
    after = statistics.median(round_trips_ms(b))
    assert after < before + LATENCY_MS / 10, f"{after:.1f} ms after the heal, {before:.1f} before"


def test_heal_leaves_nothing_behind(hosts):
    net, faults, _ = hosts
    b = net.hosts["b"].address
    faults.partition(["a"], ["b"])
    faults.one_way(["b"], [GATEWAY])
    faults.loss(["a", "b"], 50)
    faults.latency(["a", "b"], 50)
    assert faults.describe()
    faults.heal()
    assert faults.describe() == []
    for role in ("a", "b"):
        tables = net.run(role, ["nft", "list", "tables"], timeout=10, capture_output=True, text=True).stdout
        assert TABLE not in tables
        queued = net.run(role, ["iptables", "-t", "mangle", "-S", "POSTROUTING"], timeout=10, capture_output=True,
                         text=True).stdout
        assert "NFQUEUE" not in queued
    assert datagrams(b, 200, "after-") == 200
    assert max(round_trips_ms(b, 10)) < LATENCY_MS / 2
    client = echo_client(net, b)
    say(client, "a-to-b")
    assert line_within(client, 5) == "a-to-b"


def test_a_schedule_applies_each_step_and_heals_between(hosts):
    _, faults, _ = hosts
    seen: list[tuple[Step, list[str]]] = []
    schedule = Schedule(3, ["a|b", "gateway>b", "latency:a", "loss:b"], {"a": ["a"], "b": ["b"], "gateway": [GATEWAY]},
                        hold_s=(0.1, 0.2), gap_s=(0.1, 0.2))
    schedule.run(faults, on_step=lambda step: seen.append((step, faults.describe())))
    assert [s for s, _ in seen] == schedule.steps
    for step, in_force in seen:
        assert bool(in_force) == (step.action != "heal"), f"{step}: {in_force}"
    assert faults.describe() == []


def test_the_operators_script_holds_a_partition_heals_it_and_clears_what_a_killed_run_left(hosts):
    net, _, _ = hosts
    b = net.hosts["b"]
    groups = ["--group", f"clients={net.gateway}", "--group", f"b={b.netns}"]
    helped = subprocess.run([sys.executable, str(NETFAULTS), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "hold" in helped.stdout and "schedule" in helped.stdout
    wrong = subprocess.run([sys.executable, str(NETFAULTS), "--group", "b=nosuchns", "hold", "b|b"],
                           capture_output=True, text=True, timeout=30)
    assert wrong.returncode != 0 and "no network namespace 'nosuchns'" in wrong.stderr

    held = subprocess.Popen([sys.executable, str(NETFAULTS), *groups, "hold", "clients|b", "--for", "30"],
                            stdout=subprocess.PIPE)
    assert line_within(held, 30) == "in force:"
    assert datagrams(b.address, 5, "held-") == 0
    held.terminate()  # as an operator's Ctrl-C or kill: it heals on its way out
    assert held.wait(30) == 0
    assert datagrams(b.address, 5, "let-go-") == 5

    killed = subprocess.Popen([sys.executable, str(NETFAULTS), *groups, "hold", "clients|b", "latency:b"],
                              stdout=subprocess.PIPE)
    assert line_within(killed, 30) == "in force:"
    killed.kill()  # no heal: the table, the NFQUEUE rule and the delayer stay
    killed.wait(30)
    assert datagrams(b.address, 5, "left-") == 0
    cleared = subprocess.run([sys.executable, str(NETFAULTS), "heal", b.netns], capture_output=True, text=True,
                             timeout=30)
    assert cleared.returncode == 0 and "nft table" in cleared.stdout and "netdelay" in cleared.stdout, cleared.stdout
    assert datagrams(b.address, 5, "cleared-") == 5
    assert max(round_trips_ms(b.address, 10)) < LATENCY_MS / 2


def test_heal_between_lifts_one_cut_and_leaves_the_others(hosts):
    net, faults, _ = hosts
    b = net.hosts["b"].address
    client = echo_client(net, b)
    faults.partition(["a"], ["b"])
    faults.partition([GATEWAY], ["b"])
    faults.heal_between(["b"], ["a"])  # either order of the sides
    say(client, "a-to-b")
    assert line_within(client, RESUME_TIMEOUT_S) == "a-to-b"
    assert datagrams(b, 5, "still-cut-") == 0
    assert sorted(faults.describe()) == sorted([f"{GATEWAY} -x-> b", f"b -x-> {GATEWAY}"])
