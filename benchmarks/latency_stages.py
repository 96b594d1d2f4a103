"""Where one message's produce-to-consume latency goes: the latency workload of ``peers.py`` (ours
only), every process traced by ``latency_trace/sitecustomize.py``, then the time between
consecutive stages of each message, as percentiles.

The stages, in order: the workload's stamp (just before ``client.send``), the producer's frame
handed to the socket, the broker's socket chunk received (``data_received``), its reader task
holding it (a client connection takes a chunk in ``data_received`` itself while its reader task waits:
"read" is then that moment), the frame decoded, the send handler running, the put done (the held pulls notified),
the held pull woken, its answer handed to the socket, the consumer's chunk received, read, decoded
as a frame, the pull's messages decoded, ``poll`` returning them. "Received" is the last chunk
received before the frame was decoded (with two chunks queued for the reader, "received -> read"
can be negative). A message is followed by the first message of each send (the workload sends
whatever fell due while the previous send was in flight as one batch).

Also: how often a send found the consumer's next pull already held (the put woke it), and how
long the broker takes from a pull's frame to its hold. ``--fifo`` runs the three processes under
SCHED_FIFO (``chrt -f``; root): on a machine shared with other work they then get a core when they
want one, and the figures come near a quiet machine's.

    python benchmarks/latency_stages.py [--fifo] [--seconds 10] [--json out.json]
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from _common import dump_json, parser, print_table, scratch_dir

HERE = Path(__file__).resolve().parent
TRACE_SITE = HERE / "latency_trace"
FIFO_PRIORITY = "10"
WARMUP_SHARE = 0.1  # the first sends of the run are left out (connections and caches warming)
PERCENTILES = (50, 90, 99)
HOLD_PERCENTILES = (50, 99)  # of a pull frame's time to its hold: a dispatch pass on the way shows in the p99
STAGES = (  # (name, process): the order a message passes them
    ("stamp", "producer"), ("frame to the socket", "producer"),
    ("chunk received", "broker"), ("chunk read", "broker"), ("frame decoded", "broker"),
    ("send handler", "broker"), ("stored", "broker"), ("pull woken", "broker"), ("answer to the socket", "broker"),
    ("chunk received", "consumer"), ("chunk read", "consumer"), ("frame decoded", "consumer"),
    ("messages decoded", "consumer"), ("poll returned", "consumer"),
)


def run_traced(trace_dir: Path, seconds: float, rate: float, fifo: bool) -> str:
    """One latency run with every process traced; returns the harness's output."""
    env = dict(os.environ, SPARK_MQ_LATENCY_TRACE=str(trace_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(TRACE_SITE), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, str(HERE / "peers.py"), "--systems", "spark_mq", "--workloads", "latency", "--reps", "1",
           "--latency-seconds", str(seconds), "--rate", str(rate)]
    if fifo:
        cmd = ["chrt", "-f", FIFO_PRIORITY, *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the latency run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _load(trace_dir: Path) -> dict[str, list[tuple]]:
    """Each process's rows, named by what it did."""
    by_role: dict[str, list[tuple]] = {}
    for path in trace_dir.glob("trace-*.pkl"):
        rows = pickle.loads(path.read_bytes())
        kinds = {r[0] for r in rows}
        role = ("broker" if "stored" in kinds else "consumer" if "polled" in kinds
                else "producer" if "send_out" in kinds else None)
        if role is not None and len(rows) > len(by_role.get(role, ())):
            by_role[role] = rows
    missing = {"producer", "broker", "consumer"} - set(by_role)
    if missing:
        raise SystemExit(f"no trace from the {', '.join(sorted(missing))} (found {len(by_role)} traced processes)")
    return by_role


def stage_times(by_role: dict[str, list[tuple]]) -> tuple[np.ndarray, dict[str, object]]:
    """A row of stage timestamps (ns) per message that passed them all, and the hold figures."""
    times: dict[int, list[int | None]] = defaultdict(lambda: [None] * len(STAGES))
    woke: list[int] = []
    for kind, seq, *rest in by_role["producer"]:
        if kind == "send_out":
            times[seq][1], times[seq][0] = rest
    last_stored = None
    pull_in: list[int] = []
    to_hold: list[int] = []
    for kind, seq, *rest in by_role["broker"]:
        if kind == "send_in":
            times[seq][2:5] = rest
        elif kind == "handler":
            times[seq][5] = rest[0]
        elif kind == "stored":
            times[seq][6] = rest[0]
            woke.append(rest[1])
            last_stored = seq if rest[1] else None
        elif kind == "woken" and last_stored is not None:
            times[last_stored][7] = rest[0]
            last_stored = None
        elif kind == "pull_answer_out" and times[seq][8] is None:
            times[seq][8] = rest[0]
        elif kind == "pull_in":
            pull_in.append(rest[2])
        elif kind == "held" and pull_in:
            to_hold.append(rest[0] - pull_in.pop())
            pull_in.clear()
    for kind, seq, *rest in by_role["consumer"]:
        if kind == "pull_answer_in":
            times[seq][9:12] = rest
        elif kind == "decoded":
            times[seq][12] = rest[0]
        elif kind == "polled":
            times[seq][13] = rest[0]
    rows = [t for _, t in sorted(times.items()) if all(v is not None for v in t)]
    rows = rows[int(len(rows) * WARMUP_SHARE):]
    woke_arr = np.array(woke[int(len(woke) * WARMUP_SHARE):])
    return np.array(rows, dtype=np.int64), {
        "sends": int(woke_arr.size),
        "sends finding the next pull held (%)": float(100 * np.mean(woke_arr > 0)) if woke_arr.size else 0.0,
        **{f"pull frame to its hold, broker (us, p{q})": float(np.percentile(to_hold, q) / 1e3) if to_hold else 0.0
           for q in HOLD_PERCENTILES},
    }


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="latency run duration")
    p.add_argument("--rate", type=float, default=5000.0, help="send rate, msg/s")
    p.add_argument("--fifo", action="store_true", help="run the processes under SCHED_FIFO (chrt; needs root)")
    args = p.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    with scratch_dir(args.dir, "latency-stages-") as trace_dir:
        out = run_traced(trace_dir, seconds, args.rate, args.fifo)
        rows, holds = stage_times(_load(trace_dir))
    if not rows.size:
        raise SystemExit("no message passed every stage")
    steps = []
    for i in range(1, len(STAGES)):
        d = (rows[:, i] - rows[:, i - 1]) / 1e3
        steps.append((f"{STAGES[i - 1][0]} -> {STAGES[i][0]} ({STAGES[i][1]})",
                      *(float(np.percentile(d, q)) for q in PERCENTILES), float(d.mean())))
    total = (rows[:, -1] - rows[:, 0]) / 1e3
    steps.append(("stamp -> poll returned (total)", *(float(np.percentile(total, q)) for q in PERCENTILES),
                  float(total.mean())))
    harness = [line.strip() for line in out.splitlines() if "spark_mq: latency" in line]
    print_table(f"Latency stages, us ({len(rows):,} messages traced{', SCHED_FIFO' if args.fifo else ''})",
                ["step", *(f"p{q}" for q in PERCENTILES), "mean"], steps,
                caption="; ".join(harness + [f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v:,}"
                                                 for k, v in holds.items()]))
    dump_json(args.json, {"steps": steps, "holds": holds, "harness": harness, "fifo": args.fifo,
                          "load": os.getloadavg()})


if __name__ == "__main__":
    main()
