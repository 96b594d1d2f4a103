"""A streaming query of ``spark_mq`` over a topic of a controller-mode broker set (three replicas,
``allAckInSyncStateSet``, the controller embedded in the NameServer) through a SIGKILL of its master (issue 15):
a slave is elected and registers as broker id 0, the killed one restarts and rejoins as a slave, and the query
keeps running: it reads from the new master, commits its group's offsets there, and its sink ends with exactly
what the final master's commitlog holds for the topic (read by the independent struct reader), each stored
message once. A producer keeps a ledger of every SEND_OK throughout (our producer, sending a failed message
again under the same key): every acknowledged message is in the sink; copies stored by a retry whose answer was
lost are stored messages of their own, counted."""

from __future__ import annotations

from collections import Counter

from integration.controller import test_broker_failover as failover
from integration.controller._support import ControllerClient
from integration.controller.conftest import remoting  # noqa: F401  (the fixture: a remoting client)
from integration.controller.test_broker_failover import api, embedded, replica_set  # noqa: F401  (the fixtures)
from integration.ha.ledger import Ledger, key_of
from servers import unique, wait_until

TIMEOUT_S = 60.0
ACKED_BEFORE, ACKED_AFTER = 300, 300  # acknowledged sends before the kill, and after the new master took sends
REPLICAS_CONF = "allAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=6000\n"


def test_stream_keeps_reading_through_a_controller_failover(spark, embedded, replica_set, api, remoting,  # noqa: F811
                                                            tmp_path):
    namesrv = embedded.addr
    rs = replica_set(REPLICAS_CONF)
    topic = failover.started_with_a_topic(api, namesrv, rs)
    queues = range(2)  # started_with_a_topic's
    group, name = unique("stream_ctl_failover_g"), unique("stream_ctl_failover_q")
    ctl = ControllerClient(remoting, namesrv)
    by_addr = {b.addr: b for b in rs.brokers.values()}
    ledger = Ledger(namesrv, topic, body_size=120).start()
    df = (spark.readStream.format("spark_mq").option("namesrv", namesrv).option("topic", topic)
          .option("group", group).option("startingOffsets", "earliest").load())
    query = (df.select("queue_id", "queue_offset", "body").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="300 milliseconds").start())

    def rows() -> list[tuple[int, int, bytes]]:
        return [(r.queue_id, r.queue_offset, bytes(r.body)) for r in spark.table(name).collect()]

    def has_read(keys: set[str]) -> bool:
        assert query.exception() is None, str(query.exception())
        return keys <= {key_of(body) for _, _, body in rows()}

    try:
        wait_until(lambda: failover.sync_state_set(ctl, rs) == set(rs.brokers), TIMEOUT_S, "every replica in the set")
        wait_until(lambda: ledger.acknowledged() >= ACKED_BEFORE, TIMEOUT_S, "sends acknowledged before the kill")
        wait_until(lambda: has_read({"m0", "m1"}), TIMEOUT_S, "the query to read", 0.5)
        master = by_addr[failover.route(api, namesrv, topic, rs.name)[0]]
        master.kill()
        wait_until(lambda: failover.route(api, namesrv, topic, rs.name).get(0) not in (None, master.addr), TIMEOUT_S,
                   "another master routed")
        new_master = by_addr[failover.route(api, namesrv, topic, rs.name)[0]]
        master.start_again()
        at_failover = ledger.acknowledged()
        wait_until(lambda: ledger.acknowledged() >= at_failover + ACKED_AFTER, TIMEOUT_S,
                   "sends acknowledged by the new master")
        ledger.stop()
        wait_until(lambda: has_read(set(ledger.acked)), TIMEOUT_S, "the query to read every acknowledged message",
                   0.5)
        files = failover.identical_to(new_master, rs)
        stored = [(u.queue_id, u.queue_offset, u.body) for u in files.units if u.topic == topic]
        ends = Counter(q for q, _, _ in stored)
        wait_until(lambda: {q: api.query_consumer_offset(new_master.addr, group, topic, q) for q in queues}
                   == {q: ends[q] for q in queues}, TIMEOUT_S, "the query to commit every queue's end to the new "
                   "master", 0.5)
        assert query.isActive and query.exception() is None
        got = rows()
    finally:
        ledger.stop()
        query.stop()

    read_twice = sum(n - 1 for n in Counter(got).values())
    audit = ledger.audit(files)
    print(f"\nspark stream through a controller failover: {audit.summary()}, failed attempts "
          f"{dict(ledger.attempts)}, sink rows {len(got)}, read twice {read_twice}, stored {len(stored)}")
    assert audit.lost == [], f"acknowledged messages missing from the final master: {audit.lost[:20]}"
    assert read_twice == 0, "stored messages read twice"
    assert set(got) == set(stored), (f"sink rows not stored: {sorted(set(got) - set(stored))[:5]}, stored not in "
                                     f"the sink: {sorted(set(stored) - set(got))[:5]}")
