"""Two Spark applications in one consumer group (``option("group", ...)``): this test's SparkSession
and ``jobs/consume.py`` in a second process split an 8-queue topic, no message is read by both,
and when this one stops the other takes its queues over from the committed offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Producer, create_topic
from servers import unique, wait_until

from spark_mq.client.sync_api import SyncMQClientAPI

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 8
BROKER = "broker-a"
REBALANCE_INTERVAL_MS = 10_000
TRIGGER = "1 second"
STARTUP_TIMEOUT_S = 180  # a second JVM starting on a busy 2-core machine
SETTLE_TIMEOUT_S = 90


class Offsets:
    """The topic's max offsets and the group's committed offsets, per queue, from the broker."""

    def __init__(self, cluster, topic: str, group: str) -> None:
        self.addr = cluster.broker.addr
        self.topic = topic
        self.group = group
        self.api = SyncMQClientAPI()

    def max(self) -> list[int]:
        return [self.api.get_max_offset(self.addr, self.topic, q) for q in range(QUEUES)]

    def committed(self) -> list[int | None]:
        return [self.api.query_consumer_offset(self.addr, self.group, self.topic, q) for q in range(QUEUES)]

    def caught_up(self) -> bool:
        return self.committed() == self.max()

    def members(self) -> list[str]:
        return self.api.get_consumer_list_by_group(self.addr, self.group)


def _rows(df) -> set[tuple[int, int, str]]:
    return {(r.queue_id, r.queue_offset, r.uniq_key) for r in df.select("queue_id", "queue_offset", "uniq_key")
            .collect()}


def _read_b(spark, path: Path) -> list[tuple[int, int, str]]:
    if not (path / "_spark_metadata").exists():
        return []
    return [(r.queue_id, r.queue_offset, r.uniq_key) for r in
            spark.read.parquet(str(path)).select("queue_id", "queue_offset", "uniq_key").collect()]


def test_two_applications_split_the_queues_and_hand_over(spark, cluster, tmp_path):
    topic = unique("spark_group")
    group = unique("spark_group_g")
    create_topic(cluster, topic, QUEUES)
    producer = Producer(cluster, topic)
    offsets = Offsets(cluster, topic, group)
    producer.send(400, batch=25)  # the producer moves to the next queue per batch: 50 per queue

    b_out = tmp_path / "b_out"
    b_log = open(tmp_path / "b.log", "w")
    app_b = subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "consume.py"), "--namesrv", cluster.namesrv, "--topic", topic,
         "--group", group, "--starting-offsets", "earliest", "--trigger", TRIGGER, "--sink", "parquet",
         "--path", str(b_out), "--checkpoint", str(tmp_path / "b_chk"),
         "--option", f"rebalanceIntervalMs={REBALANCE_INTERVAL_MS}"],
        cwd=ROOT, stdout=b_log, stderr=subprocess.STDOUT, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    query = None
    try:
        # app B alone: it holds all 8 queues and consumes the backlog
        wait_until(offsets.caught_up, timeout=STARTUP_TIMEOUT_S, interval=1.0,
                   what=f"app B to consume the backlog (log: {tmp_path / 'b.log'})")
        assert len(offsets.members()) == 1

        # app A (this process) joins: B gives up half of the queues, A takes them at the committed offsets
        df = (spark.readStream.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
              .option("group", group).option("startingOffsets", "earliest")
              .option("rebalanceIntervalMs", str(REBALANCE_INTERVAL_MS)).load())
        name = unique("group_a").replace("-", "_")
        query = (df.writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / "a_chk")).trigger(processingTime=TRIGGER).start())
        a_table = spark.table(name)
        wait_until(lambda: len(offsets.members()) == 2, timeout=60, what="both applications in the group")

        def a_holds_its_share() -> bool:
            producer.send(QUEUES * 2, batch=2)  # something in every queue, so A shows which queues it reads
            time.sleep(1.5)
            return len({q for q, _, _ in _rows(a_table)}) == QUEUES // 2
        wait_until(a_holds_its_share, timeout=SETTLE_TIMEOUT_S, interval=0.5, what="app A to take its queues")
        wait_until(offsets.caught_up, timeout=SETTLE_TIMEOUT_S, interval=1.0, what="the group to catch up")

        # split: new messages in every queue are read by exactly one of the two, half the queues each
        mark = offsets.max()
        producer.send(800, batch=25)
        wait_until(offsets.caught_up, timeout=SETTLE_TIMEOUT_S, interval=1.0, what="the split group to catch up")
        a_rows = _rows(a_table)
        b_rows = set(_read_b(spark, b_out))
        a_queues = {q for q, o, _ in a_rows if o >= mark[q]}
        b_queues = {q for q, o, _ in b_rows if o >= mark[q]}
        assert a_queues.isdisjoint(b_queues), f"queues {a_queues & b_queues} were read by both applications"
        assert len(a_queues) == len(b_queues) == QUEUES // 2
        assert a_queues | b_queues == set(range(QUEUES))

        # A stops (after its last batch was committed): A leaves the group and B takes its queues over
        # at its next rebalance (the wait allows one interval and a loaded machine's slack)
        query.stop()
        stopped = time.monotonic()
        producer.send(800, batch=25)
        wait_until(offsets.caught_up, timeout=REBALANCE_INTERVAL_MS / 1000 + 20, interval=0.2,
                   what="app B to take app A's queues over")
        print(f"hand-over: app B consumed app A's queues {time.monotonic() - stopped:.1f} s after app A stopped")
        assert len(offsets.members()) == 1

        # everything produced was read exactly once across the two applications
        expected = {(q, o, k) for q, o, k, _ in producer.rows}
        a_list = [(r.queue_id, r.queue_offset, r.uniq_key) for r in a_table.collect()]
        wait_until(lambda: len(_read_b(spark, b_out)) + len(a_list) >= len(expected), timeout=30,
                   what="app B's sink to hold its last batch")
        b_list = _read_b(spark, b_out)
        both = a_list + b_list
        assert len(both) == len(set(both)), f"{len(both) - len(set(both))} messages were read twice"
        assert set(both) == expected
        assert offsets.committed() == [sum(1 for r in producer.rows if r[0] == q) for q in range(QUEUES)]
    finally:
        if query is not None and query.isActive:
            query.stop()
        if app_b.poll() is None:
            app_b.send_signal(signal.SIGINT)  # consume.py stops its query and exits
            try:
                app_b.wait(60)
            except subprocess.TimeoutExpired:
                app_b.kill()
                app_b.wait()
        b_log.close()
        offsets.api.close()
        producer.close()


def _reader(cluster, topic: str, group: str):
    from spark_mq.spark.options import SourceOptions
    from spark_mq.spark.stream import SparkMQStreamReader

    return SparkMQStreamReader(SourceOptions.parse(
        {"namesrv": cluster.namesrv, "topic": topic, "group": group, "startingOffsets": "earliest",
         "rebalanceIntervalMs": "200"}, streaming=True))


def _ranges(reader, start: dict, end: dict) -> dict[str, tuple[int, int]]:
    ranges = [p.value for p in reader.partitions(start, end)]
    return {f"{r.broker_name}:{r.queue_id}": (r.start, r.end) for r in ranges}


def test_driver_readers_split_join_and_hand_over(cluster):
    """The reader's protocol, driven as Spark drives it (no Spark): a queue moves between members only
    through commit + unlock, joins in one batch and is read from the next, and is never in two members'
    offsets at once."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = unique("spark_group_r")
    group = unique("spark_group_rg")
    create_topic(cluster, topic, QUEUES)
    producer = Producer(cluster, topic)
    producer.send(QUEUES * 10, batch=10)
    offsets = Offsets(cluster, topic, group)
    everything = ReadAllAvailable()
    first, second = _reader(cluster, topic, group), _reader(cluster, topic, group)
    try:
        def of(offsets: dict) -> dict:  # the topic's queues in the stream offsets
            return offsets.get(topic, {})

        s1 = first.initialOffset()
        assert s1 == {topic: {f"{BROKER}:{q}": 0 for q in range(QUEUES)}}
        s2 = second.initialOffset()
        assert of(s2) == {}, "the second member must not start on queues the first one holds"

        e1 = first.latestOffset(s1, everything)  # sees two members: keeps half, unlocks the rest
        e2 = second.latestOffset(s2, everything)  # locks its half: they join at their start offsets
        assert len(of(e1)) == len(of(e2)) == QUEUES // 2 and set(of(e1)).isdisjoint(of(e2))
        assert set(of(e1).values()) == {10} and set(of(e2).values()) == {0}
        assert _ranges(second, s2, e2) == {}, "joining queues are read from the next batch on"
        s1, s2 = e1, e2
        e2 = second.latestOffset(s2, everything)
        assert _ranges(second, s2, e2) == {k: (0, 10) for k in of(e2)}
        s2 = e2
        second.latestOffset(s2, everything)  # the next trigger: the second member's batch is committed
        e1 = first.latestOffset(s1, everything)
        wait_until(offsets.caught_up, timeout=10, what="both members' commits")

        second.stop()  # unlocks its queues and leaves the group
        def first_takes_over() -> dict:
            nonlocal s1
            s1 = first.latestOffset(s1, everything)
            return len(of(s1)) == QUEUES and s1
        s1 = wait_until(first_takes_over, timeout=10, interval=0.1, what="the first member to take all queues")
        assert set(of(s1).values()) == {10}, "taken-over queues start at the committed offsets"

        # a restarted member whose checkpoint is behind what the group committed meanwhile skips ahead
        first.stop()
        producer.send(QUEUES * 10, batch=10)
        restarted = _reader(cluster, topic, group)
        try:
            # (in the un-keyed offsets of a checkpoint written before several topics: they still load)
            stale = {f"{BROKER}:{q}": 5 for q in range(QUEUES)}
            e = restarted.latestOffset(stale, everything)
            assert of(e) == {}, "queues the group committed past the checkpoint are left out of this batch"
            e = restarted.latestOffset(e, everything)
            assert set(of(e).values()) == {10}, "... and join at the committed offsets in the next one"
            e2 = restarted.latestOffset(e, everything)
            assert _ranges(restarted, e, e2) == {k: (10, 20) for k in of(e)}
        finally:
            restarted.stop()
    finally:
        first.stop()
        second.stop()
        offsets.api.close()
        producer.close()
