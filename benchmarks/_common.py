"""Helpers shared by the benchmark scripts: timing, repetition, machine description, store
set-up, message pools, NameServer + broker processes and a rich results table.

Scripts are run directly (``python benchmarks/store_append.py``), so this module is imported
as ``_common`` from the script's own directory.

Units: MB is 10**6 bytes, MiB is 2**20 bytes; every rate is per wall-clock second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from rich.console import Console
from rich.table import Table

MB = 1_000_000
MiB = 1 << 20
GiB = 1 << 30

T = TypeVar("T")
console = Console(width=None if sys.stdout.isatty() else 150)


# -- timing -------------------------------------------------------------------------------
class Timer:
    """``with Timer() as t: ...`` then ``t.seconds`` (perf_counter wall time) and
    ``t.cpu_share``: this process's CPU time (all threads, user + system) over the wall time.
    Well below 1.0 for a single-threaded loop means something else had the cores."""

    def __enter__(self) -> Timer:
        self.seconds = 0.0
        self.cpu_share = 0.0
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.cpu_share = (time.process_time() - self._c0) / self.seconds if self.seconds > 0 else 0.0


def median_of(reps: int, run: Callable[[int], T], key: Callable[[T], float]) -> tuple[T, list[T]]:
    """Call ``run(i)`` for i in range(reps); return the result whose ``key`` is the median
    (the lower middle one for an even count) and all results in run order."""
    results = [run(i) for i in range(reps)]
    ranked = sorted(results, key=key)
    return ranked[(len(ranked) - 1) // 2], results


def spread(values: Sequence[float]) -> str:
    """``min..max`` of the repetitions, for the table's detail column."""
    if len(values) < 2:
        return ""
    return f"{min(values):,.0f}..{max(values):,.0f}"


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# -- machine ------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent PID, own CPU, reaped CPU) of ``pid`` as process_tree_cpu counts them; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / tick  # utime stime
    reaped = (int(fields[13]) + int(fields[14])) / tick  # cutime cstime
    return int(fields[1]), own, reaped


def _cmdline(pid: int) -> str | None:
    """The command line of ``pid``, arguments joined by spaces; None once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def process_tree_cpu(root: int | None = None) -> dict[int, tuple[str, float, float]]:
    """CPU seconds of ``root`` (default: this process) and every live descendant, by PID, with the
    command line: (cmd, own user + system, user + system of its children that exited and were
    reaped). On a shared machine, CPU seconds per row are a steadier measure than wall time. Linux
    only (``/proc``)."""
    root = os.getpid() if root is None else root
    procs: dict[int, tuple[int, str, float, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        cmd = _cmdline(pid)
        if stat is None or cmd is None:  # exited meanwhile
            continue
        procs[pid] = (stat[0], cmd, stat[1], stat[2])
    out = {}
    for pid, (_ppid, cmd, own, reaped) in procs.items():
        at = pid
        while at in procs and at != root:
            at = procs[at][0]
        if at == root:
            out[pid] = (cmd, own, reaped)
    return out


# how often a watch looks for new processes and reads the CPU of those the kernel will reap unseen: at most
# this much of one's CPU is lost when it exits, and one that lives shorter is missed
TREE_SAMPLE_S = 0.1
_SIGCHLD_BIT = 1 << (signal.SIGCHLD - 1)


def _ignores_sigchld(pid: int) -> bool:
    """Whether ``pid`` ignores SIGCHLD: the kernel reaps its children at exit, and their CPU is added to no
    parent's reaped figure (PySpark's worker daemons do so for the workers they fork)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    ignored = next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "0")
    return bool(int(ignored, 16) & _SIGCHLD_BIT)


class TreeCpuWatch:
    """:func:`process_tree_cpu` at the start and at the end of a stretch, plus the processes that exited
    meanwhile unseen: a process whose parent ignores SIGCHLD is reaped by the kernel, and its CPU leaves the
    tree with it (two snapshots miss it, and count a negative delta for one that ran before the start). A
    thread looks for new processes of the tree every ``TREE_SAMPLE_S`` (reading only PIDs it has not seen)
    and reads such processes' CPU; ``watch_cpu_s`` is that thread's own CPU, to take out of the watching
    process's; ``started``: the PIDs it found (a process that lives shorter than a look is missed).
    ``with TreeCpuWatch() as w: ...`` then ``w.before``, ``w.after``."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.before: dict[int, tuple[str, float, float]] = {}
        self.after: dict[int, tuple[str, float, float]] = {}
        self.lost: dict[int, tuple[str, float, float]] = {}  # the unseen-reaped processes, as last seen
        self.started: set[int] = set()  # processes of the tree first seen after the start
        self.watch_cpu_s = 0.0
        self._tree: set[int] = set()
        self._others: set[int] = set()  # PIDs seen outside the tree
        self._watched: dict[int, tuple[str, float, float]] = {}  # live processes reaped unseen at exit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-cpu-watch", daemon=True)

    def __enter__(self) -> TreeCpuWatch:
        self.before = process_tree_cpu(self.root)
        self._tree = set(self.before)
        self._others = {int(p) for p in os.listdir("/proc") if p.isdigit()} - self._tree
        for pid, seen in self.before.items():
            stat = _stat(pid)
            if stat is not None and _ignores_sigchld(stat[0]):
                self._watched[pid] = seen
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = process_tree_cpu(self.root)
        self._sample()
        self.after.update({pid: seen for pid, seen in self.lost.items() if pid not in self.after})

    def _sample(self) -> None:
        for pid in sorted({int(p) for p in os.listdir("/proc") if p.isdigit()} - self._tree - self._others):
            stat = _stat(pid)  # parents before their children: PIDs grow
            if stat is None or stat[0] not in self._tree:
                self._others.add(pid)
                continue
            self._tree.add(pid)
            self.started.add(pid)
            if _ignores_sigchld(stat[0]):
                self._watched[pid] = (_cmdline(pid) or "", *stat[1:])
        for pid, (cmd, _own, _reaped) in list(self._watched.items()):
            stat = _stat(pid)
            if stat is None:
                self.lost[pid] = self._watched.pop(pid)
            else:
                self._watched[pid] = (cmd, *stat[1:])

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(TREE_SAMPLE_S):
            self._sample()
        self.watch_cpu_s = time.thread_time() - started


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _filesystem(path: Path) -> str:
    """Device and type of the filesystem holding ``path`` (longest mount-point match)."""
    try:
        best = ("", "?", "?")
        real = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype, *_ = line.split()
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[0]):
                best = (mnt, dev, fstype)
        return f"{best[1]} ({best[2]})"
    except OSError:
        return "?"


def machine_info(path: Path) -> dict[str, Any]:
    du = shutil.disk_usage(path)
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_mem_total_bytes() / GiB, 1),
        "disk": _filesystem(path),
        "disk_free_gib": round(du.free / GiB, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


_CODE_VERSION: str | None = None


def code_version() -> str:
    """HEAD commit, the files under spark_mq/ that differ from it, and a hash of every
    spark_mq/*.py as it is now: other work may be in flight while benchmarks run, so every
    result says which code it measured. Taken once, when the store is first imported."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        _CODE_VERSION = _describe_code()
    return _CODE_VERSION


def _describe_code() -> str:
    import hashlib
    import subprocess

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha1()
    for f in sorted((root / "spark_mq").rglob("*.py")):
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    tree = f"spark_mq sha1 {digest.hexdigest()[:10]}"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "spark_mq"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return f"git unknown, {tree}"
    changed = sorted(line[3:] for line in dirty if line.strip())
    return f"{head}{' + uncommitted changes in ' + ', '.join(changed) if changed else ''} ({tree})"


def machine_line(path: Path) -> str:
    m = machine_info(path)
    return (
        f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB RAM, disk {m['disk']} with "
        f"{m['disk_free_gib']} GiB free, {m['os']}, Python {m['python']}, numpy {m['numpy']}; "
        f"load average now {os.getloadavg()[0]:.2f}"
    )


# -- command line -------------------------------------------------------------------------
def parser(description: str) -> argparse.ArgumentParser:
    """An argparse parser with the flags every benchmark shares."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run that takes a few seconds")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                   help="parent directory for the temporary files (use the disk you want to measure)")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this file")
    return p


def dump_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")


def _json_default(o: object) -> object:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextlib.contextmanager
def scratch_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh directory under ``parent``, removed afterwards (even on error)."""
    parent.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- results table ------------------------------------------------------------------------
def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> None:
    table = Table(title=title, caption=caption or None, title_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*(_fmt(v) for v in r))
    console.print(table)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


# -- store and messages -------------------------------------------------------------------
TOPIC = "BenchTopic"
TAGS_POOL = ("TagA", "TagB", "TagC", "TagD")


def store_config(root: Path, **overrides: Any):
    """Default broker config (ASYNC_FLUSH, 1 GiB commitlog files) rooted at ``root``."""
    from spark_mq.common.config import BrokerConfig

    return BrokerConfig(store_path_root_dir=str(root), **overrides)


def message_properties(i: int) -> bytes:
    """What a RocketMQ producer sends: TAGS, KEYS (a business key) and UNIQ_KEY (the client
    message id, 32 hex digits), encoded with the store's own encoder."""
    from spark_mq.common.properties import KEYS, TAGS, UNIQ_KEY, encode_properties

    return encode_properties(
        {TAGS: TAGS_POOL[i % len(TAGS_POOL)], KEYS: order_key(i), UNIQ_KEY: f"7F0000010001{i:020X}"}
    )


def order_key(i: int) -> str:
    """The business key of message ``i``."""
    return f"order-{i:010d}"


def message(i: int, body_size: int, topic: str = TOPIC):
    """Message ``i`` as an application hands it to the producer (which adds UNIQ_KEY): the body,
    tag and key of :func:`message_properties`."""
    from spark_mq.common.message import Message

    return Message(topic, body(i, body_size), tags=TAGS_POOL[i % len(TAGS_POOL)], keys=order_key(i))


def body(i: int, size: int) -> bytes:
    """``size`` bytes, different per message (so body CRCs differ)."""
    head = f"msg-{i:012d}-".encode()
    return (head + b"x" * size)[:size]


@dataclass(frozen=True)
class BatchPool:
    """Prepared batches: batch ``j`` goes to queue ``j % queues``; reused round-robin."""

    batches: list  # list[MessageBatch]
    batch_size: int

    def __len__(self) -> int:
        return len(self.batches)


def message_batch(j: int, batch_size: int, queues: int, body_size: int, with_properties: bool, topic: str = TOPIC):
    """Batch ``j``: messages ``j * batch_size`` on (distinct bodies, keys and UNIQ_KEYs), for queue
    ``j % queues``."""
    from spark_mq.common.message import MessageBatch

    ids = range(j * batch_size, (j + 1) * batch_size)
    bodies = [body(i, body_size) for i in ids]
    props = [message_properties(i) for i in ids] if with_properties else None
    return MessageBatch.of(topic, j % queues, bodies, props)


def batch_pool(
    pool_batches: int, batch_size: int, queues: int, body_size: int, with_properties: bool, topic: str = TOPIC
) -> BatchPool:
    """Build ``pool_batches`` MessageBatch objects (rounded up to a multiple of ``queues``)."""
    pool_batches = -(-pool_batches // queues) * queues
    return BatchPool([message_batch(j, batch_size, queues, body_size, with_properties, topic)
                      for j in range(pool_batches)], batch_size)


def fill(store, pool: BatchPool, messages: int) -> int:
    """Append ``messages`` messages (whole batches, cycling through the pool); returns the
    number appended (``messages`` rounded up to a whole batch)."""
    put = store.put_messages
    batches = pool.batches
    k = len(batches)
    n_batches = -(-messages // pool.batch_size)
    for j in range(n_batches):
        put(batches[j % k])
    return n_batches * pool.batch_size


def import_store():
    """Import MessageStore late, so ``--help`` works even if the package is mid-edit."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    code_version()  # record the code as imported
    from spark_mq.store.message_store import MessageStore

    return MessageStore


# -- servers ------------------------------------------------------------------------------
NAMESRV_READY = "spark-mq namesrv listening on "
BROKER_READY = "spark-mq broker serving at "
SERVER_READY_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 30.0


class Server:
    """One ``python -m spark_mq.cli <args>`` server process logging to ``log``: ready once it prints
    its ready line (whose last word is its address); stopped by PID with SIGTERM."""

    def __init__(self, args: Sequence[str], log: Path, ready: str) -> None:
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "spark_mq.cli", *args], stdout=subprocess.PIPE,
                                         stderr=err)
        readable, _, _ = select.select([self.proc.stdout], [], [], SERVER_READY_TIMEOUT_S)
        line = self.proc.stdout.readline().decode() if readable else ""
        if not line.startswith(ready):
            self.stop()
            raise RuntimeError(f"spark-mq {args[0]} did not start (printed {line!r}); see {log}")
        self.addr = line.split()[-1]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after SERVER_STOP_TIMEOUT_S."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc.stdout.close()


@dataclass(frozen=True)
class Cluster:
    namesrv: str
    broker: str
    broker_pid: int = 0


@contextlib.contextmanager
def local_cluster(root: Path, broker_conf: str = "") -> Iterator[Cluster]:
    """A NameServer and a broker (default config plus the properties ``broker_conf``, store in ``root/store``, logs
    in ``root``) as two processes on free loopback ports, as in production; stopped when the block exits."""
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "broker.conf"
    conf.write_text(broker_conf)
    namesrv = Server(["namesrv", "--port", "0"], root / "namesrv.log", NAMESRV_READY)
    try:
        broker = Server(["broker", "-c", str(conf), "--namesrv", namesrv.addr, "--port", "0", "--store",
                         str(root / "store"), "--metrics-port", "0"], root / "broker.log", BROKER_READY)
        try:
            yield Cluster(namesrv.addr, broker.addr, broker.proc.pid)
        finally:
            broker.stop()
    finally:
        namesrv.stop()


def create_topic(cluster: Cluster, topic: str, queues: int) -> None:
    """Create ``topic`` with ``queues`` queues on the broker; return once the NameServer routes it."""
    from spark_mq.client.sync_api import SyncMQClientAPI

    with SyncMQClientAPI() as api:
        api.create_topic(cluster.broker, topic, queues, queues)
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while api.get_route_info(cluster.namesrv, topic) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the NameServer at {cluster.namesrv} did not route {topic}")
            time.sleep(0.1)
