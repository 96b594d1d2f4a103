"""Reads across the tiers: a broker with tiering on and tiny commitlog files offloads its full files,
retention then deletes them, and the ``spark_mq`` source with ``tieredStoreRoot`` still returns every
message from the earliest (archive below each queue's hot min, broker above, the seam inside each
queue) — batch and streaming, column for column; ``jobs/replay.py`` republishes across the seam
exactly once in per-queue order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality
from conftest import create_topic, load_job
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.arrow.queues import DataLossError
from spark_mq.cli import main as cli_main
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.spark.replay import replay_frame
from spark_mq.spark.schema import SPARK_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4
MESSAGES = 480
ORDER = ["broker_name", "queue_id", "queue_offset"]
# 64 KiB commitlog files (several full ones), tiering on, and retention that deletes every archived
# file at once (the forcible-clean ratio is below any disk's usage) but never an unarchived one
TIERED_CONF = """\
mapedFileSizeCommitLog=65536
maxMessageSize=16384
tieredStoreEnable=true
diskSpaceCleanForciblyRatio=0.01
diskSpaceWarningLevelRatio=0.999
cleanResourceInterval=200
"""


class Tiered:
    def __init__(self, namesrv, broker, archive: Path, topic: str, api: SyncMQClientAPI) -> None:
        self.namesrv, self.broker, self.archive, self.topic, self.api = namesrv, broker, archive, topic, api

    def min_max(self) -> list[tuple[int, int]]:
        return [(self.api.get_min_offset(self.broker.addr, self.topic, q),
                 self.api.get_max_offset(self.broker.addr, self.topic, q)) for q in range(QUEUES)]

    def read(self, spark, **options):
        reader = spark.read.format("spark_mq").option("namesrv", self.namesrv.addr).option("topic", self.topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()


@pytest.fixture(scope="module")
def tiered(spark, tmp_path_factory):
    """A topic whose oldest messages are only in the archive; ``reference`` is every message as the
    broker served it before retention deleted the archived files."""
    root = tmp_path_factory.mktemp("tiered_reads")
    namesrv = start_namesrv(root / "namesrv.log")
    broker = Broker(namesrv.addr, root / "broker", TIERED_CONF)
    api = SyncMQClientAPI()
    try:
        cluster = type("C", (), {"namesrv": namesrv.addr, "broker": broker})
        topic = unique("tiered_reads")
        create_topic(cluster, topic, QUEUES)
        with SyncProducer(unique("tiered_pg"), ClientConfig(namesrv.addr)) as producer:
            for i in range(MESSAGES):
                producer.send(Message(topic, f"body-{i}-".encode() + bytes(range(256)) * (1 + i % 2),
                                      tags=f"t{i % 3}", keys=[f"k{i}", f"g{i % 5}"] if i % 2 else None,
                                      properties={"n": str(i)} if i % 3 else {}))
        t = Tiered(namesrv, broker, root / "archive", topic, api)
        reference = spark.createDataFrame(t.read(spark).collect(), SPARK_SCHEMA).cache()
        assert reference.count() == MESSAGES
        assert cli_main(["offload", "--namesrv", namesrv.addr, "--topic", topic, "--root", str(t.archive)]) == 0
        wait_until(lambda: all(0 < lo < hi for lo, hi in t.min_max()), timeout=30,
                   what="retention to delete the archived commitlog files (the seam inside every queue)")
        t.reference = reference
        yield t
    finally:
        api.close()
        broker.stop()
        namesrv.stop_cleanly()


def test_batch_read_from_earliest_spans_both_tiers(spark, tiered):
    both = tiered.read(spark, tieredStoreRoot=str(tiered.archive))
    assert_df_equality(both.orderBy(*ORDER), tiered.reference.orderBy(*ORDER))
    hot_only = tiered.read(spark)  # earliest = the broker's min: only the hot part
    assert hot_only.count() == sum(hi - lo for lo, hi in tiered.min_max())


def test_pruned_read_spans_both_tiers(spark, tiered):
    """A .schema(...) naming some columns (tags, outside them, still filters) reads them from the archive
    and from the broker alike."""
    pruned = (spark.read.format("spark_mq").schema("queue_offset BIGINT, body BINARY, broker_name STRING, queue_id INT")
              .option("namesrv", tiered.namesrv.addr).option("topic", tiered.topic)
              .option("tieredStoreRoot", str(tiered.archive)).option("tags", "t1 || t2").load())
    expected = tiered.reference.where("tags IN ('t1', 't2')").select(*pruned.columns)
    assert_df_equality(pruned.orderBy(*ORDER), expected.orderBy(*ORDER))


def test_offsets_below_the_hot_min_are_data_loss_only_without_the_archive(spark, tiered):
    from_zero = '{' + ", ".join(f'"broker-a:{q}": 0' for q in range(QUEUES)) + '}'
    with pytest.raises(Exception, match="below the broker's min offset") as info:
        tiered.read(spark, startingOffsets=from_zero).count()
    assert isinstance(info.value, DataLossError) or "failOnDataLoss" in str(info.value)
    assert tiered.read(spark, startingOffsets=from_zero, tieredStoreRoot=str(tiered.archive)).count() == MESSAGES
    tags = tiered.read(spark, tieredStoreRoot=str(tiered.archive), tags="t1").orderBy(*ORDER)
    assert_df_equality(tags, tiered.reference.where("tags = 't1'").orderBy(*ORDER))


def test_streaming_read_from_earliest_spans_both_tiers(spark, tiered, tmp_path):
    df = (spark.readStream.format("spark_mq").option("namesrv", tiered.namesrv.addr).option("topic", tiered.topic)
          .option("startingOffsets", "earliest").option("tieredStoreRoot", str(tiered.archive))
          .option("maxMessagesPerTrigger", "200").load())
    query = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    out = spark.read.schema(SPARK_SCHEMA).parquet(str(tmp_path / "out"))
    assert_df_equality(out.orderBy(*ORDER), tiered.reference.orderBy(*ORDER))


def test_replay_republishes_across_the_seam_once_in_queue_order(spark, tiered):
    target = unique("tiered_replay")
    create_topic(type("C", (), {"namesrv": tiered.namesrv.addr, "broker": tiered.broker}), target, QUEUES)
    run = subprocess.run([sys.executable, str(ROOT / "jobs" / "replay.py"), "--namesrv", tiered.namesrv.addr,
                          "--topic", tiered.topic, "--root", str(tiered.archive), "--to-topic", target],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"done: {MESSAGES} messages into topic {target}" in run.stdout
    replayed = (spark.read.format("spark_mq").option("namesrv", tiered.namesrv.addr).option("topic", target).load()
                .selectExpr("queue_id", "queue_offset", "properties['ORIGIN_MESSAGE_ID'] AS origin",
                            "properties['REPLAY_ORIGIN'] AS replay_origin", "body", "properties['n'] AS n")
                .collect())
    originals = {r.uniq_key: r for r in tiered.reference.collect()}
    assert len(replayed) == MESSAGES and {r.origin for r in replayed} == set(originals)
    for r in replayed:
        source = originals[r.origin]
        assert (r.body, r.n) == (source.body, source.properties.get("n"))
        assert r.queue_id == source.queue_id  # same queue id in a topic of as many queues
    for q in range(QUEUES):  # per source queue, the target queue holds the messages in their order
        in_queue = sorted((r for r in replayed if r.queue_id == q), key=lambda r: r.queue_offset)
        source_offsets = [int(r.replay_origin.rsplit(":", 1)[1]) for r in in_queue]
        assert source_offsets == sorted(source_offsets) == list(range(len(in_queue)))


def test_replay_of_a_time_window_across_the_seam(spark, tiered, tmp_path):
    """The job's own parsing and parquet sink, on the shared session (the job's ``main``, its session and exit,
    runs end to end in the republishing test above)."""
    job = load_job("replay")
    times = sorted(r.store_timestamp for r in tiered.reference.select("store_timestamp").collect())
    start, stop = times[len(times) // 5], times[len(times) * 4 // 5]  # the window crosses the seam
    args = job.parse_args(["--namesrv", tiered.namesrv.addr, "--topic", tiered.topic, "--root", str(tiered.archive),
                           "--from-time", start.isoformat(), "--to-time", stop.isoformat(), "--sink", "parquet",
                           "--path", str(tmp_path / "w")])
    written = job.write_sink(replay_frame(spark, job.spec_of(args)), args.sink, args.path, args.rows)
    got = spark.read.parquet(str(tmp_path / "w")).select(*SPARK_SCHEMA.names)  # partition columns come last
    expected = tiered.reference.where((tiered.reference.store_timestamp >= start)
                                      & (tiered.reference.store_timestamp < stop))
    assert written == expected.count() > 0
    assert_df_equality(got.orderBy(*ORDER), expected.orderBy(*ORDER))
