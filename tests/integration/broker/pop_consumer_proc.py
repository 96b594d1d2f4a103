"""A SimpleConsumer in its own process, for the pop crash tests:
``python pop_consumer_proc.py NAMESRV TOPIC GROUP INVISIBLE_S ORDER MODE``.

MODE ``hold``: receives one batch of up to 8 messages, prints ``HOLD <n> <n>...`` (their bodies, flushed) and
holds them, unacknowledged, until killed (``HOLD`` alone when none came within 10 s). MODE ``work``: receives
and acknowledges until killed, 20 ms per message, printing ``RECV <n>`` for each message received and
``ACK <n>`` once its acknowledgement was answered (lines flushed)."""

from __future__ import annotations

import sys
import threading
import time

from spark_mq.client.config import ClientConfig
from spark_mq.client.simple_consumer import SyncSimpleConsumer


def main() -> None:
    namesrv, topic, group, invisible_s, order, mode = sys.argv[1:7]
    consumer = SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name=f"crashy-{mode}"), {topic: "*"},
                                  order=order == "1")
    consumer.start()
    if mode == "hold":
        held: list = []
        deadline = time.monotonic() + 10
        while not held and time.monotonic() < deadline:
            held = consumer.receive(8, float(invisible_s), 1.0)
        print("HOLD " + " ".join(m.body.decode() for m in held), flush=True)
        threading.Event().wait()
    while True:
        for m in consumer.receive(8, float(invisible_s), 1.0):
            print(f"RECV {m.body.decode()}", flush=True)
            time.sleep(0.02)  # slow enough that the killed consumers find messages to hold
            consumer.ack(m)
            print(f"ACK {m.body.decode()}", flush=True)


if __name__ == "__main__":
    main()
