"""Our producer (``SyncProducer``) through SIGKILLs of a controller-mode master: how many of its sends fail
per kill. Three replicas, allAckInSyncStateSet, the controller embedded in the NameServer; one thread sends
message after message (a failed one again, same key, until SEND_OK), the master is SIGKILLed and restarted
(it rejoins as a slave) twice (six times in the slow run). Every acknowledged message ends on the final master
(the independent struct reader); with a send timeout longer than an election, a send caught by a kill waits
for the new master instead of failing."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from integration.ha.ledger import body_of, key_of
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.common.errors import SparkMQError
from spark_mq.common.message import Message

from . import test_broker_failover as failover
from ._support import ControllerClient
from .test_broker_failover import api, embedded, replica_set  # noqa: F401  (the fixtures)

TIMEOUT_S = 60
SEND_TIMEOUT_S = 30.0  # longer than an election on a loaded machine: a send caught by a kill waits for it
ACKED_PER_ROUND = 100
# CI-sized: two kills (the promoted master killed in turn); the slow run kills six times
KILLS = [2, pytest.param(6, marks=pytest.mark.slow)]


@dataclass
class Sender:
    """One thread sending ``m<n>`` after ``m<n-1>`` was acknowledged; every outcome with its time."""

    producer: SyncProducer
    topic: str
    acked: list[tuple[str, float]] = field(default_factory=list)
    failed: list[tuple[str, float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            key = f"m{n}"
            try:
                ok = self.producer.send(Message(self.topic, body_of(key, 100), keys=key)).status == SendStatus.SEND_OK
                what = "" if ok else "not SEND_OK"
            except SparkMQError as e:
                ok, what = False, type(e).__name__
            if ok:
                self.acked.append((key, time.monotonic()))
                n += 1
            else:
                self.failed.append((key, time.monotonic(), what))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), "the sender did not stop"


@pytest.mark.parametrize("kills", KILLS)
def test_our_producer_rides_master_kills_without_failed_sends(embedded, replica_set, api, remoting,  # noqa: F811
                                                              kills):
    namesrv = embedded.addr
    rs = replica_set("allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n")
    topic = failover.started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    by_addr = {b.addr: b for b in rs.brokers.values()}
    resumed_after: list[float] = []
    with SyncProducer(unique("failover_pg"), ClientConfig(namesrv), send_timeout_s=SEND_TIMEOUT_S) as producer:
        sender = Sender(producer, topic)
        try:
            for i in range(kills + 1):
                wait_until(lambda: failover.sync_state_set(ctl, rs) == set(rs.brokers), TIMEOUT_S,
                           f"the full set, round {i}")
                target = len(sender.acked) + ACKED_PER_ROUND
                wait_until(lambda t=target: len(sender.acked) >= t, TIMEOUT_S, f"acknowledgements, round {i}")
                if i == kills:
                    break
                master = by_addr[failover.route(api, namesrv, topic, rs.name)[0]]
                master.kill()
                killed = time.monotonic()
                first = wait_until(lambda k=killed: next((t for _, t in sender.acked if t > k), None), TIMEOUT_S,
                                   f"a SEND_OK after kill {i + 1}")
                resumed_after.append(first - killed)
                wait_until(lambda m=master: failover.route(api, namesrv, topic, rs.name).get(0) not in (None, m.addr),
                           TIMEOUT_S, f"another master routed, round {i}")
                master.start_again()
        finally:
            sender.stop()
    final = by_addr[failover.route(api, namesrv, topic, rs.name)[0]]
    files = failover.identical_to(final, rs)
    stored = {k for u in files.units if u.topic == topic and (k := key_of(u.body)) is not None}
    lost = [k for k, _ in sender.acked if k not in stored]
    print(f"\nour producer through {kills} master kills: acknowledged {len(sender.acked)}, lost {len(lost)}, failed "
          f"sends {len(sender.failed)} {sender.failed[:10]}, seconds from a kill to the first SEND_OK after it "
          f"{[round(s, 2) for s in resumed_after]}")
    assert not lost, f"acknowledged messages missing from the final master: {lost[:20]}"
    assert sender.failed == [], "a send failed though the send timeout outlasts the election"
