"""Automatic failover (issue 15): how long a broker set takes writes again after its master dies (RTO),
how many acknowledged messages a failover loses (RPO), and what replicating to a 3-replica set costs in
produce throughput, against real ``spark-mq`` processes.

A broker set of three controller-mode replicas (``enableControllerMode``, ``allAckInSyncStateSet``: a put
is acknowledged once every member of the SyncStateSet has it) with the controller embedded in the
NameServer (``enableControllerInNamesrv``, its state in a file), ``conf/broker.conf`` as shipped plus
those keys, stores in temp dirs under ``--dir``, free loopback ports. Replica 1 is configured master.

* RTO, once per settings profile (``--settings``): ``default`` (every failover key at its default:
  controllerHeartBeatTimeoutMills=10000, brokerHeartbeatInterval=1000, syncBrokerMetadataPeriod=5000,
  scanNotActiveBrokerInterval=5000) and ``fast`` (the values the integration tests use). A producer
  thread (the tests' ledger: ``SyncProducer``, one message at a time, a failed send retried after 50 ms
  with a route refresh) sends ``--body``-byte messages throughout. ``--kills`` times: once every replica is
  in the SyncStateSet and a few more sends were acknowledged, the master is SIGKILLed; RTO is the time
  from the kill to the first SEND_OK answered after it (necessarily by the new master: the old one is
  dead). The killed replica is then restarted on its port and store and rejoins as a slave. Each round
  is split by the processes' log lines into: the controller electing (after the dead master's
  connection closed), the new master learning it (the controller pushes it, NOTIFY_BROKER_ROLE_CHANGED;
  the broker's poll every syncBrokerMetadataPeriod is the fallback), its role switch (a restart of its
  parts in-process, ending with its registration at the NameServer as id 0), and the producer's first
  SEND_OK after that.
* RPO: at the end the producer stops, the replicas catch up, and every SEND_OK message is looked for in
  the final master's commitlog files, read by the tests' independent struct reader
  (tests/integration/ha/commitlog_files.py). Lost (acknowledged, missing) must be 0; duplicates (a
  send stored whose answer was lost, sent again) are counted.
* throughput: ``--producers`` producer processes send ``--messages`` messages of ``--body`` bytes in
  batches of ``--batch`` (``--window`` in flight each, as replication.py) to a lone master
  (ASYNC_MASTER, no controller) and to the 3-replica set (default settings, its full SyncStateSet
  formed first), ``--reps`` times each, alternating; msg/s = messages / (last answer - common start).

The machine's load matters (timings on a shared machine stretch); the table's caption gives it.

    .venv/bin/python benchmarks/failover.py [--kills 20] [--settings default,fast] [--messages 200000] \\
        [--reps 3] [--json FILE] [--quick]
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import (
    BROKER_READY,
    NAMESRV_READY,
    TOPIC,
    Server,
    code_version,
    dump_json,
    machine_line,
    parser,
    print_table,
    rate,
    scratch_dir,
)
from replication import BrokerSet, Job, namesrv_running, producers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the ledger and the independent commitlog reader of the fault tests

from integration.ha.commitlog_files import read_commitlog  # noqa: E402
from integration.ha.ledger import Ledger  # noqa: E402

from spark_mq.client.results import SendStatus  # noqa: E402
from spark_mq.client.sync_api import SyncMQClientAPI  # noqa: E402

BROKER_CONF = ROOT / "conf" / "broker.conf"
REPLICAS = (1, 2, 3)
# per profile: the NameServer's (controller's) keys, the brokers' keys
SETTINGS: dict[str, tuple[str, str]] = {
    "default": ("", ""),
    "fast": ("scanNotActiveBrokerInterval=200\ncontrollerHeartBeatTimeoutMills=2000\n",
             "brokerHeartbeatInterval=300\nsyncBrokerMetadataPeriod=500\ncontrollerHeartBeatTimeoutMills=4000\n"),
}
# what bounds each phase of a failover after a SIGKILL, by the key that sets it
PHASES = (
    ("elect", "controller elects (elect)",
     "the dead master's connection closing (if frozen: controllerHeartBeatTimeoutMills + scanNotActiveBrokerInterval)"),
    ("learn", "new master learns it (learn)",
     "the controller's push (NOTIFY_BROKER_ROLE_CHANGED); syncBrokerMetadataPeriod (the broker's poll) if it is lost"),
    ("switch", "role switch + NameServer registration (switch)", "the broker's restart in-process"),
    ("ack", "first SEND_OK after that (ack)", "the client's route refresh after a failed send (ledger: 50 ms pause)"),
)
QUICK = {"kills": 1, "messages": 5_000, "reps": 1}
TIMEOUT_S = 120.0  # one election, role switch or rejoin on a loaded 2-core machine
THROUGHPUT_TIMEOUT_S = 900.0
ACKS_BETWEEN_KILLS = 10  # SEND_OKs after the full SyncStateSet formed, before the next kill
LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {text}", flush=True)


def wait_for(check: Callable[[], Any], what: str, timeout: float = TIMEOUT_S, interval: float = 0.05) -> Any:
    """``check()``'s first truthy answer; RuntimeError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# -- processes -------------------------------------------------------------------------------------
@contextmanager
def controller_namesrv(root: Path, keys: str) -> Iterator[Server]:
    """A NameServer running the controller, its state in root/controller."""
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "namesrv.conf"
    conf.write_text(f"enableControllerInNamesrv=true\ncontrollerStorePath={root / 'controller'}\n{keys}")
    server = Server(["namesrv", "-c", str(conf), "--port", "0"], root / "namesrv.log", NAMESRV_READY)
    try:
        yield server
    finally:
        server.stop()


class Replica:
    """One controller-mode ``spark-mq broker``; each start logs to a file of its own (broker-<n>.log)."""

    def __init__(self, root: Path, conf: str, namesrv: str) -> None:
        self.root = root
        self.store = root / "store"
        self.conf = root / "broker.conf"
        root.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(conf)
        self.namesrv = namesrv
        self.starts = 0
        self.server = self._start(0)

    def _start(self, port: int) -> Server:
        self.starts += 1
        return Server(["broker", "-c", str(self.conf), "--namesrv", self.namesrv, "--port", str(port), "--store",
                       str(self.store), "--metrics-port", "0"], self.log, BROKER_READY)

    @property
    def log(self) -> Path:
        return self.root / f"broker-{self.starts}.log"

    @property
    def addr(self) -> str:
        return self.server.addr

    @property
    def alive(self) -> bool:
        return self.server.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (our child, by its PID): a crash."""
        os.kill(self.server.proc.pid, signal.SIGKILL)
        self.server.proc.wait()
        self.server.proc.stdout.close()

    def start_again(self) -> None:
        self.server = self._start(int(self.addr.rsplit(":", 1)[1]))

    def stop(self) -> None:
        if self.alive:
            self.server.stop()


class ReplicaSet:
    """Three replicas of one broker set; replica 1 configured master, 2 and 3 slaves."""

    def __init__(self, namesrv: str, root: Path, broker_keys: str, api: SyncMQClientAPI) -> None:
        self.namesrv = namesrv
        self.api = api
        self.name = f"failover-{os.getpid()}-{root.name}"
        self.replicas: dict[int, Replica] = {}
        try:
            for i in REPLICAS:
                conf = (f"{BROKER_CONF.read_text()}\n# failover benchmark\nbrokerName={self.name}\nbrokerId={i}\n"
                        f"brokerRole={'ASYNC_MASTER' if i == 1 else 'SLAVE'}\nenableControllerMode=true\n"
                        f"controllerAddr={namesrv}\nallAckInSyncStateSet=true\n{broker_keys}")
                self.replicas[i] = Replica(root / f"replica{i}", conf, namesrv)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for r in self.replicas.values():
            r.stop()

    def route(self, topic: str) -> dict[int, str]:
        data = self.api.get_route_info(self.namesrv, topic)
        return next((dict(b.broker_addrs) for b in (data.broker_datas if data else []) if b.broker_name == self.name),
                    {})

    def by_addr(self, addr: str) -> Replica:
        return next(r for r in self.replicas.values() if r.alive and r.addr == addr)

    def in_sync(self) -> set[int]:
        info = self.api.get_sync_state_data(self.namesrv, [self.name]).replicas_info_table.get(self.name)
        return {r.broker_id for r in info.in_sync_replicas} if info is not None else set()

    def wait_full_set(self, what: str) -> None:
        wait_for(lambda: self.in_sync() == set(REPLICAS), f"every replica in the SyncStateSet ({what})")

    def start_with_topic(self, topic: str, queues: int) -> None:
        """Replica 1 elected and routed as id 0, ``topic`` on it and known to both slaves, the set full."""
        first = self.replicas[1]
        wait_for(lambda: self.route("TBW102").get(0) == first.addr, "replica 1 elected and registered as id 0")
        self.api.create_topic(first.addr, topic, queues, queues)
        wait_for(lambda: len(self.route(topic)) == len(REPLICAS), "the topic routed on every replica")
        self.wait_full_set("start")

    def commitlog_ends(self) -> dict[int, int]:
        return {i: read_commitlog(r.store).end for i, r in self.replicas.items()}


# -- RTO and RPO -------------------------------------------------------------------------------------
def _log_times(path: Path, needle: str, after: float) -> float | None:
    """The wall time of the first line of the JSON log at ``path`` containing ``needle`` logged at or after
    ``after`` (time.time(); log times have ms resolution), None if there is none."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if needle not in line or not line.startswith('{"ts":"'):
            continue
        stamp = datetime.strptime(line[7:30], LOG_TIME).timestamp()
        if stamp >= after - 0.001:
            return stamp
    return None


def phases(namesrv_log: Path, new_master: Replica, name: str, killed_at: float, rto: float) -> dict[str, float | None]:
    """Seconds from the kill to each step, from the logs: elected, learned, serving (None: no such line)."""
    elected = _log_times(namesrv_log, f"{name}: elected master", killed_at)
    learned = _log_times(new_master.log, f"controller: master of {name} is", killed_at)
    serving = _log_times(new_master.log, f"broker {name} now ", killed_at)
    return {"elected": None if elected is None else elected - killed_at,
            "learned": None if learned is None else learned - killed_at,
            "serving": None if serving is None else serving - killed_at, "acked": rto}


def run_failover(profile: str, args: Any, root: Path, api: SyncMQClientAPI) -> dict[str, Any]:
    namesrv_keys, broker_keys = SETTINGS[profile]
    topic = f"{TOPIC}_failover_{profile}"
    with controller_namesrv(root / "namesrv", namesrv_keys) as ns:
        rs = ReplicaSet(ns.addr, root, broker_keys, api)
        rounds: list[dict[str, Any]] = []
        try:
            rs.start_with_topic(topic, args.queues)
            ledger = Ledger(ns.addr, topic, body_size=args.body).start()
            try:
                for k in range(args.kills):
                    target = ledger.acknowledged() + ACKS_BETWEEN_KILLS
                    wait_for(lambda t=target: ledger.acknowledged() >= t, f"acknowledgements before kill {k + 1}")
                    master = rs.by_addr(rs.route(topic)[0])
                    killed_wall, killed = time.time(), time.monotonic()
                    master.kill()
                    first = wait_for(lambda m=killed, a=master.addr: ledger.first_ack_after(m, a),
                                     f"a SEND_OK after kill {k + 1}")
                    rto = first - killed
                    new = rs.by_addr(wait_for(lambda m=master: (a := rs.route(topic).get(0)) not in (None, m.addr)
                                              and a, f"another master routed after kill {k + 1}"))
                    new_id = next(i for i, r in rs.replicas.items() if r is new)
                    steps = phases(root / "namesrv" / "namesrv.log", new, rs.name, killed_wall, rto)
                    rounds.append({"rto_s": rto, "killed": next(i for i, r in rs.replicas.items() if r is master),
                                   "new_master": new_id, **steps})
                    _say(f"{profile} kill {k + 1}/{args.kills}: RTO {rto:.2f} s (elected "
                         f"{_f(steps['elected'])}, learned {_f(steps['learned'])}, serving {_f(steps['serving'])} s "
                         f"after the kill), replica {new_id} now master")
                    master.start_again()
                    rs.wait_full_set(f"after kill {k + 1}")
                target = ledger.acknowledged() + ACKS_BETWEEN_KILLS
                wait_for(lambda: ledger.acknowledged() >= target, "acknowledgements after the last kill")
            finally:
                ledger.stop()
            final = rs.by_addr(rs.route(topic)[0])
            end = read_commitlog(final.store).end
            wait_for(lambda: set(rs.commitlog_ends().values()) == {end}, "every replica at the final master's end")
            audit = ledger.audit(read_commitlog(final.store))
        finally:
            rs.stop()
    return {"profile": profile, "settings": {"namesrv": namesrv_keys.split(), "brokers": broker_keys.split()},
            "rounds": rounds, "summary": summarize_rto(rounds),
            "acknowledged": audit.acknowledged, "lost": len(audit.lost), "lost_keys": audit.lost[:20],
            "duplicates": audit.duplicates, "unacknowledged_stored": audit.unacknowledged,
            "failed_attempts": dict(ledger.attempts)}


def _median(values: list[float]) -> float | None:
    return sorted(values)[(len(values) - 1) // 2] if values else None


def summarize_rto(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max RTO, the median of each step's time (from the kill) and of each phase's own length
    (elect = elected, learn = learned - elected, switch = serving - learned, ack = acked - serving), and the
    phase with the longest median: what bounds the RTO."""
    rto = [r["rto_s"] for r in rounds]
    spans: dict[str, list[float]] = {p: [] for p, _, _ in PHASES}
    for r in rounds:
        marks = [0.0, r["elected"], r["learned"], r["serving"], r["acked"]]
        if None in marks:
            continue
        for (p, _, _), begin, end in zip(PHASES, marks, marks[1:], strict=False):
            spans[p].append(end - begin)
    medians = {p: _median(v) for p, v in spans.items()}
    known = {p: v for p, v in medians.items() if v is not None}
    return {"kills": len(rounds), "rto_median_s": _median(rto), "rto_max_s": max(rto) if rto else None,
            "phase_median_s": medians, "bound_by": max(known, key=known.get) if known else None}


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


# -- throughput ---------------------------------------------------------------------------------------
def _load(namesrv: str, topic: str, args: Any) -> dict[str, Any]:
    share = -(-args.messages // args.producers // args.batch) * args.batch  # whole batches each
    with producers([Job(namesrv, topic, share, args.batch, args.window, args.body)] * args.producers) as procs:
        procs.go()
        got = procs.results(THROUGHPUT_TIMEOUT_S)
    messages = sum(r["messages"] for r in got)
    seconds = (max(r["end_ns"] for r in got) - min(r["start_ns"] for r in got)) / 1e9
    statuses = sum((Counter(r["statuses"]) for r in got), Counter())
    return {"messages": messages, "seconds": seconds, "msg_s": rate(messages, seconds), "statuses": dict(statuses),
            "not_ok": messages - statuses.get(SendStatus.SEND_OK.value, 0)}


def run_throughput(setup: str, rep: int, args: Any, api: SyncMQClientAPI) -> dict[str, Any]:
    topic = f"{TOPIC}_{setup}_{rep}"
    with scratch_dir(args.dir, f"bench-failover-{setup}-") as root:
        if setup == "lone":
            with namesrv_running(root) as namesrv:
                lone = BrokerSet(namesrv, root, "ASYNC_MASTER", api)
                try:
                    api.create_topic(lone.master.addr, topic, args.queues, args.queues)
                    wait_for(lambda: api.get_route_info(namesrv, topic), "the topic routed")
                    return _load(namesrv, topic, args)
                finally:
                    lone.stop()
        with controller_namesrv(root / "namesrv", "") as ns:
            rs = ReplicaSet(ns.addr, root, "", api)
            try:
                rs.start_with_topic(topic, args.queues)
                out = _load(ns.addr, topic, args)
                out["in_sync_after"] = sorted(rs.in_sync())
                return out
            finally:
                rs.stop()


# -- main ----------------------------------------------------------------------------------------------
def _csv(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def build_parser():
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="master SIGKILLs per settings profile (0: no failover runs)")
    p.add_argument("--settings", type=_csv, default=list(SETTINGS), help=f"comma-separated, of {','.join(SETTINGS)}")
    p.add_argument("--messages", type=int, default=200_000,
                   help="messages per throughput run (all producers; 0: no throughput runs)")
    p.add_argument("--body", type=int, default=100, help="body bytes")
    p.add_argument("--batch", type=int, default=64, help="messages per SEND_BATCH_MESSAGE (throughput)")
    p.add_argument("--queues", type=int, default=4, help="queues of the topic")
    p.add_argument("--producers", type=int, default=2, help="producer processes (throughput)")
    p.add_argument("--window", type=int, default=8, help="batch requests in flight per producer (throughput)")
    p.add_argument("--reps", type=int, default=3, help="throughput repetitions; figures are medians")
    return p


def print_tables(failover: list[dict[str, Any]], throughput: dict[str, Any] | None, notes: list[str]) -> None:
    rows = []
    for run in failover:
        s = run["summary"]
        ph = s["phase_median_s"]
        rows.append([run["profile"], s["kills"], _f(s["rto_median_s"]), _f(s["rto_max_s"]),
                     *(_f(ph[p]) for p, _, _ in PHASES), s["bound_by"] or "-", run["acknowledged"], run["lost"],
                     run["duplicates"]])
    print_table("failover: SIGKILL of the master of a 3-replica set (allAckInSyncStateSet), RTO in seconds",
                ("settings", "kills", "RTO median", "RTO max", *(f"{p} median" for p, _, _ in PHASES),
                 "longest phase", "SEND_OK", "lost (RPO)", "duplicates"), rows)
    print_table("what bounds each phase", ("phase", "set by"), [[label, why] for _, label, why in PHASES],
                caption="" if throughput else "\n".join(notes))
    if throughput:
        print_table("produce throughput: 3-replica set (allAckInSyncStateSet) vs a lone master",
                    ("set-up", "msg/s (median)", "runs", "ratio to lone", "not SEND_OK"),
                    [[k, v["msg_s"], ", ".join(f"{x:,.0f}" for x in v["runs"]), _f(v.get("ratio")), v["not_ok"]]
                     for k, v in throughput.items()], caption="\n".join(notes))


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwind: every process stopped
    if args.quick:
        for k, v in QUICK.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    unknown = set(args.settings) - set(SETTINGS)
    if unknown:
        p.error(f"unknown settings {sorted(unknown)}: give {','.join(SETTINGS)}")
    if min(args.batch, args.producers, args.window, args.reps, args.body) <= 0 or min(args.kills, args.messages) < 0:
        p.error("--batch, --producers, --window, --reps and --body must be positive, --kills and --messages >= 0")
    code_version()
    load0, t0 = os.getloadavg(), time.perf_counter()
    _say(machine_line(args.dir))
    failover: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {"lone": [], "3 replicas": []}
    with SyncMQClientAPI(timeout=30.0) as api:
        for profile in args.settings if args.kills else ():
            with scratch_dir(args.dir, f"bench-failover-{profile}-") as root:
                failover.append(run_failover(profile, args, root, api))
            r = failover[-1]
            _say(f"{profile}: RTO median {_f(r['summary']['rto_median_s'])} s, max {_f(r['summary']['rto_max_s'])} s; "
                 f"{r['acknowledged']} SEND_OK, {r['lost']} lost, {r['duplicates']} duplicates")
        for rep in range(args.reps if args.messages else 0):
            order = ["lone", "3 replicas"] if rep % 2 == 0 else ["3 replicas", "lone"]
            for setup in order:
                runs[setup].append(run_throughput("lone" if setup == "lone" else "replicas", rep, args, api))
                _say(f"throughput rep {rep + 1}/{args.reps} {setup}: {runs[setup][-1]['msg_s']:,.0f} msg/s")
    throughput = {k: {"msg_s": _median([r["msg_s"] for r in v]), "runs": [r["msg_s"] for r in v],
                      "not_ok": sum(r["not_ok"] for r in v)} for k, v in runs.items() if v}
    if len(throughput) == 2:
        throughput["3 replicas"]["ratio"] = throughput["3 replicas"]["msg_s"] / throughput["lone"]["msg_s"]
    load1 = os.getloadavg()
    notes = [f"Machine: {machine_line(args.dir)}.", f"Code: {code_version()}.",
             f"Load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load0)} at the start, "
             f"{'/'.join(f'{x:.2f}' for x in load1)} at the end; run time {(time.perf_counter() - t0) / 60:.1f} min.",
             f"Phases are medians of each phase's own length, from the processes' log lines (ms resolution); "
             f"throughput: {args.messages:,} messages of {args.body} B in batches of {args.batch}, "
             f"{args.producers} producer processes x {args.window} in flight, median of {args.reps}."]
    print_tables(failover, throughput, notes)
    dump_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_line(args.dir),
                          "code": code_version(), "args": vars(args), "load": {"start": load0, "end": load1},
                          "failover": failover, "throughput": {"summary": throughput, "runs": runs}})
    failed = [f"{r['profile']}: {r['lost']} acknowledged messages lost" for r in failover if r["lost"]]
    failed += [f"throughput {k}: {v['not_ok']} sends not SEND_OK" for k, v in throughput.items() if v["not_ok"]]
    if failed:
        print(f"FAILED: {'; '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
