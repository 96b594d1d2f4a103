"""A SimpleConsumer in its own process, for the pop crash test: ``python pop_consumer_proc.py NAMESRV TOPIC GROUP
INVISIBLE_S ORDER``. Receives one batch of up to 8 messages, prints ``HOLD <n> <n>...`` (their bodies, flushed)
and holds them, unacknowledged, until killed."""

from __future__ import annotations

import sys
import threading

from spark_mq.client.config import ClientConfig
from spark_mq.client.simple_consumer import SyncSimpleConsumer


def main() -> None:
    namesrv, topic, group, invisible_s, order = sys.argv[1:6]
    consumer = SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name="crashy"), {topic: "*"},
                                  order=order == "1")
    consumer.start()
    held: list = []
    while not held:
        held = consumer.receive(8, float(invisible_s), 1.0)
    print("HOLD " + " ".join(m.body.decode() for m in held), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
