"""Kill a process and everything it started, for the tests that claim to kill "the driver".

A process group is not enough: PySpark's worker daemon calls ``os.setpgid(0, 0)`` (pyspark/daemon.py),
so a ``killpg`` of the driver's group leaves the daemon and its forked workers (the sink's writers,
the commit runner) running, and they can still finish a commit the test believes was cut short.
Here the tree is found by parent PID in ``/proc``, frozen with SIGSTOP until no new child appears
(a stopped process cannot fork), then SIGKILLed. A process is named by its PID and start time, so a
reused PID is never taken for a survivor.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

Proc = tuple[int, int]  # (PID, start time in clock ticks since boot): one process, never a later one of that PID


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent PID, start time) of ``pid``, or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[19])


def process_tree(root: int) -> set[Proc]:
    """``root`` and its descendants alive now (one pass over ``/proc``)."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None and st[0] != "Z":
            children.setdefault(st[1], []).append(int(entry))
            started[int(entry)] = st[2]
    if root not in started:
        return set()
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add((pid, started[pid]))
        todo.extend(children.get(pid, ()))
    return tree


def _signal(procs: set[Proc], sig: signal.Signals) -> None:
    for pid, _ in procs:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_tree(root: int) -> set[Proc]:
    """SIGKILL ``root`` and every descendant; returns the processes signalled. Everything is stopped
    first, until a scan finds no process it had not stopped yet, so nothing forks away in between."""
    stopped: set[Proc] = set()
    while new := process_tree(root) - stopped:
        _signal(new, signal.SIGSTOP)
        stopped |= new
        time.sleep(0.01)  # a stop is delivered asynchronously: a fork may still complete meanwhile
    _signal(stopped, signal.SIGKILL)
    return stopped


def survivors(procs: set[Proc], timeout: float = 10.0) -> set[Proc]:
    """The processes of ``procs`` still running (zombies count as dead) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = {(pid, start) for pid, start in procs if (st := _stat(pid)) is not None and st[0] != "Z"
                 and st[2] == start}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)
