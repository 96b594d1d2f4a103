"""Where a ``spark_mq`` stream starts each queue, against a real NameServer and brokers: no message
produced after the query started is skipped, and none from before it is read under ``latest``
(issue 13, "Correctness").

Most cases drive the stream reader as Spark drives it (``initialOffset``, ``latestOffset``,
``partitions``) without a JVM, so that a queue's start offset is asserted exactly; the regression of
a growing topic runs a real Spark query."""

from __future__ import annotations

import re

import pytest
from conftest import Producer, create_topic
from pyspark.sql.streaming.datasource import ReadAllAvailable
from servers import Broker, unique, wait_until

from spark_mq.arrow.queues import DataLossError
from spark_mq.client.subscription import subscription_data
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.remoting.bodies import ConsumerData, HeartbeatData, MessageQueue
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.stream import SparkMQStreamReader

BROKER = "broker-a"
EVERYTHING = ReadAllAvailable()
QUERY_TIMEOUT_S = 90


class OneTopic:
    """The stream reader of one topic with the offsets it returns un-keyed (``{"<broker>:<queueId>": n}``,
    the topic's part of its ``{"<topic>": {...}}``), so the cases below assert queues directly; it takes
    them back in that form too (the form of a checkpoint written before several topics)."""

    def __init__(self, reader: SparkMQStreamReader, topic: str) -> None:
        self.reader, self.topic = reader, topic

    def initialOffset(self) -> dict:
        return self.reader.initialOffset().get(self.topic, {})

    def latestOffset(self, start: dict, limit) -> dict:
        return self.reader.latestOffset(start, limit).get(self.topic, {})

    def __getattr__(self, name: str):
        return getattr(self.reader, name)


def _reader(cluster, topic: str, **options) -> OneTopic:
    return OneTopic(SparkMQStreamReader(SourceOptions.parse({"namesrv": cluster.namesrv, "topic": topic, **options},
                                                            streaming=True)), topic)


def _ranges(reader, start: dict, end: dict) -> dict[str, tuple[int, int]]:
    return {f"{r.broker_name}:{r.queue_id}": (r.start, r.end) for r in (p.value for p in reader.partitions(start, end))}


def _until_holding(reader, offsets: dict, queues: int) -> dict:
    """Trigger ``reader`` (each batch processed at once) until its offsets name ``queues`` queues."""
    def holding() -> dict:
        nonlocal offsets
        offsets = reader.latestOffset(offsets, EVERYTHING)
        return len(offsets) == queues and offsets
    return wait_until(holding, timeout=15, interval=0.1, what=f"the member to hold {queues} queues")


def _group_of_two(cluster, topic: str, group: str) -> tuple[Producer, OneTopic, OneTopic]:
    """A 2-queue topic with 10 messages in each queue, and two readers of ``group`` (not started)."""
    create_topic(cluster, topic, 2)
    producer = Producer(cluster, topic)
    producer.send(20, batch=10)
    return producer, *(_reader(cluster, topic, group=group, rebalanceIntervalMs="200") for _ in range(2))


def _grow(cluster, topic: str, queues: int) -> None:
    create_topic(cluster, topic, queues)
    with SyncMQClientAPI() as api:
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic).queue_datas[0].read_queue_nums == queues,
                   what=f"the route of {topic} with {queues} queues")


def _max(cluster, topic: str, queues: int) -> dict[str, int]:
    with SyncMQClientAPI() as api:
        return {f"{BROKER}:{q}": api.get_max_offset(cluster.broker.addr, topic, q) for q in range(queues)}


def _committed(cluster, topic: str, group: str, queues: int) -> dict[str, int | None]:
    with SyncMQClientAPI() as api:
        return {f"{BROKER}:{q}": api.query_consumer_offset(cluster.broker.addr, group, topic, q)
                for q in range(queues)}


# -- 1. a group stream while its topic grows (regression) ---------------------------------------------------------

def test_group_stream_reads_queues_added_while_running(spark, cluster, tmp_path):
    """Default ``startingOffsets`` (latest) in a group; the topic grows from 2 to 4 queues and messages go
    to all four at once: every message produced after the query started is read, none twice."""
    topic = unique("sc_grow")
    create_topic(cluster, topic, 2)
    producer = Producer(cluster, topic)
    producer.send(40, batch=10)  # before the query: not read (latest)
    name = unique("sc_grow_q").replace("-", "_")
    df = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
          .option("group", unique("sc_grow_g")).option("rebalanceIntervalMs", "500").load())
    query = (df.select("queue_id", "queue_offset", "uniq_key").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="300 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, timeout=QUERY_TIMEOUT_S, what="the query's first batch")
        before_rows = producer.rows
        before = len(producer.rows)
        producer.send(20, batch=10)
        _grow(cluster, topic, 4)
        producer.close()
        producer = Producer(cluster, topic)  # a fresh route: sends to the new queues too
        producer.send(80, batch=10)
        after = producer.rows + before_rows[before:]
        assert {r[0] for r in after} == {0, 1, 2, 3}
        expected = {(q, o, k) for q, o, k, _ in after}

        def read() -> set[tuple[int, int, str]]:
            return {(r.queue_id, r.queue_offset, r.uniq_key) for r in spark.table(name).collect()}
        wait_until(lambda: read() >= expected, timeout=QUERY_TIMEOUT_S, interval=0.5,
                   what="every message produced after the start to be read")
        rows = spark.table(name).collect()
        assert len(rows) == len(expected) and read() == expected, "read messages from before the start, or twice"
        assert query.exception() is None
    finally:
        query.stop()
        producer.close()


# -- 2. a queue joining a member with no committed offset starts at its earliest ----------------------------------

def test_queue_joining_without_committed_offset_starts_at_earliest(cluster):
    """Under ``latest``: a queue handed over by a member that stopped before committing anything, and a
    queue added to the topic while the member runs, join at or before the first offset produced after
    the query started (never at ``latest``, which would skip what was produced since)."""
    topic, group = unique("sc_join"), unique("sc_join_g")
    producer, first, second = _group_of_two(cluster, topic, group)
    try:
        s1 = first.initialOffset()
        assert s1 == {f"{BROKER}:{q}": 10 for q in range(2)}
        s2 = second.initialOffset()
        assert s2 == {}, "the first member holds every queue"
        producer.send(20, batch=10)  # offsets 10..19: after both queries started
        first.stop()  # before any batch completed: nothing processed, nothing committed by a batch
        s2 = _until_holding(second, s2, 2)
        assert all(v <= 10 for v in s2.values()), f"joined at {s2}: skips messages produced after the start"

        _grow(cluster, topic, 4)
        producer.close()
        producer = Producer(cluster, topic)
        producer.send(40, batch=10)  # reaches the new queues 2 and 3 before the member sees them
        s2 = _until_holding(second, s2, 4)
        assert s2[f"{BROKER}:2"] == 0 and s2[f"{BROKER}:3"] == 0, f"new queues joined at {s2}, not at earliest"
    finally:
        first.stop()
        second.stop()
        producer.close()


EVERY_HOUR = ";".join(str(h) for h in range(24))
# commitlog files of 64 KiB that retention deletes as soon as they are full: queues soon start above 0
RETAIN_NOTHING = (f"mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\nfileReservedTime=0\ndeleteWhen={EVERY_HOUR}\n"
                  f"cleanResourceInterval=100\n")


def test_hand_over_without_any_commit_starts_at_earliest(cluster, tmp_path):
    """A queue handed over by a member that stopped without committing anything (here a plain RocketMQ
    consumer: heartbeat, LOCK_BATCH_MQ, UNREGISTER_CLIENT) on a broker whose retention already moved
    the queue's min above 0: the stream member takes it at its earliest, not at ``latest``."""
    broker = Broker(cluster.namesrv, tmp_path / "broker", RETAIN_NOTHING, broker_name=unique("broker_ret"))
    topic, group = unique("sc_nocommit"), unique("sc_nocommit_g")
    mqs = [MessageQueue(topic, broker.name, q) for q in range(2)]
    api = SyncMQClientAPI()
    producer = None
    reader = _reader(cluster, topic, group=group, rebalanceIntervalMs="200")
    try:
        api.create_topic(broker.addr, topic, 2, 2)
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic), what=f"route of {topic}")
        producer = Producer(cluster, topic)
        wait_until(lambda: producer.send(200, batch=20) or all(api.get_min_offset(broker.addr, topic, q) > 0
                                                                 for q in range(2)),
                   timeout=30, what="retention to delete the first messages of both queues")
        plain = "127.0.0.1@plain_consumer"
        consumer = ConsumerData(group, "CONSUME_ACTIVELY", subscription_data_set=[subscription_data(topic)])
        api.heartbeat(broker.addr, HeartbeatData(plain, consumer_data_set=[consumer]))
        assert set(api.lock_batch_mq(broker.addr, group, plain, mqs)) == set(mqs)
        start = reader.initialOffset()
        assert start == {}, "the plain consumer holds both queues"
        first_new = {f"{broker.name}:{q}": api.get_max_offset(broker.addr, topic, q) for q in range(2)}
        producer.send(2, batch=1)  # after the stream started, one per queue (few: retention goes on)
        api.unlock_batch_mq(broker.addr, group, plain, mqs)
        api.unregister_client(broker.addr, plain, consumer_group=group)
        joined = _until_holding(reader, start, 2)
        assert all(joined[k] <= first_new[k] for k in joined), f"joined at {joined}, skipping from {first_new}"
    finally:
        reader.stop()
        if producer is not None:
            producer.close()
        api.close()
        broker.stop_if_running()


# -- 3. a max offset going backwards is data loss, not an empty backlog -------------------------------------------

@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_max_offset_going_backwards(cluster, fail_on_data_loss):
    """The topic is deleted and re-created under a running query: its queues start again from 0, below
    what the query has read. With failOnDataLoss the query fails naming the queue and both offsets;
    without, it restarts those queues at the broker's min and reads the new messages."""
    topic = unique("sc_back")
    create_topic(cluster, topic, 2)
    producer = Producer(cluster, topic)
    reader = _reader(cluster, topic, startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower())
    try:
        producer.send(40, batch=10)
        start = reader.initialOffset()
        end = reader.latestOffset(start, EVERYTHING)
        assert end == {f"{BROKER}:{q}": 20 for q in range(2)}
        with SyncMQClientAPI() as api:
            api.delete_topic_in_broker(cluster.broker.addr, topic)
        create_topic(cluster, topic, 2)
        producer.send(8, batch=4)  # offsets 0..3 again in each queue
        assert _max(cluster, topic, 2) == {f"{BROKER}:{q}": 4 for q in range(2)}
        if fail_on_data_loss:
            with pytest.raises(DataLossError) as failed:
                reader.latestOffset(end, EVERYTHING)
            message = str(failed.value)
            assert f"{topic}@{BROKER}:0" in message and "20" in message and "4" in message, message
            return
        restart = reader.latestOffset(end, EVERYTHING)
        assert restart == {f"{BROKER}:{q}": 0 for q in range(2)}, "restarted at the broker's min"
        assert _ranges(reader, end, restart) == {}
        following = reader.latestOffset(restart, EVERYTHING)
        assert _ranges(reader, restart, following) == {f"{BROKER}:{q}": (0, 4) for q in range(2)}
    finally:
        reader.stop()
        producer.close()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_spark_query_on_a_recreated_topic(spark, cluster, tmp_path, fail_on_data_loss):
    """The same through Spark: the query fails with the queue and both offsets in its exception, or reads
    the re-created topic's messages from its start."""
    topic = unique("sc_back_q")
    create_topic(cluster, topic, 2)
    producer = Producer(cluster, topic)
    name = unique("sc_back_t").replace("-", "_")
    df = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
          .option("startingOffsets", "earliest").option("failOnDataLoss", str(fail_on_data_loss).lower()).load())
    query = (df.select("queue_id", "queue_offset", "uniq_key").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="300 milliseconds").start())
    try:
        producer.send(40, batch=10)
        wait_until(lambda: spark.table(name).count() == 40, timeout=QUERY_TIMEOUT_S, interval=0.5,
                   what="the first 40 messages")
        before = len(producer.rows)
        with SyncMQClientAPI() as api:
            api.delete_topic_in_broker(cluster.broker.addr, topic)
        create_topic(cluster, topic, 2)
        producer.send(8, batch=4)
        if fail_on_data_loss:
            wait_until(lambda: query.exception() is not None, timeout=QUERY_TIMEOUT_S, interval=0.5,
                       what="the query to fail")
            message = str(query.exception())
            # a trigger may land between the re-creation and the sends: the max is then 0, not 4
            assert f"{topic}@{BROKER}:0" in message and re.search(r"max offset [04] is below offset 20", message), \
                message
            return
        again = {(q, o, k) for q, o, k, _ in producer.rows[before:]}
        wait_until(lambda: again <= {(r.queue_id, r.queue_offset, r.uniq_key) for r in spark.table(name).collect()},
                   timeout=QUERY_TIMEOUT_S, interval=0.5, what="the re-created topic's messages")
        assert spark.table(name).count() == 48
        assert query.exception() is None
    finally:
        query.stop()
        producer.close()


# -- 4. a broker down when the query starts ----------------------------------------------------------------------

@pytest.mark.parametrize("in_group", [False, True])
def test_broker_down_at_start_keeps_the_starting_rule(cluster, tmp_path, in_group):
    """Under ``latest`` a broker that was down when the query started comes back: its messages from
    before the start are not read (as ``latest`` would have resolved them), every one after is — by a
    plain stream and by a group member (which finds no committed offset for those queues)."""
    topic = unique("sc_down")
    other = Broker(cluster.namesrv, tmp_path / "broker-b", broker_name="broker-b")
    producer = None
    group = {"group": unique("sc_down_g"), "rebalanceIntervalMs": "200"} if in_group else {}
    reader = _reader(cluster, topic, **group)
    try:
        with SyncMQClientAPI() as api:
            for addr in (cluster.broker.addr, other.addr):
                api.create_topic(addr, topic, 2, 2)
            wait_until(lambda: len(api.get_route_info(cluster.namesrv, topic).queue_datas) == 2,
                       what="both brokers in the route")
            producer = Producer(cluster, topic)
            producer.send(80, batch=10)  # history on both brokers: 20 per queue
            history = {("broker-b", q): api.get_max_offset(other.addr, topic, q) for q in range(2)}
            assert all(v > 0 for v in history.values())
            other.stop()
            wait_until(lambda: len(api.get_route_info(cluster.namesrv, topic).queue_datas) == 1,
                       what="broker-b gone from the route")
            start = reader.initialOffset()
            assert set(start) == {f"{BROKER}:{q}" for q in range(2)}
            other.start_again()
            wait_until(lambda: len(api.get_route_info(cluster.namesrv, topic).queue_datas) == 2,
                       what="broker-b back in the route")
        producer.close()
        producer = Producer(cluster, topic)  # a fresh route: sends to both brokers again
        producer.send(80, batch=10)
        end = _until_holding(reader, start, 4)
        for (name, q), offset in history.items():
            assert end[f"{name}:{q}"] == offset, f"broker-b queue {q} joined at {end[f'{name}:{q}']}, not {offset}"
        following = reader.latestOffset(end, EVERYTHING)
        ranges = _ranges(reader, end, following)
        assert all(ranges[f"broker-b:{q}"][0] == history[("broker-b", q)] for q in range(2)), ranges
    finally:
        reader.stop()
        if producer is not None:
            producer.close()
        other.stop_if_running()


# -- 5. starting offsets are committed at the first trigger -------------------------------------------------------

def test_starting_offsets_are_committed_for_the_group(cluster):
    """The offsets a group member resolves at its first trigger are on the broker at once, so a member that
    takes its queues over before its first batch completed starts exactly there: no re-read, no skip."""
    topic, group = unique("sc_commit"), unique("sc_commit_g")
    producer, first, second = _group_of_two(cluster, topic, group)
    try:
        s1 = first.initialOffset()
        assert s1 == {f"{BROKER}:{q}": 10 for q in range(2)}
        assert _committed(cluster, topic, group, 2) == s1
        s2 = second.initialOffset()
        producer.send(20, batch=10)
        first.stop()
        s2 = _until_holding(second, s2, 2)
        assert s2 == s1, "the queues join where the first member started"
    finally:
        first.stop()
        second.stop()
        producer.close()
