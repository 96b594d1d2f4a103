"""Pop consumption (receive + ack) against classic pull on the same backlog (issue 28), on real ``spark-mq``
processes.

A NameServer and a broker (default config, store in a temp dir under ``--dir``); a backlog of ``--messages``
100-byte messages over 4 queues (sent in batches, not timed). Then each mode drains the whole backlog with its
own consumer group, with 1 and with 4 consumer processes:

  pop    ``SimpleConsumer.receive(32, 60 s)`` of every queue (queue -1), the batch acknowledged with
         ``ack_many`` (one BATCH_ACK_MESSAGE): the broker hands out and tracks each message
  pull   ``PullConsumer.pull(mq, offset, 32)``: each process owns whole queues (4 processes: one each) and
         commits its offsets at the end; nothing is tracked per message

msg/s = messages / seconds from the processes' common start to the last message received; CPU-s/msg = CPU
seconds of the consumer processes plus the broker's during the drain, per message (steadier than wall time on
a shared machine). Each mode runs ``--reps`` times on a fresh group (median msg/s reported).

    .venv/bin/python benchmarks/pop.py [--messages 200000] [--reps 1] [--json FILE] [--quick]
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import statistics
import time
from typing import Any

from _common import TOPIC, code_version, create_topic, dump_json, local_cluster, machine_line, parser, print_table
from _common import process_tree_cpu as tree_cpu

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.client.pull_consumer import PullConsumer
from spark_mq.client.results import PullStatus
from spark_mq.client.simple_consumer import SimpleConsumer
from spark_mq.common.message import Message
from spark_mq.remoting.bodies import MessageQueue

QUEUES = 4
BODY = b"x" * 100
BATCH = 64  # messages per send while filling
SEND_WINDOW = 8
POP_NUMS = 32  # the broker's maximum per pop; the pull size compared with it
EMPTY_WAIT_S = 1.0  # a pop finding nothing for this long: the backlog is drained
QUICK = {"messages": 4_000, "reps": 1}


async def fill(namesrv: str, topic: str, count: int) -> None:
    async with Producer("bench_pop_fill", ClientConfig(namesrv_addr=namesrv)) as p:
        batches = [min(BATCH, count - i) for i in range(0, count, BATCH)]

        async def worker(k: int) -> None:
            for n in batches[k::SEND_WINDOW]:
                await p.send([Message(topic, BODY) for _ in range(n)])

        await asyncio.gather(*(worker(k) for k in range(SEND_WINDOW)))


async def drain_pop(namesrv: str, group: str, topic: str) -> tuple[int, float]:
    """(messages received and acknowledged, epoch time of the last one)."""
    c = SimpleConsumer(group, ClientConfig(namesrv_addr=namesrv), {topic: "*"})
    await c.start()
    got, last = 0, time.time()
    try:
        while batch := await c.receive(POP_NUMS, 60.0, EMPTY_WAIT_S):
            await c.ack_many(batch)
            got += len(batch)
            last = time.time()
    finally:
        await c.shutdown()
    return got, last


async def drain_pull(namesrv: str, group: str, topic: str, queue_ids: list[int]) -> tuple[int, float]:
    c = PullConsumer(group, ClientConfig(namesrv_addr=namesrv))
    await c.start()
    got, last = 0, time.time()
    try:
        queues = [mq for mq in await c.fetch_queues(topic) if mq.queue_id in queue_ids]
        offsets: dict[MessageQueue, int] = dict.fromkeys(queues, 0)
        while offsets:
            for mq in list(offsets):
                r = await c.pull(mq, offsets[mq], POP_NUMS)
                if r.status != PullStatus.FOUND:
                    c.update_offset(mq, offsets.pop(mq))
                    continue
                got += len(r.messages)
                last = time.time()
                offsets[mq] = r.next_begin_offset
    finally:
        await c.shutdown()
    return got, last


def consumer_process(mode: str, namesrv: str, group: str, topic: str, queue_ids: list[int], start: Any,
                     out: Any) -> None:
    """One consumer process: waits for the common start, drains, reports (count, last, cpu seconds)."""
    start.wait()
    cpu0 = time.process_time()
    if mode == "pop":
        got, last = asyncio.run(drain_pop(namesrv, group, topic))
    else:
        got, last = asyncio.run(drain_pull(namesrv, group, topic, queue_ids))
    out.put((got, last, time.process_time() - cpu0))


def broker_cpu() -> float:
    return sum(own for cmd, own, _ in tree_cpu().values() if " broker " in cmd)


def run_mode(mode: str, processes: int, namesrv: str, topic: str, rep: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    group = f"bench_{mode}_{processes}_{rep}"
    shares = [list(range(QUEUES))[i::processes] for i in range(processes)]
    procs = [ctx.Process(target=consumer_process, args=(mode, namesrv, group, topic, shares[i], start, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # the interpreters imported; the start below is common to all
    cpu0 = broker_cpu()
    began = time.time()
    start.set()
    results = [out.get() for _ in procs]
    broker = broker_cpu() - cpu0
    for p in procs:
        p.join()
    messages = sum(r[0] for r in results)
    seconds = max(r[1] for r in results) - began
    cpu = sum(r[2] for r in results) + broker
    return {"mode": mode, "processes": processes, "messages": messages, "seconds": seconds,
            "msg_s": messages / seconds, "cpu_s_per_msg": cpu / messages, "broker_cpu_s": broker,
            "client_cpu_s": cpu - broker}


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()
    if args.quick:
        args.messages, args.reps = QUICK["messages"], QUICK["reps"]
    runs: list[dict[str, Any]] = []
    with local_cluster(args.dir / f"pop-bench-{time.time_ns()}") as cluster:
        create_topic(cluster, TOPIC, QUEUES)
        asyncio.run(fill(cluster.namesrv, TOPIC, args.messages))
        for rep in range(args.reps):
            for mode in ("pull", "pop"):
                for processes in (1, 4):
                    run = run_mode(mode, processes, cluster.namesrv, TOPIC, rep)
                    if run["messages"] != args.messages:
                        raise SystemExit(f"{mode} x{processes}: {run['messages']} messages, expected {args.messages}")
                    runs.append(run)
    rows = []
    for mode in ("pull", "pop"):
        for processes in (1, 4):
            mine = [r for r in runs if r["mode"] == mode and r["processes"] == processes]
            rows.append([f"{mode} x{processes}", statistics.median(r["msg_s"] for r in mine),
                         statistics.median(r["cpu_s_per_msg"] for r in mine) * 1e6,
                         statistics.median(r["broker_cpu_s"] for r in mine),
                         statistics.median(r["client_cpu_s"] for r in mine)])
    print_table(f"Pop (receive + ack) vs pull, {args.messages:,} x {len(BODY)} B over {QUEUES} queues",
                ["consumers", "msg/s", "CPU-us/msg", "broker CPU-s", "client CPU-s"], rows,
                caption=machine_line(args.dir))
    dump_json(args.json, {"args": vars(args), "code": code_version(), "runs": runs})


if __name__ == "__main__":
    main()
