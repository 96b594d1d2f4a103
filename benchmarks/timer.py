"""Timer messages (issue 16): broker memory while a million timers are pending, and delivery error at
10,000 timers due per second, against real ``spark-mq`` processes.

A NameServer and a broker (``conf/broker.conf`` as shipped: timerPrecisionMs=1000, timerMaxDelaySec=3
days; store in a temp dir under ``--dir``); this process is the client (async ``MQClientAPI``, raw
SEND_BATCH / PULL_MESSAGE, ``--window`` requests in flight).

* pending: ``--pending`` timers (100-byte bodies, ``TIMER_DELAY_SEC`` of 1 to 2 days: none falls due)
  sent in batches of ``--batch``. The broker's resident memory (``/proc/<pid>/status``: VmRSS, and its
  anonymous and file-mapped parts) is sampled with nothing sent, then each time another quarter is
  acknowledged *and* enqueued into the timing wheel (``spark_mq_timer_pending`` from the broker's
  metrics). The same messages without the timer property, sent to a broker of their own, are the
  baseline: what storing that many messages costs anyway (the commitlog's and consume queue's pages
  are mapped files, counted in the file-mapped part while they are resident). The claim is that the
  timers add little anonymous memory: the wheel and the timer log are mapped files too.
* error: ``--due-rate`` timers per second over ``--due-seconds`` seconds, each with its own
  ``TIMER_DELIVER_MS`` (spread evenly), all sent before the first falls due (``--lead-s`` ahead); one
  consumer long-polls the topic's single queue. error = the time the consumer received a message minus
  the time it asked for; p50/p99/max, and how many came early (none should: due times are rounded up to
  the precision); also the broker's part of it (the delivered copy's store time minus the time asked
  for). A new broker for each ``--precisions`` value.

    .venv/bin/python benchmarks/timer.py [--pending 1000000] [--due-rate 10000] [--due-seconds 10] \\
        [--precisions 1000,100] [--json FILE] [--quick]
"""

from __future__ import annotations

import asyncio
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
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
    scratch_dir,
)
from peer_systems.base import free_port

from spark_mq.client.api import MQClientAPI
from spark_mq.client.results import PullStatus
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag

ROOT = Path(__file__).resolve().parents[1]
BODY = struct.Struct(">qq")  # (due ms, index), padded to BODY_SIZE
BODY_SIZE = 100
DAY_S = 86_400
QUICK = {"pending": 2000, "due_rate": 500, "due_seconds": 2, "lead_s": 5.0, "batch": 200}
ENQUEUE_WAIT_S = 600.0
POLL_MS = 5000  # a consumer's long poll
GROUP = "bench_timer"


def rss(pid: int) -> dict[str, int]:
    """Resident memory of ``pid`` in bytes: total, anonymous, file-mapped."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return 0.0


class Broker:
    """A NameServer and a broker with ``conf/broker.conf`` plus ``extra`` keys."""

    def __init__(self, root: Path, extra: str) -> None:
        root.mkdir(parents=True)
        conf = root / "broker.conf"
        conf.write_text((ROOT / "conf" / "broker.conf").read_text() + "\n" + extra)
        self.metrics_port = free_port()
        self.namesrv = Server(["namesrv", "--port", "0"], root / "namesrv.log", NAMESRV_READY)
        try:
            self.broker = Server(["broker", "-c", str(conf), "--namesrv", self.namesrv.addr, "--port", "0",
                                  "--store", str(root / "store"), "--metrics-port", str(self.metrics_port)],
                                 root / "broker.log", BROKER_READY)
        except BaseException:
            self.namesrv.stop()
            raise
        self.addr = self.broker.addr
        self.pid = self.broker.proc.pid

    def stop(self) -> None:
        self.broker.stop()
        self.namesrv.stop()


def timer_batch(topic: str, first: int, count: int, due_ms: np.ndarray | None, delay_s: np.ndarray | None
                ) -> MessageBatch:
    """``count`` messages numbered from ``first``, each with its TIMER_DELIVER_MS or TIMER_DELAY_SEC (no
    timer property when both are None: the baseline)."""
    idx = range(first, first + count)
    if due_ms is None and delay_s is None:
        props = [encode_properties({"PLAIN": str(i)}) for i in idx]
        bodies = [BODY.pack(0, i).ljust(BODY_SIZE, b".") for i in idx]
    elif due_ms is not None:
        props = [encode_properties({"TIMER_DELIVER_MS": str(d)}) for d in due_ms.tolist()]
        bodies = [BODY.pack(d, i).ljust(BODY_SIZE, b".") for d, i in zip(due_ms.tolist(), idx, strict=True)]
    else:
        props = [encode_properties({"TIMER_DELAY_SEC": str(d)}) for d in delay_s.tolist()]
        bodies = [BODY.pack(0, i).ljust(BODY_SIZE, b".") for i in idx]
    return MessageBatch.of(topic, 0, bodies, props, born_timestamp=int(time.time() * 1000))


async def send_all(api: MQClientAPI, addr: str, batches, window: int) -> None:
    """Send every batch ``batches`` yields, ``window`` in flight; any answer but SEND_OK fails the run."""
    it = iter(batches)

    async def worker() -> None:
        for batch in it:
            result = await api.send_batch(addr, batch, GROUP, timeout=30.0)
            if result.status.name != "SEND_OK":
                raise SystemExit(f"send answered {result.status}")

    await asyncio.gather(*(worker() for _ in range(window)))


async def create_topic(api: MQClientAPI, addr: str, topic: str) -> None:
    await api.create_topic(addr, topic, 1, 1)


async def run_pending(b: Broker, total: int, batch: int, window: int, timers: bool) -> list[dict[str, Any]]:
    """Memory samples at 0 and after each quarter of ``total`` far-future timers is enqueued (with
    ``timers`` false: stored, the same messages without the timer property)."""
    samples = [{"pending": 0, **rss(b.pid)}]
    rng = np.random.default_rng(7)
    async with MQClientAPI(timeout=30.0) as api:
        await create_topic(api, b.addr, TOPIC)
        quarter = total // 4
        started = time.perf_counter()
        for q in range(4):
            lo = q * quarter
            hi = total if q == 3 else lo + quarter
            delays = rng.integers(DAY_S, 2 * DAY_S, hi - lo)
            await send_all(api, b.addr, (timer_batch(TOPIC, i, min(batch, hi - i), None,
                                                     delays[i - lo:i - lo + batch] if timers else None)
                                         for i in range(lo, hi, batch)), window)
            deadline = time.monotonic() + ENQUEUE_WAIT_S
            while (pending := (metric(b.metrics_port, "spark_mq_timer_pending") if timers else hi)) < hi:
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {pending} of {hi} timers enqueued after {ENQUEUE_WAIT_S} s")
                await asyncio.sleep(0.2)
            samples.append({"pending": int(pending), "seconds": time.perf_counter() - started, **rss(b.pid)})
    return samples


async def consume(api: MQClientAPI, addr: str, topic: str, expected: int, deadline: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(due ms, index, received ms, stored ms) of every message, read by long polling until ``expected``
    arrived."""
    dues, received, stored = [], [], []
    offset, got = 0, 0
    while got < expected and time.time() < deadline:
        header = PullMessageRequestHeader(
            consumer_group=GROUP, topic=topic, queue_id=0, queue_offset=offset, max_msg_nums=1024,
            sys_flag=build_pull_sys_flag(commit_offset=False, suspend=True, subscription=False),
            commit_offset=0, suspend_timeout_millis=POLL_MS, sub_version=0, subscription=None)
        r = await api.pull_message(addr, header, timeout=POLL_MS / 1000 + 10)
        now = time.time() * 1000
        if r.status != PullStatus.FOUND:
            continue
        batch = r.batch()
        dues.append(np.array([BODY.unpack_from(body) for body in batch.bodies], dtype=np.int64))
        received.append(np.full(len(batch), now))
        stored.append(batch.store_timestamps.astype(np.int64))
        got += len(batch)
        offset = r.next_begin_offset
    if not dues:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    pairs = np.concatenate(dues)
    return pairs[:, 0], pairs[:, 1], np.concatenate(received), np.concatenate(stored)


async def run_error(b: Broker, rate_per_s: int, seconds: int, lead_s: float, batch: int, window: int
                    ) -> dict[str, Any]:
    """Timers due ``rate_per_s`` a second for ``seconds`` s, from ``lead_s`` ahead; the consumer's error."""
    total = rate_per_s * seconds
    topic = f"{TOPIC}_due"
    async with MQClientAPI(timeout=30.0) as api, MQClientAPI(timeout=30.0) as consumer_api:
        await create_topic(api, b.addr, topic)
        first_due = int(time.time() * 1000 + lead_s * 1000)
        due = first_due + (np.arange(total, dtype=np.int64) * 1000) // rate_per_s
        consumer = asyncio.ensure_future(consume(consumer_api, b.addr, topic, total,
                                                 time.time() + lead_s + seconds + 120))
        await send_all(api, b.addr, (timer_batch(topic, i, min(batch, total - i), due[i:i + batch], None)
                                     for i in range(0, total, batch)), window)
        sent_ms = time.time() * 1000
        got_due, index, received, stored = await consumer
    error = received - got_due
    broker_error = stored - got_due
    return {"timers": total, "received": int(error.size), "lost": total - len(set(index.tolist())),
            "sent_before_first_due": bool(sent_ms < first_due), "early": int((error < 0).sum()),
            "p50_ms": float(np.percentile(error, 50)) if error.size else None,
            "p99_ms": float(np.percentile(error, 99)) if error.size else None,
            "max_ms": float(error.max()) if error.size else None,
            "broker_p50_ms": float(np.percentile(broker_error, 50)) if error.size else None,
            "broker_p99_ms": float(np.percentile(broker_error, 99)) if error.size else None}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--pending", type=int, default=1_000_000)
    p.add_argument("--due-rate", type=int, default=10_000)
    p.add_argument("--due-seconds", type=int, default=10)
    p.add_argument("--lead-s", type=float, default=30.0, help="the first timer is due this long after sending begins")
    p.add_argument("--precisions", default="1000", help="timerPrecisionMs values for the error run, comma-separated")
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--window", type=int, default=4)
    args = p.parse_args()
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    precisions = [int(x) for x in args.precisions.split(",")]
    result: dict[str, Any] = {"args": vars(args), "code": code_version()}
    with scratch_dir(args.dir, "timer-bench") as tmp:
        for kind in ("baseline", "pending"):
            b = Broker(tmp / kind, "")
            try:
                result[kind] = asyncio.run(run_pending(b, args.pending, args.batch, args.window, kind == "pending"))
            finally:
                b.stop()
        result["error"] = {}
        for precision in precisions:
            b = Broker(tmp / f"error-{precision}", f"timerPrecisionMs={precision}\n")
            try:
                result["error"][str(precision)] = asyncio.run(
                    run_error(b, args.due_rate, args.due_seconds, args.lead_s, args.batch, args.window))
            finally:
                b.stop()
    mib = 1 << 20
    print_table("Broker memory with timers pending (baseline: the same messages, no timer property)",
                ["messages", "VmRSS MiB", "anonymous MiB", "file-mapped MiB", "baseline VmRSS", "baseline anonymous",
                 "baseline file-mapped"],
                [[s["pending"], s["VmRSS"] / mib, s["RssAnon"] / mib, s["RssFile"] / mib, base["VmRSS"] / mib,
                  base["RssAnon"] / mib, base["RssFile"] / mib]
                 for s, base in zip(result["pending"], result["baseline"], strict=True)],
                caption=machine_line(args.dir))
    print_table(f"Delivery error at {args.due_rate} due per second ({args.due_seconds} s)",
                ["timerPrecisionMs", "received", "lost", "early", "p50 ms", "p99 ms", "max ms", "broker p50",
                 "broker p99", "sent in time"],
                [[k, r["received"], r["lost"], r["early"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["broker_p50_ms"],
                  r["broker_p99_ms"], r["sent_before_first_due"]] for k, r in result["error"].items()],
                caption="error = consumer receive time - TIMER_DELIVER_MS; broker: store time of the delivered copy")
    dump_json(args.json, result)


if __name__ == "__main__":
    main()
