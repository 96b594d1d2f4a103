"""The broker's and the client's CPU per produce-to-consume cycle: what the latency workload does for one send.

A NameServer and a broker as in ``peers.py``; this process is the producer and a ``LitePullConsumer``
(long-polling pulls held on every queue) and runs strict cycles: send ``k`` 100-byte messages (one
SEND_MESSAGE_V2 for one, a SEND_BATCH_MESSAGE for more), ``poll`` until they all arrived, again. Per cycle
the broker reads the send, stores it, answers the held pull from the put, acknowledges the send and holds
the consumer's next pull: the work of the latency row's serial resource, without its pacing. The broker's
CPU (``/proc``, user + system) over the cycles, less its idle CPU over as long, divided by the cycles:
steadier on a shared machine than wall latency, and what a change to that path moves. The client's
CPU (this process: ``time.process_time``, the producer's send and the consumer's polls, its idle
background negligible) over the same cycles, divided by the cycles: the other two Python processes
of the latency row share the cores with the broker, so their CPU delays its wake-ups too.

    python benchmarks/broker_cycle.py [--batches 1,3,16] [--cycles 3000] [--reps 3]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from _common import create_topic, local_cluster, parser, print_table, process_tree_cpu, scratch_dir

BODY = 100
QUEUES = 4  # as the latency workload's topic
IDLE_S = 1.0  # how long the broker's idle CPU is sampled for (its background services)
TOPIC = "bench_cycle"


def broker_cpu(pid: int) -> float:
    return process_tree_cpu(pid)[pid][1]


async def cycles(namesrv: str, batch: int, count: int, broker_pid: int) -> tuple[float, float, float]:
    """Broker CPU seconds, this process's CPU seconds and wall seconds of ``count`` cycles of
    ``batch`` messages."""
    from spark_mq.client.config import ClientConfig
    from spark_mq.client.lite_pull_consumer import LitePullConsumer
    from spark_mq.client.producer import Producer
    from spark_mq.common.message import Message

    config = ClientConfig(namesrv_addr=namesrv, instance_name=f"cycle{batch}")
    producer = await Producer(f"cycle_producer_{batch}", config).start()
    consumer = LitePullConsumer(f"cycle_consumer_{batch}", config, consume_from="last")
    await consumer.subscribe(TOPIC)
    await consumer.start()
    try:
        while len(consumer.assignment()) < QUEUES:
            await asyncio.sleep(0.01)
        bodies = [b"x" * BODY for _ in range(batch)]

        async def one() -> None:
            await producer.send(Message(TOPIC, bodies[0]) if batch == 1 else [Message(TOPIC, b) for b in bodies])
            got = 0
            while got < batch:
                got += len(await consumer.poll(5.0))

        for _ in range(200):  # warm-up: connections, caches, the pulls held on every queue
            await one()
        cpu0, own0, t0 = broker_cpu(broker_pid), time.process_time(), time.perf_counter()
        for _ in range(count):
            await one()
        return broker_cpu(broker_pid) - cpu0, time.process_time() - own0, time.perf_counter() - t0
    finally:
        await consumer.shutdown()
        await producer.shutdown()


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,3,16", help="messages per send, comma-separated")
    p.add_argument("--cycles", type=int, default=3000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    with scratch_dir(args.dir, "broker_cycle") as root, local_cluster(Path(root)) as cluster:
        create_topic(cluster, TOPIC, QUEUES)
        per: dict[int, list[float]] = {b: [] for b in batches}
        own: dict[int, list[float]] = {b: [] for b in batches}
        walls: dict[int, list[float]] = {b: [] for b in batches}
        for _ in range(args.reps):
            for b in batches:
                idle0 = broker_cpu(cluster.broker_pid)
                time.sleep(IDLE_S)
                idle_rate = (broker_cpu(cluster.broker_pid) - idle0) / IDLE_S
                cpu, client_cpu, wall = asyncio.run(cycles(cluster.namesrv, b, args.cycles, cluster.broker_pid))
                per[b].append((cpu - idle_rate * wall) / args.cycles * 1e6)
                own[b].append(client_cpu / args.cycles * 1e6)
                walls[b].append(wall / args.cycles * 1e6)
        for b in batches:
            rows.append((b, f"{min(per[b]):.0f}", " / ".join(f"{v:.0f}" for v in per[b]),
                         f"{min(own[b]):.0f}", " / ".join(f"{v:.0f}" for v in own[b]), f"{min(walls[b]):.0f}"))
    print_table("CPU per cycle (send k messages, the held pull answers, the next pull held)",
                ["messages per send", "broker CPU us/cycle (min)", "every rep", "client CPU us/cycle (min)",
                 "every rep", "cycle wall us (min)"], rows)


if __name__ == "__main__":
    main()
