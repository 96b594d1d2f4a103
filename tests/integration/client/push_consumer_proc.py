"""A PushConsumer in its own process, for the crash test: ``python push_consumer_proc.py NAMESRV TOPIC GROUP
INSTANCE``. Prints ``READY`` once started, ``GOT <key>`` for every message it consumed (each line flushed) and
runs until killed."""

from __future__ import annotations

import sys
import threading
import time

from spark_mq.client.config import ClientConfig
from spark_mq.client.push_consumer import SyncPushConsumer


def main() -> None:
    namesrv, topic, group, instance = sys.argv[1:5]
    out = threading.Lock()

    def listener(messages) -> bool:
        time.sleep(0.02)  # slow enough to have messages in flight when the kill comes
        with out:
            for m in messages:
                sys.stdout.write(f"GOT {m.keys[0]}\n")
            sys.stdout.flush()
        return True

    consumer = SyncPushConsumer(group, ClientConfig(namesrv, instance_name=instance), consume_from="first")
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    consumer.start()
    print("READY", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
