"""Pop through a controller failover: messages popped from the master, some acknowledged, the rest in flight,
then the master SIGKILLed. Pop goes on at the elected slave: nothing acknowledged is lost or lost track of,
the in-flight messages come back after their invisible time (the promoted slave revives them from the
replicated revive topic, through the pop retry topic), and the old master rejoins as a slave byte-identical
to the new master (its revive service stopped: a slave writes no revive record of its own)."""

from __future__ import annotations

import collections
import time

from integration.broker._pop_support import POP_CONF
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.simple_consumer import SyncSimpleConsumer
from spark_mq.common.errors import MQClientError, RemotingError

from ._support import ControllerClient
from .test_broker_failover import (  # noqa: F401 (api, embedded, replica_set: fixtures)
    TIMEOUT_S,
    api,
    elected,
    embedded,
    rejoined,
    replica_set,
    send,
    started_with_a_topic,
    sync_state_set,
)

# puts (and so the pops' checkpoints and the acks) answered once every replica of the SyncStateSet has them
SYNC_CONF = POP_CONF + "allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n"
COUNT = 60
INVISIBLE_S = 3.0


def test_pop_goes_on_at_the_new_master_and_messages_in_flight_come_back(embedded, replica_set, api, remoting):  # noqa: F811
    namesrv = embedded.addr
    rs = replica_set(SYNC_CONF)
    topic = started_with_a_topic(api, namesrv, rs)
    ctl = ControllerClient(remoting, namesrv)
    wait_until(lambda: sync_state_set(ctl, rs) == {1, 2, 3}, TIMEOUT_S, "both slaves in the SyncStateSet")
    send(namesrv, topic, "m", COUNT)
    group = unique("pop_failover")
    with SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name=unique("i")), {topic: "*"}) as before:
        before.start()
        popped = []
        while len(popped) < 40 and (batch := before.receive(10, INVISIBLE_S, 1.0)):
            popped.extend(batch)
        assert len(popped) >= 20
        acked, in_flight = popped[:len(popped) // 2], popped[len(popped) // 2:]
        for m in acked:
            before.ack(m)
    rs.brokers[1].kill()
    new_master = elected(api, namesrv, topic, rs)

    seen = collections.Counter()
    attempts = {}
    with SyncSimpleConsumer(group, ClientConfig(namesrv, instance_name=unique("i")), {topic: "*"}) as after:
        after.start()
        want = {m.body for m in in_flight} | {f"m-{i}".encode() for i in range(COUNT)} - {m.body for m in acked}
        deadline = time.monotonic() + TIMEOUT_S
        while not want <= set(seen) and time.monotonic() < deadline:
            try:
                batch = after.receive(16, 30.0, 1.0)
            except (MQClientError, RemotingError):  # the route still names the dead master
                time.sleep(0.5)
                continue
            for m in batch:
                seen[m.body] += 1
                attempts[m.body] = m.delivery_attempt
                after.ack(m)
        time.sleep(INVISIBLE_S + 1)  # anything popped twice by mistake, or a late revive, would show now
        while batch := after.receive(16, 30.0, 0.5):
            for m in batch:
                seen[m.body] += 1
                after.ack(m)
    missing = want - set(seen)
    assert not missing, sorted(missing)
    assert all(attempts[m.body] >= 2 for m in in_flight)  # revived by the new master, not popped afresh
    redelivered_acked = [m.body for m in acked if seen[m.body]]
    assert not redelivered_acked  # acks were replicated before their answer
    assert set(seen.values()) == {1}
    rejoined(api, namesrv, topic, rs, new_master)
    assert "Traceback" not in new_master.log()
