"""Transactional send throughput against a plain send (issue 16), on real ``spark-mq`` processes.

A NameServer and a broker (default config, store in a temp dir under ``--dir``); one client process
sends ``--messages`` 100-byte messages with ``--window`` sends in flight, first as plain sends
(``Producer.send``), then as transactions (``TransactionProducer.send_message_in_transaction``: the
half message, a local transaction that commits at once, END_TRANSACTION), each ``--reps`` times,
taking turns. msg/s = messages / seconds from the first send to the last answer; for transactions,
the committed messages are counted in the topic's consume queues afterwards (the END_TRANSACTION is
oneway: the run waits until every one is there, and fails if one is missing).

    .venv/bin/python benchmarks/transactions.py [--messages 20000] [--window 32] [--reps 3] [--json FILE] [--quick]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from _common import TOPIC, code_version, create_topic, dump_json, local_cluster, machine_line, parser, print_table, rate

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import Producer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.client.transaction_producer import LocalTransactionState, TransactionProducer
from spark_mq.common.message import Message

QUEUES = 4
BODY = b"x" * 100
QUICK = {"messages": 200, "window": 8, "reps": 1}
COMMIT_WAIT_S = 60.0


async def _commit(msg: Message, arg: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


async def _check(msg: Any) -> LocalTransactionState:
    return LocalTransactionState.COMMIT_MESSAGE


async def _windowed(count: int, window: int, send) -> float:
    """Seconds to run ``send(i)`` for every i < count with ``window`` in flight."""
    next_i = 0

    async def worker() -> None:
        nonlocal next_i
        while next_i < count:
            i = next_i
            next_i += 1
            await send(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    return time.perf_counter() - started


async def run_plain(namesrv: str, topic: str, count: int, window: int) -> float:
    async with Producer("bench_plain", ClientConfig(namesrv_addr=namesrv)) as p:
        await p.send(Message(topic, BODY))  # routes and connections first, untimed
        return await _windowed(count, window, lambda i: p.send(Message(topic, BODY)))


async def run_transactional(namesrv: str, topic: str, count: int, window: int) -> float:
    p = TransactionProducer("bench_tx", ClientConfig(namesrv_addr=namesrv), _commit, _check)
    await p.start()
    try:
        await p.send_message_in_transaction(Message(topic, BODY))  # untimed warm-up
        return await _windowed(count, window, lambda i: p.send_message_in_transaction(Message(topic, BODY)))
    finally:
        await p.shutdown()


def queued(api: SyncMQClientAPI, broker: str, topic: str) -> int:
    return sum(api.get_max_offset(broker, topic, q) or 0 for q in range(QUEUES))


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.messages, args.window, args.reps = QUICK["messages"], QUICK["window"], QUICK["reps"]
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "transactional": []}
    with local_cluster(args.dir / f"tx-bench-{time.time_ns()}") as cluster, SyncMQClientAPI() as api:
        for rep in range(args.reps):
            for kind in (("plain", "transactional") if rep % 2 == 0 else ("transactional", "plain")):
                topic = f"{TOPIC}_{kind}_{rep}"
                create_topic(cluster, topic, QUEUES)
                runner = run_plain if kind == "plain" else run_transactional
                seconds = asyncio.run(runner(cluster.namesrv, topic, args.messages, args.window))
                expected = args.messages + 1  # with the warm-up
                deadline = time.monotonic() + COMMIT_WAIT_S
                while queued(api, cluster.broker, topic) < expected and time.monotonic() < deadline:
                    time.sleep(0.1)
                got = queued(api, cluster.broker, topic)
                if got != expected:
                    raise SystemExit(f"{kind} run {rep}: {got} messages in {topic}, expected {expected}")
                runs[kind].append({"messages": args.messages, "seconds": seconds,
                                   "msg_s": rate(args.messages, seconds), "queued": got})
    summary = {kind: statistics.median(r["msg_s"] for r in rs) for kind, rs in runs.items()}
    ratio = summary["transactional"] / summary["plain"]
    print_table("Transactional vs plain send", ["send", "msg/s (median)", "runs"],
                [[kind, summary[kind], len(runs[kind])] for kind in runs],
                caption=f"transactional / plain = {ratio:.2f}; {machine_line(args.dir)}")
    dump_json(args.json, {"args": vars(args), "code": code_version(), "runs": runs, "summary": summary,
                          "ratio": ratio})


if __name__ == "__main__":
    main()
