"""A batch read of ``spark_mq`` when the topic's master is dead (issue 14, reads from slaves): the source
plans and pulls against the slave of the same broker name, and returns every acknowledged message."""

from __future__ import annotations

from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import MessageBatch

QUEUES = 4
MESSAGES = 80
TIMEOUT_S = 20.0


def test_batch_read_of_a_topic_whose_master_is_dead_reads_the_slave(spark, master_slave):
    namesrv, master, slave = master_slave
    topic = unique("SlaveRead")
    with SyncMQClientAPI(timeout=10.0) as api:
        for b in (master, slave):
            api.create_topic(b.addr, topic, QUEUES, QUEUES)
        wait_until(lambda: "HA: slave" in master.log(), TIMEOUT_S, "the slave to connect")
        acked = []  # SYNC_MASTER: a SEND_OK means the slave has it
        for q in range(QUEUES):
            bodies = [f"m{q}-{i}".encode() for i in range(MESSAGES // QUEUES)]
            result = api.send_batch(master.addr, MessageBatch.of(topic, q, bodies), "slave_read")
            if result.status == SendStatus.SEND_OK:
                acked += bodies
        assert len(acked) == MESSAGES

        master.kill()

        def master_gone():
            route = api.get_route_info(namesrv, topic)
            return route is not None and [b.broker_addrs for b in route.broker_datas] == [{1: slave.addr}]
        wait_until(master_gone, TIMEOUT_S, "the NameServer to drop the dead master")

    rows = (spark.read.format("spark_mq").option("namesrv", namesrv).option("topic", topic).load()
            .select("body").collect())
    assert sorted(bytes(r.body) for r in rows) == sorted(acked)
