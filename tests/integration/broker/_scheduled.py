"""Shared pieces of the scheduled-message tests (delay levels and timers): both park a message in a
system topic and deliver it to its real topic once due, so they read, set up, count and SIGKILL alike;
only the broker conf, how a ledger of messages is sent and the labels differ."""

from __future__ import annotations

import collections
import urllib.request
from collections.abc import Callable

from servers import Broker, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.common.unit.decode import StoredMessage

from ._support import pull_header

DELIVERY_TIMEOUT_S = 60
QUEUES = 2


def read_all(api: SyncMQClientAPI, addr: str, topic: str, queues: int = QUEUES) -> list[StoredMessage]:
    """Every message of ``topic``'s queues, from offset 0."""
    out: list[StoredMessage] = []
    for q in range(queues):
        offset = 0
        while True:
            r = api.pull_message(addr, pull_header("scheduled_reader", topic, q, offset, max_nums=256))
            if r.status != PullStatus.FOUND:
                break
            out.extend(r.messages())
            offset = r.next_begin_offset
    return out


def send_ledger(namesrv: str, topic: str, rounds: int, per_batch: int,
                message: Callable[[int, int], Message]) -> set[bytes]:
    """``rounds`` batches of ``per_batch`` messages, ``message(round, index)`` each (its body must be unique);
    the bodies of every acknowledged message."""
    acked: set[bytes] = set()
    with SyncProducer(unique("pg"), ClientConfig(namesrv, instance_name=unique("i"))) as p:
        for r in range(rounds):
            msgs = [message(r, i) for i in range(per_batch)]
            if p.send(msgs).status == SendStatus.SEND_OK:
                acked.update(m.body for m in msgs)
    return acked


def setup_broker(tmp_path, namesrv: str, conf: str, name: str, metrics: bool = False) -> tuple[Broker, str]:
    """A broker named ``name``-... with a fresh topic of QUEUES queues, routed by the NameServer."""
    broker = Broker(namesrv, tmp_path / "b", conf, broker_name=unique(name), metrics=metrics, verbose=False)
    topic = unique(f"{name.capitalize()}T")
    with SyncMQClientAPI(timeout=5.0) as api:
        api.create_topic(broker.addr, topic, QUEUES, QUEUES)
        wait_until(lambda: api.get_route_info(namesrv, topic), what=f"route of {topic}")
    return broker, topic


def metric(broker: Broker, line_start: str) -> float | None:
    """The value of the first Prometheus line of ``broker`` starting with ``line_start``."""
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    return None


def delivered(api: SyncMQClientAPI, broker: Broker, topic: str, acked: set[bytes], what: str) -> collections.Counter:
    """Wait until every acknowledged body is in ``topic``; how many times each one is there."""
    def all_there():
        seen = collections.Counter(m.body for m in read_all(api, broker.addr, topic))
        return seen if set(seen) >= acked else None

    return wait_until(all_there, DELIVERY_TIMEOUT_S, f"every acknowledged {what} delivered", interval=0.3)


def sigkill_run(broker: Broker, topic: str, send_ledger: Callable[[], set[bytes]], kills: int, label: str,
                what: str) -> None:
    """Send the ledger, SIGKILL the broker ``kills`` times while it is being delivered (each restart on the
    same store), then check the ledger: none lost, duplicates counted; ``label`` starts the printed figures,
    ``what`` names the messages in a timeout. Stops the broker in the end."""
    try:
        acked = send_ledger()
        with SyncMQClientAPI(timeout=5.0) as api:
            for k in range(kills):
                # killed while some are being delivered and others still wait
                wait_until(lambda k=k: len({m.body for m in read_all(api, broker.addr, topic)})
                           > k * len(acked) // (kills + 1),
                           DELIVERY_TIMEOUT_S, f"deliveries before kill {k + 1}", interval=0.2)
                broker.kill()
                broker.start_again()
            seen = delivered(api, broker, topic, acked, what)
        lost = acked - set(seen)
        duplicates = sum(seen.values()) - len(seen)
        print(f"{label} SIGKILL x{kills}: {len(acked)} acknowledged, {len(lost)} lost, {duplicates} duplicates")
        assert not lost
        assert set(seen) == acked  # nothing that was not sent
    finally:
        broker.stop_if_running()
