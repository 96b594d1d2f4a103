"""A program of the official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client``, its own venv
``.venv-rmq5``: its module ``rocketmq`` is not the C++ 4.x binding's), run by ``test_rmq5_client.py`` against a
broker's gRPC endpoint. It imports nothing of spark_mq.

    python rmq5_producer_process.py MODE ENDPOINT TOPIC [AK SK]

MODE ``send``: 3 normal messages (tag, keys, a user property), 3 FIFO messages in each of message groups ``g1``
and ``g2``, 2 delay messages due 2 s after they are sent. MODE ``transaction``: 3 half messages, the first
committed, the second rolled back, the third left unresolved: the broker checks it back over the Telemetry
stream, the checker answers COMMIT. MODE ``normal``: ``NORMAL_COUNT`` normal messages (spread over the route's
queues, of every broker set it names). MODE ``fifo``: ``FIFO_PER_GROUP`` FIFO messages in each of message groups
``f0`` .. ``f3``, interleaved. One JSON line per message sent (``kind``, ``id``, ``body``, ``group``,
``due_ms``), ``{"checked": id}`` when a check-back arrives, then ``DONE``; an error prints ``ERROR <text>`` and
exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

CHECK_WAIT_S = 60  # for the check-back of the unresolved transaction
DELAY_S = 2
NORMAL_COUNT = 20
FIFO_GROUPS = 4
FIFO_PER_GROUP = 5
TLS_ENV = "RMQ5_TLS"  # "1": dial TLS (the CA to trust: gRPC's GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def message(topic: str, body: str, **fields) -> Message:
    m = Message()
    m.topic, m.body = topic, body.encode()
    for name, value in fields.items():
        setattr(m, name, value)
    return m


def send_all(producer: Producer, topic: str) -> None:
    for i in range(3):
        m = message(topic, f"normal-{i}", tag="TagA", keys=f"key-{i}")
        m.add_property("seq", str(i))
        emit({"kind": "normal", "id": producer.send(m).message_id, "body": f"normal-{i}"})
    for group in ("g1", "g2"):
        for i in range(3):
            body = f"fifo-{group}-{i}"
            emit({"kind": "fifo", "id": producer.send(message(topic, body, message_group=group)).message_id,
                  "body": body, "group": group})
    for i in range(2):
        due = int(time.time()) + DELAY_S
        body = f"delay-{i}"
        emit({"kind": "delay", "id": producer.send(message(topic, body, delivery_timestamp=due)).message_id,
              "body": body, "due_ms": due * 1000})


def send_normal(producer: Producer, topic: str) -> None:
    for i in range(NORMAL_COUNT):
        emit({"kind": "normal", "id": producer.send(message(topic, f"normal-{i}")).message_id, "body": f"normal-{i}"})


def send_fifo(producer: Producer, topic: str) -> None:
    for i in range(FIFO_PER_GROUP):
        for g in range(FIFO_GROUPS):
            body, group = f"fifo-f{g}-{i}", f"f{g}"
            emit({"kind": "fifo", "id": producer.send(message(topic, body, message_group=group)).message_id,
                  "body": body, "group": group, "seq": i})


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked = threading.Event()

    def check(self, msg: Message) -> TransactionResolution:
        emit({"checked": msg.message_id, "body": msg.body.decode()})
        self.checked.set()
        return TransactionResolution.COMMIT


def transactions(producer: Producer, topic: str, checker: Checker) -> None:
    for i, decision in enumerate(("commit", "rollback", "unresolved")):
        transaction = producer.begin_transaction()
        body = f"txn-{decision}"
        receipt = producer.send(message(topic, body), transaction)
        emit({"kind": "transaction", "id": receipt.message_id, "body": body, "decision": decision, "seq": i})
        if decision == "commit":
            transaction.commit()
        elif decision == "rollback":
            transaction.rollback()
    if not checker.checked.wait(CHECK_WAIT_S):
        raise TimeoutError(f"no check-back of the unresolved transaction within {CHECK_WAIT_S} s")
    time.sleep(1)  # the checker's answer (EndTransaction) is sent after check() returns


def main() -> None:
    mode, endpoint, topic = sys.argv[1:4]
    ak, sk = [*sys.argv[4:6], "", ""][:2]
    checker = Checker()
    producer = Producer(ClientConfiguration(endpoint, Credentials(ak, sk)), (topic,),
                        checker if mode == "transaction" else None, tls_enable=os.environ.get(TLS_ENV) == "1")
    try:
        producer.startup()
        if mode == "transaction":
            transactions(producer, topic, checker)
        else:
            {"send": send_all, "normal": send_normal, "fifo": send_fifo}[mode](producer, topic)
    except Exception as e:
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    finally:
        producer.shutdown()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
