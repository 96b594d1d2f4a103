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
READER_REBALANCE_INTERVAL_S = 0.2  # of the readers driven without Spark


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
         "rebalanceIntervalMs": str(int(READER_REBALANCE_INTERVAL_S * 1000))}, streaming=True))


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




class _TwoMembers:
    """Two stream readers of one group on an 8-queue topic with 10 messages a queue; the first reads every
    queue and commits that (``s1``: its offsets) before the second starts."""

    def __init__(self, cluster, name: str) -> None:
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        self.topic, group = unique(name), unique(f"{name}_g")
        create_topic(cluster, self.topic, QUEUES)
        self.producer = Producer(cluster, self.topic)
        self.producer.send(QUEUES * 10, batch=10)
        self.offsets = Offsets(cluster, self.topic, group)
        self.everything = ReadAllAvailable()
        self.first, self.second = _reader(cluster, self.topic, group), _reader(cluster, self.topic, group)
        self.s1: dict = {}

    def first_reads_everything(self) -> None:
        s1 = self.first.initialOffset()
        s1 = self.first.latestOffset(s1, self.everything)  # its first batch: every queue to 10 ...
        self.s1 = self.first.latestOffset(s1, self.everything)  # ... committed at its next trigger
        assert self.offsets.committed() == [10] * QUEUES

    def first_gives_up_half(self) -> None:
        """Trigger the first member until it has given up half of the queues (told of the second)."""
        def half() -> bool:
            self.s1 = self.first.latestOffset(self.s1, self.everything)
            return len(self.s1.get(self.topic, {})) == QUEUES // 2
        wait_until(half, timeout=10, interval=0.1, what="the first member to give up half of the queues")

    def handed_over_at(self, offset: int) -> dict:
        """The stream offsets of the queues the first member gave up, all at ``offset``."""
        keys = (f"{BROKER}:{q}" for q in range(QUEUES))
        return {self.topic: {k: offset for k in keys if k not in self.s1[self.topic]}}

    def close(self) -> None:
        self.first.stop()
        self.second.stop()
        self.offsets.api.close()
        self.producer.close()


def test_first_batch_of_a_member_joining_a_running_group_reads_nothing_twice(cluster):
    """The race seen once under load, in the order Spark drives a query's first trigger: it asks for the
    initial offset, then for the latest offset from it, and again for the initial offset to plan that first
    batch (``MicroBatchExecution.runBatch``). The member already in the group hands half of the queues over
    between the two asks. The batch is planned from the start its end was worked out from, and the queues
    handed over are read from the group's committed offsets: nothing is read twice."""
    members = _TwoMembers(cluster, "spark_group_first")
    second, everything, topic = members.second, members.everything, members.topic
    try:
        members.first_reads_everything()
        s2 = second.initialOffset()  # joins the group; the first member holds every queue
        e2 = second.latestOffset(s2, everything)
        assert s2 == e2 == {topic: {}}
        members.first_gives_up_half()
        assert second.initialOffset() == s2, "the first batch starts where its end was worked out from"
        assert _ranges(second, s2, e2) == {}
        second.commit(e2)

        e3 = second.latestOffset(e2, everything)  # takes the queues given up
        assert e3 == members.handed_over_at(10), "taken over at the committed offsets"
        members.producer.send(QUEUES * 10, batch=10)
        assert _ranges(second, e3, second.latestOffset(e3, everything)) == {k: (10, 20) for k in e3[topic]}
        assert members.offsets.committed() == [10] * QUEUES
    finally:
        members.close()


def test_queues_handed_over_while_a_member_locks_its_first_queues_start_at_the_committed_offsets(cluster):
    """The same race inside the first ask for the initial offset: the second member has joined the group
    (heartbeat) and the first, told of it, commits and gives up half of the queues before the second locks
    them. The second starts them at the group's committed offsets (not at its ``startingOffsets=earliest``,
    which would read again what the first read), and the committed offsets stay there."""
    members = _TwoMembers(cluster, "spark_group_race")
    try:
        members.first_reads_everything()
        members.second._group_member()  # the second joins the group as its initialOffset does, up to its locks
        members.first_gives_up_half()
        assert members.second.initialOffset() == members.handed_over_at(10), \
            "queues handed over start at the group's committed offsets"
        assert members.offsets.committed() == [10] * QUEUES
    finally:
        members.close()


def test_a_queue_whose_commit_failed_is_not_handed_over(cluster):
    """The first member's commits fail (a request lost or timed out on a loaded machine) at the trigger where it
    would give half of the queues to the second: it keeps them and reads on until a commit goes through, and only
    then hands them over, so the second starts where the first read up to and reads nothing twice."""
    from spark_mq.common.errors import RemotingError

    members = _TwoMembers(cluster, "spark_group_uncommitted")
    first, second, everything, topic = members.first, members.second, members.everything, members.topic
    try:
        members.first_reads_everything()
        members.producer.send(QUEUES * 10, batch=10)
        members.s1 = first.latestOffset(members.s1, everything)  # a batch to 20 in every queue
        api = first._client()

        def lost(*args, **kwargs) -> None:
            raise RemotingError("request timed out")
        api.update_consumer_offset = lost
        s2 = second.initialOffset()  # joins the group (the first holds every queue)
        time.sleep(2 * READER_REBALANCE_INTERVAL_S)  # the first's next trigger computes its allocation again
        assert first.latestOffset(members.s1, everything) == members.s1, "the first member keeps every queue"
        assert second.latestOffset(s2, everything) == s2 == {topic: {}}
        assert members.offsets.committed() == [10] * QUEUES
        del api.update_consumer_offset  # commits go through again
        members.first_gives_up_half()
        assert members.offsets.committed() == [20] * QUEUES

        def second_takes_over() -> dict:
            nonlocal s2
            s2 = second.latestOffset(s2, everything)
            return bool(s2[topic]) and s2
        assert wait_until(second_takes_over, timeout=10, interval=0.1, what="the second member to take its queues") \
            == members.handed_over_at(20), "taken over where the first read up to"
    finally:
        members.close()
