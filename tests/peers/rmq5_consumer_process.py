"""Consumers of the official RocketMQ 5.x Python client (its own venv, like ``rmq5_producer_process.py``), run by
``test_rmq5_client.py`` against a broker's gRPC endpoint (they read through the broker's pop).

    python rmq5_consumer_process.py simple ENDPOINT TOPIC GROUP COUNT
    python rmq5_consumer_process.py push ENDPOINT TOPIC GROUP COUNT
    python rmq5_consumer_process.py fifo ENDPOINT TOPIC GROUP COUNT
    python rmq5_consumer_process.py idle ENDPOINT TOPIC GROUP 0

Each prints ``READY`` once started (a new group reads each queue from its first message); the test sends then.
One JSON line per event, then ``DONE`` (``ERROR <text>`` and exit 1 on a failure).

``simple``: a SimpleConsumer receives until it has seen COUNT messages and the one it left unacknowledged came
back. The first message received is never acknowledged (``{"left": body}``): it must reappear after its
invisible time (``{"received": body, "attempt": 2}``) and is acknowledged then; the second gets its invisible
duration changed before its ack (``{"changed": body}``); every other one is acknowledged at once.
``push``: a PushConsumer prints ``{"consumed": body}`` for every message its listener gets (SUCCESS each time) and
stops once COUNT distinct bodies came and nothing more arrived for 3 s.
``fifo``: a SimpleConsumer (of a group made orderly by the test) receives ``FIFO_FIRST`` messages and, holding them
unacknowledged, receives again (``{"received": body, "batch": "held"}``); then it acknowledges both and receives
and acknowledges until it has COUNT messages (``"batch": "first"`` / ``"rest"``), in the order received.
``idle``: a SimpleConsumer of GROUP and a Producer of TOPIC start, print ``{"client_id": id}`` each, and stay
connected until a line comes on stdin; then they shut down (NotifyClientTermination).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

INVISIBLE_S = 2  # a received message not acknowledged comes back after this
AWAIT_S = 3  # a receive's long polling
DEADLINE_S = 60
QUIET_S = 3
FIFO_FIRST = 2
FIFO_INVISIBLE_S = 20  # longer than the run: nothing comes back by its invisible time
_out = threading.Lock()


def emit(record: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def run_simple(config: ClientConfiguration, topic: str, group: str, count: int) -> None:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=AWAIT_S)
    consumer.startup()
    try:
        print("READY", flush=True)
        seen: set[str] = set()
        left: str | None = None
        back = False
        deadline = time.monotonic() + DEADLINE_S
        while (len(seen) < count or not back) and time.monotonic() < deadline:
            for m in consumer.receive(16, INVISIBLE_S):
                body = m.body.decode()
                emit({"received": body, "attempt": m.delivery_attempt, "id": m.message_id})
                if left is None:
                    left = body
                    emit({"left": body})
                elif body == left:
                    back = True
                    consumer.ack(m)
                    emit({"acked": body})
                elif len(seen) == 1:
                    consumer.change_invisible_duration(m, INVISIBLE_S * 5)
                    emit({"changed": body})
                    consumer.ack(m)
                    emit({"acked": body})
                else:
                    consumer.ack(m)
                    emit({"acked": body})
                seen.add(body)
    finally:
        consumer.shutdown()


def run_fifo(config: ClientConfiguration, topic: str, group: str, count: int) -> None:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=AWAIT_S)
    consumer.startup()
    try:
        print("READY", flush=True)
        seen = 0
        pending = []
        for batch, size in (("first", FIFO_FIRST), ("held", 32)):
            for m in consumer.receive(size, FIFO_INVISIBLE_S):
                emit({"received": m.body.decode(), "batch": batch, "attempt": m.delivery_attempt})
                pending.append(m)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            for m in pending:
                consumer.ack(m)
            seen += len(pending)
            if seen >= count or time.monotonic() > deadline:
                break
            pending = consumer.receive(32, FIFO_INVISIBLE_S)
            for m in pending:
                emit({"received": m.body.decode(), "batch": "rest", "attempt": m.delivery_attempt})
    finally:
        consumer.shutdown()


def run_idle(config: ClientConfiguration, topic: str, group: str, count: int) -> None:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=AWAIT_S)
    producer = Producer(config, (topic,))
    consumer.startup()
    producer.startup()
    try:
        emit({"client_id": consumer.client_id, "kind": "consumer"})
        emit({"client_id": producer.client_id, "kind": "producer"})
        print("READY", flush=True)
        sys.stdin.readline()
    finally:
        producer.shutdown()
        consumer.shutdown()


class Listener(MessageListener):
    def __init__(self) -> None:
        self.bodies: set[str] = set()
        self.last = time.monotonic()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        emit({"consumed": body, "attempt": message.delivery_attempt})
        self.bodies.add(body)
        self.last = time.monotonic()
        return ConsumeResult.SUCCESS


def run_push(config: ClientConfiguration, topic: str, group: str, count: int) -> None:
    listener = Listener()
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression()})
    consumer.startup()
    try:
        print("READY", flush=True)
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not (len(listener.bodies) >= count
                                                   and time.monotonic() - listener.last > QUIET_S):
            time.sleep(0.2)
    finally:
        consumer.shutdown()


def main() -> None:
    mode, endpoint, topic, group, count = sys.argv[1:6]
    config = ClientConfiguration(endpoint, Credentials())
    try:
        modes = {"simple": run_simple, "push": run_push, "fifo": run_fifo, "idle": run_idle}
        modes[mode](config, topic, group, int(count))
    except Exception as e:
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
