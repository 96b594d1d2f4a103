"""A streaming query of ``spark_mq`` over a replicated topic (SYNC_MASTER + SLAVE) through a master SIGKILL
and restart (issue 14): it keeps running on the slave while the master is dead, goes on reading and
committing at the master once it is back, and its sink holds every acknowledged message exactly once.

A slave refuses sends, so messages are produced before the kill (the slave has them: SYNC_MASTER answered
SEND_OK only then) and after the restart. The ledger is every SEND_OK; the check is the sink's rows."""

from __future__ import annotations

from collections import Counter

from servers import Broker, unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import MessageBatch

QUEUES = 4
TIMEOUT_S = 60.0
SLAVE_CONNECTED = "HA: slave "  # the master's log line as a slave connects


def _send(api: SyncMQClientAPI, master: Broker, topic: str, tag: str, per_queue: dict[int, int]) -> list[bytes]:
    """Send ``per_queue[q]`` messages to each queue ``q``; the bodies acknowledged (SEND_OK)."""
    acked: list[bytes] = []
    for q, n in per_queue.items():
        bodies = [f"{tag}-{q}-{i}".encode() for i in range(n)]
        if api.send_batch(master.addr, MessageBatch.of(topic, q, bodies), "stream_failover").status \
                == SendStatus.SEND_OK:
            acked += bodies
    return acked


def _slave_in_sync(master: Broker, connections: int) -> bool:
    return master.log().count(SLAVE_CONNECTED) >= connections


def test_stream_keeps_reading_through_a_master_kill_and_restart(spark, master_slave, tmp_path):
    namesrv, master, slave = master_slave
    topic, group = unique("StreamFailover"), unique("stream_failover_g")
    name = unique("stream_failover_q").replace("-", "_")
    with SyncMQClientAPI(timeout=10.0) as api:
        api.create_topic(master.addr, topic, QUEUES, QUEUES)
        wait_until(lambda: _slave_in_sync(master, 1), TIMEOUT_S, "the slave to connect")
        wait_until(lambda: topic in api.get_all_topic_config(slave.addr).topic_config_table, TIMEOUT_S,
                   "the slave to copy the topic")
        ledger = _send(api, master, topic, "before", dict.fromkeys(range(QUEUES), 15))
        assert len(ledger) == 15 * QUEUES

        df = (spark.readStream.format("spark_mq").option("namesrv", namesrv).option("topic", topic)
              .option("group", group).option("startingOffsets", "earliest").load())
        query = (df.select("body").writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / "chk"))
                 .trigger(processingTime="300 milliseconds").start())

        def read() -> Counter:
            return Counter(bytes(r.body) for r in spark.table(name).collect())

        def has_read(expected: list[bytes]) -> bool:
            assert query.exception() is None, query.exception()
            return set(read()) >= set(expected)

        try:
            wait_until(lambda: has_read(ledger), TIMEOUT_S, "the query to read the first messages", 0.5)
            ledger += _send(api, master, topic, "unread", dict.fromkeys(range(QUEUES), 10))
            assert len(ledger) == 25 * QUEUES  # SYNC_MASTER: the slave has every one of them

            master.kill()
            wait_until(lambda: has_read(ledger), TIMEOUT_S, "the query to read from the slave", 0.5)
            slave_max = {q: api.get_max_offset(slave.addr, topic, q) for q in range(QUEUES)}
            wait_until(lambda: {q: api.query_consumer_offset(slave.addr, group, topic, q)
                                for q in range(QUEUES)} == slave_max,
                       TIMEOUT_S, "the query to commit its offsets to the slave while the master is dead", 0.5)
            assert query.isActive

            master.start_again()
            wait_until(lambda: _slave_in_sync(master, 2), TIMEOUT_S, "the slave to connect to the restarted master")
            # only half the queues get new messages: the others' offsets must reach the master all the same
            ledger += _send(api, master, topic, "after", {0: 12, 1: 12})
            assert len(ledger) == 25 * QUEUES + 24
            wait_until(lambda: has_read(ledger), TIMEOUT_S, "the query to read from the restarted master", 0.5)
            master_max = {q: api.get_max_offset(master.addr, topic, q) for q in range(QUEUES)}
            assert master_max == {0: 37, 1: 37, 2: 25, 3: 25}
            wait_until(lambda: {q: api.query_consumer_offset(master.addr, group, topic, q)
                                for q in range(QUEUES)} == master_max,
                       TIMEOUT_S, "the query to commit every queue's offset to the restarted master", 0.5)
            assert query.isActive and query.exception() is None
            got = read()
            assert set(got) == set(ledger), f"missing {sorted(set(ledger) - set(got))[:5]}"
            assert not [b for b, n in got.items() if n > 1], "messages read twice"
        finally:
            query.stop()
