"""A C++ client producer (PyPI ``rocketmq`` 0.4.4) in a process of its own that keeps a ledger file:
``python cpp_producer_process.py NAMESRV GROUP TOPIC INSTANCE LEDGER``.

It prints ``READY`` once started, then sends one message after another (``SEND_PAUSE_S`` apart) until SIGTERM,
when it shuts the client down and prints ``DONE``. Every outcome is a line of LEDGER, written and flushed before
the next send (so a test reading the file sees them in order):

- ``OK <seq> <time> <msg_id> <body>``: the library answered SEND_OK (``time``: ``time.time()`` of the answer);
- ``FAIL <seq> <time> <what>``: the library raised (it gave up after its own attempts) or answered another status.

A failed send is sent again, the same ``seq`` and body (an application retrying the send it got no SEND_OK for),
``FAIL_PAUSE_S`` later; the next ``seq`` is sent only once it was acknowledged. A message stored without its answer
reaching the client is therefore stored twice: the test counts those copies. The ``seq`` is also the message's
``seq`` property (``cpp_consumer_process.py`` prints it) and the body names it (``peer_helpers.ledger_seq`` reads it
back).
"""

from __future__ import annotations

import sys
import threading
import time

from peer_helpers import ledger_body, run_until_sigterm
from rocketmq.client import Message, Producer, SendStatus
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import dll

SEND_PAUSE_S = 0.01  # between two acknowledged sends: a steady stream that leaves the shared machine some air
FAIL_PAUSE_S = 0.2  # before sending a failed message again
# the library logs every failed connect: its log files are capped (3 of 10 MB)
LOG_FILES, LOG_FILE_BYTES = 3, 10 << 20


def produce(namesrv: str, group: str, topic: str, instance: str, ledger_path: str, stop: threading.Event) -> None:
    producer = Producer(group)
    ffi_check(dll.SetProducerInstanceName(producer._handle, instance.encode()))
    ffi_check(dll.SetProducerLogFileNumAndSize(producer._handle, LOG_FILES, LOG_FILE_BYTES))
    producer.set_namesrv_addr(namesrv)
    producer.start()
    print("READY", flush=True)
    seq = 0
    with open(ledger_path, "a", buffering=1) as ledger:
        while not stop.is_set():
            msg = Message(topic)
            body = ledger_body(seq)
            msg.set_keys(f"seq-{seq}")
            msg.set_property("seq", str(seq))
            msg.set_body(body)
            try:
                result = producer.send_sync(msg)
            except Exception as e:  # the library raises for a send it gave up on
                outcome = f"FAIL {seq} {time.time():.3f} {type(e).__name__}"
            else:
                if result.status == SendStatus.OK:
                    outcome = f"OK {seq} {time.time():.3f} {result.msg_id} {body}"
                else:
                    outcome = f"FAIL {seq} {time.time():.3f} {result.status.name}"
            ledger.write(outcome + "\n")
            if outcome.startswith("OK"):
                seq += 1
                stop.wait(SEND_PAUSE_S)
            else:
                stop.wait(FAIL_PAUSE_S)
    producer.shutdown()


def main() -> None:
    namesrv, group, topic, instance, ledger_path = sys.argv[1:6]
    run_until_sigterm(lambda stop: produce(namesrv, group, topic, instance, ledger_path, stop))


if __name__ == "__main__":
    main()
