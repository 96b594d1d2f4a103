"""The 5.x side of ``grpc_send.py``: the official RocketMQ 5.x Python client (``rocketmq-python-client``, run with
``.venv-rmq5/bin/python``: it imports nothing of spark_mq) sends COUNT 100-byte messages to TOPIC at a broker's gRPC
ENDPOINT, INFLIGHT at a time (1: ``Producer.send``, one after another; more: ``Producer.send_async``), after an
untimed warm-up of WARMUP sends. Prints one JSON line: ``seconds`` (first send to last answer) and ``latencies_ms``
(each send's, from its call to its answer).

    python _rmq5_send.py ENDPOINT TOPIC COUNT INFLIGHT WARMUP
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer

BODY = b"x" * 100


def message(topic: str) -> Message:
    m = Message()
    m.topic, m.body = topic, BODY
    return m


def run(producer: Producer, topic: str, count: int, inflight: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    started = time.perf_counter()
    if inflight <= 1:
        for _ in range(count):
            t0 = time.perf_counter()
            producer.send(message(topic))
            latencies.append((time.perf_counter() - t0) * 1000)
        return time.perf_counter() - started, latencies
    slots = threading.Semaphore(inflight)
    done = threading.Event()
    failures: list[BaseException] = []
    lock = threading.Lock()

    def answered(t0: float, future) -> None:
        with lock:
            latencies.append((time.perf_counter() - t0) * 1000)
            if future.exception() is not None:
                failures.append(future.exception())
            if len(latencies) == count:
                done.set()
        slots.release()

    for _ in range(count):
        slots.acquire()
        t0 = time.perf_counter()
        producer.send_async(message(topic)).add_done_callback(lambda f, t0=t0: answered(t0, f))
    done.wait()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, the first: {failures[0]}")
    return time.perf_counter() - started, latencies


def main() -> None:
    endpoint, topic, count, inflight, warmup = sys.argv[1:6]
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        for _ in range(int(warmup)):
            producer.send(message(topic))
        seconds, latencies = run(producer, topic, int(count), int(inflight))
    finally:
        producer.shutdown()
    print(json.dumps({"seconds": seconds, "latencies_ms": latencies}), flush=True)


if __name__ == "__main__":
    main()
