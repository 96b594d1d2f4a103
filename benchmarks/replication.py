"""Replication (issue 14): produce throughput of a lone master, an ASYNC_MASTER + slave and a
SYNC_MASTER + slave, replication lag under that load, a slave's catch-up rate and SYNC_MASTER send
latency, against real ``spark-mq`` processes.

One NameServer for the whole run; every repetition of every set-up starts its brokers afresh
(``spark-mq broker -c conf/broker.conf`` as shipped plus the role's keys, stores in temp dirs
under ``--dir``, free loopback ports) and the set-ups take turns, the order rotating:

  lone   an ASYNC_MASTER with no slave (the baseline every ratio divides by)
  async  an ASYNC_MASTER and its slave (brokerRole=SLAVE, brokerId=1)
  sync   a SYNC_MASTER and its slave: a put is acknowledged once the slave has its bytes

* throughput: ``--producers`` producer processes (spawned: the client's Python cost must not
  be the limit) each send their share of ``--messages`` 100-byte messages (TAGS, KEYS, and the
  client's UNIQ_KEY) as ``Producer.send(list)`` batches of ``--batch`` with ``--window``
  batches in flight, round robin over the topic's ``--queues`` queues. msg/s = messages / (last
  acknowledgement - the common start). Every answer's status is counted; anything but SEND_OK
  fails the run.
* broker CPU: user + system seconds of the master and the slave processes (/proc) from the
  start until the slave has every byte the master wrote, per message: steadier than wall time
  on a shared machine.
* lag: this process asks the master for GET_BROKER_RUNTIME_INFO every ``--sample-ms`` during
  the load: ``slaveFallBehindMuch`` (bytes the slave has not acknowledged), the broker's own
  ``slaveFallBehindSeconds``, and a lag in time derived from the samples: how long before the
  sample the master's commitlog had reached the offset the slave has now (interpolated between
  samples). p99 over the samples.
* latency: after the load, one producer process sends ``--latency-sends`` single messages one
  at a time (``Producer.send(Message)``, each awaited), after ``LATENCY_WARMUP`` untimed ones.
* catch-up: a master's store is filled with ``--catchup-mb`` MiB of commitlog (the store
  appending directly, props traffic, not timed) and the master started on it; then a slave with
  an empty store, ``--reps`` times (a fresh store each). Seconds from its HA connection (as the
  master reports it) to the master reporting it 0 bytes behind; MB/s of commitlog copied, and as
  a fraction of the disk's sequential write rate measured by this script in the same directory
  (``disk_write.py``'s ``write``: the same size written in 4 MiB chunks, then fdatasync).

    .venv/bin/python benchmarks/replication.py [--messages 1000000] [--reps 3] [--catchup-mb 1024] \\
        [--producers 2] [--window 8] [--batch 64] [--cases throughput,catchup] [--json FILE] [--quick]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    BROKER_READY,
    MB,
    NAMESRV_READY,
    TOPIC,
    Cluster,
    MiB,
    Server,
    batch_pool,
    code_version,
    create_topic,
    dump_json,
    import_store,
    machine_line,
    message,
    parser,
    print_table,
    process_tree_cpu,
    rate,
    scratch_dir,
    store_config,
)
from disk_write import WAYS as DISK_WAYS
from peer_systems.base import batches, free_port, windowed

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.store.unit_checks import STARTUP_CHECK_DELAY_S

ROOT = Path(__file__).resolve().parent.parent
BROKER_CONF = ROOT / "conf" / "broker.conf"

SETUPS = ("lone", "async", "sync")
ROLE = {"lone": "ASYNC_MASTER", "async": "ASYNC_MASTER", "sync": "SYNC_MASTER"}
TARGET_RATIO = {"async": 0.8, "sync": 0.6}  # of the lone master's msg/s (issue 14)
CASES = ("throughput", "catchup")
QUICK = {"messages": 20_000, "reps": 1, "catchup_mb": 8, "latency_sends": 200}

POOL_MESSAGES = 1024  # distinct messages a producer cycles through (built before timing)
LATENCY_WARMUP = 50  # single sends before the timed ones
SEND_TIMEOUT_S = 60.0  # a loaded 2-core machine: a slow answer is a figure, not a failure
READY_TIMEOUT_S = 120.0  # a spawned producer importing the client; a slave connecting
CATCH_UP_TIMEOUT_S = 600.0  # a slave copying --catchup-mb at a few MB/s on a busy machine
DISK_CHUNK = 4 * MiB


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {text}", flush=True)


# -- brokers ------------------------------------------------------------------------------
def broker_conf(path: Path, name: str, role: str, broker_id: int, ha_port: int) -> Path:
    """conf/broker.conf as shipped, then this broker's name, role and HA port (later keys win)."""
    extra = f"brokerName={name}\nbrokerRole={role}\nbrokerId={broker_id}\n"
    if ha_port:
        extra += f"haListenPort={ha_port}\n"
    path.write_text(f"{BROKER_CONF.read_text()}\n# replication benchmark\n{extra}")
    return path


class BrokerSet:
    """A master of ``role`` and, with ``slave``, its slave: ``spark-mq broker`` processes stopped by
    PID (SIGTERM) by :meth:`stop`. ``info`` is GET_BROKER_RUNTIME_INFO of the master."""

    def __init__(self, namesrv: str, root: Path, role: str, api: SyncMQClientAPI) -> None:
        self.namesrv = namesrv
        self.root = root
        self.api = api
        self.name = f"bench-{os.getpid()}-{root.name}"
        self.ha_port = free_port()
        self.master = self._start("master", role, 0, self.ha_port)
        self.master_ready = time.monotonic()
        self.slave: Server | None = None

    def _start(self, what: str, role: str, broker_id: int, ha_port: int) -> Server:
        d = self.root / what
        d.mkdir(parents=True, exist_ok=True)
        conf = broker_conf(d / "broker.conf", self.name, role, broker_id, ha_port)
        return Server(["broker", "-c", str(conf), "--namesrv", self.namesrv, "--port", "0", "--store",
                       str(d / "store"), "--metrics-port", "0"], d / "broker.log", BROKER_READY)

    def start_slave(self, what: str = "slave") -> Server:
        self.slave = self._start(what, "SLAVE", 1, 0)
        return self.slave

    def stop_slave(self) -> None:
        if self.slave is not None:
            slave, self.slave = self.slave, None
            slave.stop()

    def stop(self) -> None:
        self.stop_slave()
        self.master.stop()

    def info(self) -> dict[str, str]:
        return self.api.get_broker_runtime_info(self.master.addr)

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system, every thread) of the master and the slave so far."""
        out = {"master": _cpu_seconds(self.master.proc.pid)}
        if self.slave is not None:
            out["slave"] = _cpu_seconds(self.slave.proc.pid)
        return out

    def wait_connected(self) -> float:
        """Until the master reports its slave connected; returns the monotonic time seen."""
        return self._wait(lambda i: int(i.get("haConnectedSlaves", "0")) >= 1, "the slave to connect")

    def wait_caught_up(self, timeout: float = CATCH_UP_TIMEOUT_S) -> float:
        """Until the master reports its slave 0 bytes behind (at once without a slave)."""
        if self.slave is None:
            return time.monotonic()
        return self._wait(lambda i: i.get("slaveFallBehindMuch") == "0", "the slave to catch up", timeout)

    def settle(self, topic: str, queues: int) -> dict[str, int]:
        """Once the load is over: every stored message in its consume queue on each broker (asking
        for the queues' max offsets makes a slave build its entries, and the master's dispatch is
        waited for), so that work is in the CPU figures. Returns each broker's message count."""
        counts = {"master": self._queued(self.master.addr, topic, queues)}
        if self.slave is not None:
            counts["slave"] = self._queued(self.slave.addr, topic, queues)
        self._wait(lambda i: i.get("dispatchBehindMessages") == "0", "the master's dispatch")
        return counts

    def _queued(self, addr: str, topic: str, queues: int) -> int:
        return sum(self.api.get_max_offset(addr, topic, q) or 0 for q in range(queues))

    def wait_master_idle(self, window_s: float = 0.5, busy_share: float = 0.1) -> None:
        """Until the master spent under ``busy_share`` of a core over ``window_s``, once its
        start-up check of a filled store's last files (which begins STARTUP_CHECK_DELAY_S after
        the start) could have begun: that work must not count as, or compete with, serving a slave."""
        time.sleep(max(0.0, self.master_ready + STARTUP_CHECK_DELAY_S - time.monotonic()))
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        before = _cpu_seconds(self.master.proc.pid)
        while True:
            time.sleep(window_s)
            now = _cpu_seconds(self.master.proc.pid)
            if now - before < busy_share * window_s:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the master at {self.master.addr} stayed busy for {CATCH_UP_TIMEOUT_S:g}s")
            before = now

    def _wait(self, done: Any, what: str, timeout: float = READY_TIMEOUT_S, interval: float = 0.02) -> float:
        deadline = time.monotonic() + timeout
        while True:
            if done(self.info()):
                return time.monotonic()
            for s in (self.master, self.slave):
                if s is not None and s.proc.poll() is not None:
                    raise RuntimeError(f"a broker exited while waiting for {what}; see its log under {self.root}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g}s waiting for {what} (master: {self.info()})")
            time.sleep(interval)


def _cpu_seconds(pid: int) -> float:
    return process_tree_cpu(pid)[pid][1]


@contextmanager
def namesrv_running(root: Path) -> Iterator[str]:
    server = Server(["namesrv", "--port", "0"], root / "namesrv.log", NAMESRV_READY)
    try:
        yield server.addr
    finally:
        server.stop()


# -- producer processes -------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """What one producer process does: ``count`` messages as batches of ``batch`` (``window`` in
    flight), or, with ``batch == 0``, ``count`` single sends one at a time (their latencies)."""

    namesrv: str
    topic: str
    count: int
    batch: int
    window: int
    body: int


def producer_process(job: Job, conn: Connection) -> None:
    """Child: connect, warm up (route, connection, one send), say "ready", wait for "go", run the
    job, send back the figures (or the error)."""
    try:
        conn.send(("done", asyncio.run(_produce(job, conn))))
    except BaseException as e:  # the parent reports it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


async def _produce(job: Job, conn: Connection) -> dict[str, Any]:
    config = ClientConfig(namesrv_addr=job.namesrv, instance_name=f"bench_{os.getpid()}")
    pool = [message(i, job.body, job.topic) for i in range(POOL_MESSAGES)]
    statuses: Counter[str] = Counter()
    async with Producer(f"bench_producer_{os.getpid()}", config, send_timeout_s=SEND_TIMEOUT_S,
                        retry_times=0) as producer:
        if job.batch:  # warm-up, not counted: the route, the connection, the first batch's code paths
            await producer.send(pool[: job.batch])
        for m in pool[:LATENCY_WARMUP] if job.batch == 0 else ():
            await producer.send(m)
        conn.send(("ready", None))
        conn.recv()  # go
        cpu0 = time.process_time()
        start = time.monotonic_ns()
        latencies = np.empty(job.count if job.batch == 0 else 0, dtype=np.int64)
        if job.batch == 0:
            for i in range(job.count):
                t0 = time.perf_counter_ns()
                r = await producer.send(pool[i % len(pool)])
                latencies[i] = time.perf_counter_ns() - t0
                statuses[r.status.value] += 1
        else:
            async def send(b: list) -> None:
                statuses[(await producer.send(b)).status.value] += len(b)

            await windowed(send, batches(pool, job.count, job.batch), job.window)
        end = time.monotonic_ns()
        cpu = time.process_time() - cpu0
    return {"start_ns": start, "end_ns": end, "messages": job.count, "statuses": dict(statuses),
            "cpu_seconds": cpu, "latencies_ns": latencies.tobytes()}


class Producers:
    """``jobs`` run by as many spawned processes; once :meth:`wait_ready`, :meth:`go` starts them all at once."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs = []
        for job in jobs:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=producer_process, args=(job, child), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def wait_ready(self) -> None:
        for conn in self.conns:
            self._expect(conn, "ready", READY_TIMEOUT_S)

    def go(self) -> None:
        for conn in self.conns:
            conn.send("go")

    def results(self, timeout: float, while_waiting: Any = None, interval: float = 0.05) -> list[dict[str, Any]]:
        """Every process's figures; ``while_waiting()`` is called every ``interval`` until all are in."""
        out: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(out) < len(self.conns):
            if while_waiting is not None:
                while_waiting()
            for conn in wait([c for i, c in enumerate(self.conns) if i not in out], interval):
                out[self.conns.index(conn)] = self._expect(conn, "done", 0)
            if time.monotonic() > deadline:
                raise RuntimeError(f"producers not done after {timeout:g}s")
        return [out[i] for i in range(len(self.conns))]

    @staticmethod
    def _expect(conn: Connection, kind: str, timeout: float) -> Any:
        if timeout and not conn.poll(timeout):
            raise RuntimeError(f"a producer process did not say {kind!r} within {timeout:g}s")
        try:
            got, payload = conn.recv()
        except EOFError:
            raise RuntimeError(f"a producer process exited before saying {kind!r} (its error is above)") from None
        if got != kind:
            raise RuntimeError(f"a producer process failed: {payload}")
        return payload

    def close(self) -> None:
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()  # our own child, by its handle
                proc.join()
        for conn in self.conns:
            conn.close()


@contextmanager
def producers(jobs: Sequence[Job]) -> Iterator[Producers]:
    p = Producers(jobs)
    try:
        p.wait_ready()
        yield p
    finally:
        p.close()


# -- lag ----------------------------------------------------------------------------------
@dataclass
class LagSamples:
    """The master's runtime info as sampled: monotonic ns, its commitlog end, the slave's lag."""

    t_ns: list[int] = field(default_factory=list)
    put_where: list[int] = field(default_factory=list)
    behind: list[int] = field(default_factory=list)
    behind_s: list[float] = field(default_factory=list)

    def take(self, info: dict[str, str]) -> None:
        if "slaveFallBehindMuch" not in info:
            return  # no slave connected (the lone master is sampled too: the same load on it)
        self.t_ns.append(time.monotonic_ns())
        self.put_where.append(int(info["masterPutWhere"]))
        self.behind.append(int(info["slaveFallBehindMuch"]))
        self.behind_s.append(float(info["slaveFallBehindSeconds"]))

    def time_lag_s(self) -> np.ndarray:
        """Per sample: seconds since the master's end first reached what the slave has now (0 when
        the slave has everything), interpolated between samples."""
        t = np.asarray(self.t_ns, dtype=np.float64) / 1e9
        put = np.asarray(self.put_where, dtype=np.int64)
        slave = put - np.asarray(self.behind, dtype=np.int64)
        j = np.searchsorted(put, slave, side="left")  # first sample whose end reached the slave's offset
        prev = np.maximum(j - 1, 0)
        j = np.minimum(j, len(put) - 1)
        span = (put[j] - put[prev]).astype(np.float64)
        frac = np.divide(slave - put[prev], span, out=np.zeros_like(span), where=span > 0)
        reached = t[prev] + np.clip(frac, 0, 1) * (t[j] - t[prev])
        return np.where(slave >= put, 0.0, np.maximum(t - reached, 0.0))

    def summary(self) -> dict[str, Any]:
        if not self.t_ns:
            return {"samples": 0}
        lag_s = self.time_lag_s()
        return {"samples": len(self.t_ns), "bytes_p50": _pct(self.behind, 50), "bytes_p99": _pct(self.behind, 99),
                "bytes_max": max(self.behind), "ms_p50": _pct(lag_s, 50) * 1e3, "ms_p99": _pct(lag_s, 99) * 1e3,
                "ms_max": float(lag_s.max()) * 1e3, "broker_seconds_p99": _pct(self.behind_s, 99)}


def _pct(values: Any, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


# -- throughput, lag, latency ---------------------------------------------------------------
def run_setup(setup: str, rep: int, namesrv: str, args: Any, api: SyncMQClientAPI) -> dict[str, Any]:
    with scratch_dir(args.dir, f"bench-repl-{setup}-") as root:
        brokers = BrokerSet(namesrv, root, ROLE[setup], api)
        try:
            if setup != "lone":
                brokers.start_slave()
                brokers.wait_connected()
            topic = f"{TOPIC}_{setup}_{rep}"
            create_topic(Cluster(namesrv, brokers.master.addr), topic, args.queues)
            out = _load(brokers, topic, namesrv, args)
            out["latency"] = _latency(brokers, topic, namesrv, args)
            return out
        finally:
            brokers.stop()


def _load(brokers: BrokerSet, topic: str, namesrv: str, args: Any) -> dict[str, Any]:
    share = -(-args.messages // args.producers // args.batch) * args.batch  # whole batches each
    jobs = [Job(namesrv, topic, share, args.batch, args.window, args.body)] * args.producers
    samples = LagSamples()
    interval = args.sample_ms / 1000
    with producers(jobs) as procs:
        brokers.wait_caught_up()  # the warm-up sends
        load = os.getloadavg()[0]
        cpu0 = brokers.cpu()
        procs.go()
        got = procs.results(CATCH_UP_TIMEOUT_S, lambda: samples.take(brokers.info()), interval)
    caught_up = brokers.wait_caught_up()
    queued = brokers.settle(topic, args.queues)
    cpu1 = brokers.cpu()
    start = min(r["start_ns"] for r in got)
    end = max(r["end_ns"] for r in got)
    messages = sum(r["messages"] for r in got)
    statuses = sum((Counter(r["statuses"]) for r in got), Counter())
    seconds = (end - start) / 1e9
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu1}
    info = brokers.info()
    slave_end = None
    if brokers.slave is not None:
        slave_end = int(brokers.api.get_broker_runtime_info(brokers.slave.addr)["commitLogMaxOffset"])
    return {
        "load": load, "messages": messages, "seconds": seconds, "msg_s": rate(messages, seconds),
        "mb_s_bodies": rate(messages * args.body / MB, seconds),
        "statuses": dict(statuses), "not_ok": messages - statuses.get(SendStatus.SEND_OK.value, 0),
        "drain_after_load_s": max(0.0, caught_up - end / 1e9),
        "cpu_seconds": cpu, "cpu_s_per_msg": sum(cpu.values()) / messages,
        "master_cpu_s_per_msg": cpu["master"] / messages,
        "slave_cpu_s_per_msg": cpu.get("slave", 0.0) / messages,
        "producer_cpu_seconds": sum(r["cpu_seconds"] for r in got),
        "producer_cpu_share": sum(r["cpu_seconds"] for r in got) / (seconds * len(got)) if seconds else 0.0,
        "master_end": int(info["commitLogMaxOffset"]), "slave_end": slave_end,
        "queued": queued, "queued_expected": messages + args.producers * args.batch,  # + each one's warm-up batch
        "lag": samples.summary(),
    }


def _latency(brokers: BrokerSet, topic: str, namesrv: str, args: Any) -> dict[str, Any]:
    if not args.latency_sends:
        return {}
    with producers([Job(namesrv, topic, args.latency_sends, 0, 1, args.body)]) as procs:
        procs.go()
        (got,) = procs.results(CATCH_UP_TIMEOUT_S)
    brokers.wait_caught_up()
    ms = np.frombuffer(got["latencies_ns"], dtype=np.int64) / 1e6
    return {"sends": int(ms.size), "p50_ms": _pct(ms, 50), "p99_ms": _pct(ms, 99), "max_ms": float(ms.max()),
            "not_ok": ms.size - got["statuses"].get(SendStatus.SEND_OK.value, 0)}


# -- catch-up -------------------------------------------------------------------------------
def fill_store(store_dir: Path, size: int, body: int, queues: int) -> dict[str, Any]:
    """Append props traffic (batches of 64) straight to a store until its commitlog holds ``size``
    bytes; clean shutdown. Returns the commitlog end and the time taken (set-up, not a result)."""
    MessageStore = import_store()
    store = MessageStore(store_config(store_dir)).start()
    pool = batch_pool(256, 64, queues, body, True)
    t0 = time.perf_counter()
    try:
        i = 0
        while store.commitlog.max_offset() < size:
            store.put_messages(pool.batches[i % len(pool)])
            i += 1
        end = store.commitlog.max_offset()
    finally:
        store.shutdown()
    return {"commitlog_bytes": end, "messages": i * 64, "seconds": time.perf_counter() - t0}


def measure_disk(directory: Path, size: int) -> dict[str, Any]:
    """``disk_write.py``'s sequential ``write`` + fdatasync of ``size`` bytes under ``directory``."""
    with scratch_dir(directory, "bench-repl-disk-") as d:
        path = d / "disk.bin"
        t_write, t_all = DISK_WAYS["write"](path, size, os.urandom(DISK_CHUNK))
    return {"bytes": size, "seconds": t_all, "mb_s": rate(size / MB, t_all),
            "page_cache_mb_s": rate(size / MB, t_write)}


def run_catchup(namesrv: str, args: Any, api: SyncMQClientAPI) -> dict[str, Any]:
    size = args.catchup_mb * MiB
    disk = measure_disk(args.dir, size)
    _say(f"catch-up: disk {disk['mb_s']:,.0f} MB/s (write + fdatasync of {args.catchup_mb} MiB), "
         f"{disk['page_cache_mb_s']:,.0f} MB/s to the page cache")
    with scratch_dir(args.dir, "bench-repl-catchup-") as root:
        fill = fill_store(root / "master" / "store", size, args.body, args.queues)
        _say(f"catch-up: master store filled, {fill['commitlog_bytes'] / MiB:,.0f} MiB of commitlog "
             f"({fill['messages']:,} messages) in {fill['seconds']:.1f}s")
        brokers = BrokerSet(namesrv, root, "ASYNC_MASTER", api)
        runs = []
        try:
            brokers.wait_master_idle()
            behind = int(brokers.info()["commitLogMaxOffset"])
            for rep in range(args.reps):
                brokers.start_slave(f"slave{rep}")
                connected = brokers.wait_connected()
                cpu0 = brokers.cpu()
                done = brokers.wait_caught_up()
                cpu1 = brokers.cpu()
                seconds = done - connected
                cpu = {k: cpu1[k] - cpu0[k] for k in cpu1}
                runs.append({"bytes": behind, "seconds": seconds, "mb_s": rate(behind / MB, seconds),
                             "cpu_seconds": cpu, "mb_per_slave_cpu_s": rate(behind / MB, cpu["slave"]),
                             "slave_end": int(api.get_broker_runtime_info(brokers.slave.addr)["commitLogMaxOffset"])})
                _say(f"catch-up {rep + 1}/{args.reps}: {behind / MiB:,.0f} MiB in {seconds:.2f}s = "
                     f"{runs[-1]['mb_s']:,.1f} MB/s")
                brokers.stop_slave()
        finally:
            brokers.stop()
    med = sorted(runs, key=lambda r: r["mb_s"])[(len(runs) - 1) // 2]
    return {"disk": disk, "fill": fill, "runs": runs, "median_run": med, "mb_s": med["mb_s"],
            "fraction_of_disk": med["mb_s"] / disk["mb_s"] if disk["mb_s"] else 0.0}


# -- reporting --------------------------------------------------------------------------------
def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(runs, key=lambda r: r["msg_s"])[(len(runs) - 1) // 2]


def _median(values: list[float]) -> float:
    return sorted(values)[(len(values) - 1) // 2] if values else float("nan")


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per set-up: the median run by msg/s, and medians of the other figures over the repetitions."""
    out: dict[str, Any] = {}
    for setup, rs in runs.items():
        if not rs:
            continue
        med = _median_run(rs)
        lat = [r["latency"] for r in rs if r["latency"]]
        out[setup] = {
            "msg_s": med["msg_s"], "msg_s_runs": [r["msg_s"] for r in rs],
            "cpu_s_per_msg": _median([r["cpu_s_per_msg"] for r in rs]),
            "master_cpu_s_per_msg": _median([r["master_cpu_s_per_msg"] for r in rs]),
            "slave_cpu_s_per_msg": _median([r["slave_cpu_s_per_msg"] for r in rs]),
            "producer_cpu_share": _median([r["producer_cpu_share"] for r in rs]),
            "lag_bytes_p99": _median([r["lag"]["bytes_p99"] for r in rs if r["lag"]["samples"]]),
            "lag_ms_p99": _median([r["lag"]["ms_p99"] for r in rs if r["lag"]["samples"]]),
            "broker_lag_seconds_p99": _median([r["lag"]["broker_seconds_p99"] for r in rs if r["lag"]["samples"]]),
            "latency_p50_ms": _median([x["p50_ms"] for x in lat]),
            "latency_p99_ms": _median([x["p99_ms"] for x in lat]),
            "not_ok": sum(r["not_ok"] + (r["latency"] or {}).get("not_ok", 0) for r in rs),
        }
    lone = out.get("lone")
    for setup, s in out.items():
        if lone and setup != "lone":
            s["ratio"] = s["msg_s"] / lone["msg_s"]
            s["master_cpu_ratio"] = lone["master_cpu_s_per_msg"] / s["master_cpu_s_per_msg"]
            s["target"] = TARGET_RATIO[setup]
            s["met"] = s["ratio"] >= s["target"]
    return out


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None or v != v else format(v, fmt)


def print_tables(summary: dict[str, Any], catchup: dict[str, Any] | None, args: Any, notes: list[str]) -> None:
    rows, lag_rows = [], []
    for setup, s in summary.items():
        ratio = "-" if "ratio" not in s else f"{s['ratio']:.2f} ({'met' if s['met'] else 'MISSED'} >= {s['target']})"
        cpu = f"{s['cpu_s_per_msg'] * 1e6:.2f}"
        if s["slave_cpu_s_per_msg"]:
            cpu += f" ({s['master_cpu_s_per_msg'] * 1e6:.2f} + {s['slave_cpu_s_per_msg'] * 1e6:.2f})"
        rows.append([setup, _f(s["msg_s"], ",.0f"), ratio, cpu, _f(s.get("master_cpu_ratio"), ".2f"),
                     _f(s["producer_cpu_share"], ".2f"), s["not_ok"]])
        lag_rows.append([setup, _f(s["lag_bytes_p99"] / 1024, ",.1f"), _f(s["lag_ms_p99"], ",.1f"),
                         _f(s["broker_lag_seconds_p99"], ".3f"), _f(s["latency_p50_ms"], ".2f"),
                         _f(s["latency_p99_ms"], ".2f")])
    if rows:
        print_table(f"produce {args.body} B bodies in batches of {args.batch} ({args.producers} producer processes x "
                    f"{args.window} in flight), median of {args.reps}",
                    ("set-up", "msg/s", "ratio to lone (target)", "broker CPU µs/msg (master + slave)",
                     "lone master CPU / this master's", "producer CPU share", "not SEND_OK"), rows)
        print_table("replication lag under that load (p99 of the master's runtime info), single-send latency",
                    ("set-up", "lag p99 KiB", "lag p99 ms (derived)", "broker's lag seconds p99", "send p50 ms",
                     "send p99 ms"), lag_rows, caption="" if catchup else "\n".join(notes))
    if catchup:
        d, med = catchup["disk"], catchup["median_run"]
        print_table(f"catch-up of a slave {args.catchup_mb:,} MiB behind, the median of {len(catchup['runs'])}",
                    ("MB/s", "fraction of disk write", "disk MB/s (write + fdatasync)", "disk MB/s (page cache)",
                     "seconds", "master CPU s", "slave CPU s", "MB per slave CPU-s"),
                    [[med["mb_s"], catchup["fraction_of_disk"], d["mb_s"], d["page_cache_mb_s"], med["seconds"],
                      med["cpu_seconds"]["master"], med["cpu_seconds"]["slave"], med["mb_per_slave_cpu_s"]]],
                    caption="\n".join(notes))


# -- main -------------------------------------------------------------------------------------
def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def build_parser():
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages per throughput run (all producers)")
    p.add_argument("--body", type=int, default=100, help="body bytes")
    p.add_argument("--batch", type=int, default=64, help="messages per SEND_BATCH_MESSAGE")
    p.add_argument("--queues", type=int, default=4, help="queues of the topic")
    p.add_argument("--producers", type=int, default=2, help="producer processes")
    p.add_argument("--window", type=int, default=8, help="batch requests in flight per producer")
    p.add_argument("--reps", type=int, default=3, help="repetitions; figures are medians")
    p.add_argument("--setups", type=_csv, default=list(SETUPS), help=f"comma-separated, of {','.join(SETUPS)}")
    p.add_argument("--cases", type=_csv, default=list(CASES), help=f"comma-separated, of {','.join(CASES)}")
    p.add_argument("--latency-sends", type=int, default=2000, help="timed single sends per run (0: none)")
    p.add_argument("--sample-ms", type=float, default=50.0, help="lag sampling interval")
    p.add_argument("--catchup-mb", type=int, default=1024, help="MiB of commitlog the catching-up slave lacks")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    # SIGTERM unwinds like an error: every broker started so far is stopped by its finally block
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    unknown = set(args.setups) - set(SETUPS) | set(args.cases) - set(CASES)
    if unknown:
        p.error(f"unknown set-ups or cases {sorted(unknown)}")
    if min(args.messages, args.batch, args.producers, args.window, args.reps, args.catchup_mb) <= 0:
        p.error("--messages, --batch, --producers, --window, --reps and --catchup-mb must be positive")
    code_version()
    load0, t0 = os.getloadavg(), time.perf_counter()
    _say(machine_line(args.dir))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.setups}
    catchup = None
    with scratch_dir(args.dir, "bench-repl-") as root, namesrv_running(root) as namesrv, \
            SyncMQClientAPI(timeout=30.0) as api:
        if "throughput" in args.cases:
            for rep in range(args.reps):
                k = rep % len(args.setups)
                for setup in args.setups[k:] + args.setups[:k]:
                    r = run_setup(setup, rep, namesrv, args, api)
                    runs[setup].append(r)
                    lag = r["lag"]
                    _say(f"rep {rep + 1}/{args.reps} {setup}: {r['msg_s']:,.0f} msg/s, broker CPU "
                         f"{r['cpu_s_per_msg'] * 1e6:.2f} µs/msg, lag p99 "
                         f"{lag.get('bytes_p99', 0) / 1024:,.1f} KiB / {lag.get('ms_p99', 0):,.1f} ms, "
                         f"send p50/p99 {r['latency'].get('p50_ms', 0):.2f}/{r['latency'].get('p99_ms', 0):.2f} ms")
        if "catchup" in args.cases:
            catchup = run_catchup(namesrv, args, api)
    load1 = os.getloadavg()
    summary = summarize(runs)
    notes = [f"Machine: {machine_line(args.dir)}.", f"Code: {code_version()}.",
             f"Load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load0)} at the start, "
             f"{'/'.join(f'{x:.2f}' for x in load1)} at the end; run time {(time.perf_counter() - t0) / 60:.1f} min.",
             f"{args.messages:,} messages a run; lag sampled every {args.sample_ms:g} ms; send latency over "
             f"{args.latency_sends:,} single sends."]
    print_tables(summary, catchup, args, notes)
    dump_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_line(args.dir),
                          "code": code_version(), "args": vars(args), "load": {"start": load0, "end": load1},
                          "throughput": {"summary": summary, "runs": runs}, "catchup": catchup})
    failed = [s for s, x in summary.items() if x["not_ok"]]
    failed += [f"{s} rep {i}: slave ends at {r['slave_end']}, master at {r['master_end']}"
               for s, rs in runs.items() for i, r in enumerate(rs)
               if r["slave_end"] is not None and r["slave_end"] != r["master_end"]]
    failed += [f"{s} rep {i}: {r['queued']} messages in the consume queues, not {r['queued_expected']}"
               for s, rs in runs.items() for i, r in enumerate(rs)
               if set(r["queued"].values()) != {r["queued_expected"]}]
    if catchup:
        failed += [f"catch-up: slave ends at {r['slave_end']}, not {r['bytes']}" for r in catchup["runs"]
                   if r["slave_end"] != r["bytes"]]
    if failed:
        print(f"FAILED: {'; '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
