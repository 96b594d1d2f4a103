"""A batch read of ``spark_mq`` when the topic's master is dead (issue 14, reads from slaves): the source
plans and pulls against the slave of the same broker name, and returns every acknowledged message."""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable
from servers import unique, wait_until

from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import MessageBatch
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.stream import SparkMQStreamReader

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


def test_a_stream_batch_planned_on_the_master_is_read_at_the_slave_once_the_master_dies(master_slave):
    """The ranges of a micro-batch planned while the master lived carry its set's members, so a task run
    after the master's death reads them at the slave (the stream dropped the members when it planned)."""
    namesrv, master, slave = master_slave
    topic = unique("SlaveReadStream")
    with SyncMQClientAPI(timeout=10.0) as api:
        for b in (master, slave):
            api.create_topic(b.addr, topic, QUEUES, QUEUES)
        wait_until(lambda: "HA: slave" in master.log(), TIMEOUT_S, "the slave to connect")
        acked = []
        for q in range(QUEUES):
            bodies = [f"s{q}-{i}".encode() for i in range(MESSAGES // QUEUES)]
            if api.send_batch(master.addr, MessageBatch.of(topic, q, bodies), "slave_read").status \
                    == SendStatus.SEND_OK:
                acked += bodies
        assert len(acked) == MESSAGES
        wait_until(lambda: [b.broker_addrs for b in api.get_route_info(namesrv, topic).broker_datas]
                   == [{0: master.addr, 1: slave.addr}], TIMEOUT_S, "the slave in the route")

    reader = SparkMQStreamReader(SourceOptions.parse({"namesrv": namesrv, "topic": topic,
                                                      "startingOffsets": "earliest"}, streaming=True))
    try:
        start = reader.initialOffset()
        partitions = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        master.kill()
        rows = [body for p in partitions for batch in reader.read(p) for body in batch.column("body").to_pylist()]
    finally:
        reader.stop()
    assert sorted(rows) == sorted(acked)
