"""Options parsing and offset resolution of the spark_mq source, without Spark or servers (a fake broker)."""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from spark_mq.arrow.queues import DataLossError, TopicQueues
from spark_mq.arrow.range_reader import QueueRange
from spark_mq.common.errors import ConfigError
from spark_mq.spark import options as o
from spark_mq.spark.offset_reader import check_start, resolve_ending, resolve_starting
from spark_mq.spark.offsets import decode_offsets, decode_topic_offsets, encode_offsets, topic_offsets_obj
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.partitions import plan_ranges, split_range, spread, to_partitions
from spark_mq.tiered.tiers import ArchiveRange, TieredOffsets, split_tiers

BASE = {"namesrv": "127.0.0.1:9876", "topic": "t"}
QUEUES = TopicQueues("t", {"a": "10.0.0.1:10911", "b": "10.0.0.2:10911"}, (("a", 0), ("a", 1), ("b", 0)))


class FakeBroker:
    def __init__(self, mins, maxs, committed=None, by_time=None):
        self.mins, self.maxs, self.committed, self.by_time = mins, maxs, committed or {}, by_time or {}

    def min_offset(self, key):
        return self.mins[key]

    def max_offset(self, key):
        return self.maxs[key]

    def committed_offset(self, group, key):
        return self.committed.get(key)

    def offset_by_timestamp(self, key, ts):
        return self.by_time[key]


BROKER = FakeBroker({("a", 0): 5, ("a", 1): 0, ("b", 0): 0}, {("a", 0): 50, ("a", 1): 7, ("b", 0): 0})


def parse(**options):
    return SourceOptions.parse({**BASE, **options})


def test_defaults_and_case_insensitive_keys():
    opts = SourceOptions.parse({"NAMESRV": "h:1;h:2", "Topic": "t", "maxmessagesperpartition": "10",
                                "FAILONDATALOSS": "False", "pullbatchsize": "7", "tags": "x || y"})
    assert opts.namesrv_addrs == ["h:1", "h:2"]
    assert (opts.max_messages_per_partition, opts.fail_on_data_loss, opts.pull_batch_size) == (10, False, 7)
    assert (opts.starting, opts.ending, opts.tags, opts.group) == (o.EARLIEST, o.LATEST, "x || y", None)
    assert SourceOptions.parse(BASE, streaming=True).starting == o.LATEST
    assert (opts.rebalance_interval_ms, opts.tiered_store_root, opts.group_member) == (20_000, None, False)
    assert SourceOptions.parse({**BASE, "group": "g"}).group_member
    assert not SourceOptions.parse({**BASE, "group": "g", "commitToBroker": "false"}).group_member
    assert (opts.sql_filter, opts.property_columns, opts.pull_sql) == (None, (), None)
    assert len(set(o.ALL_OPTIONS)) == 30  # 24, the account (2) and TLS (4)


@pytest.mark.parametrize(("options", "message"), [
    ({"namesrv": ""}, "option 'namesrv' is required"),
    ({"namesrv": "nohostport"}, "is not host:port"),
    ({"failOnDataLoss": "maybe"}, "must be true or false"),
    ({"allocateStrategy": "random"}, "unknown strategy 'random'"),
    ({"startingOffsets": "latest"}, "empty batch read"),
    ({"startingOffsets": "sometime"}, "must be earliest, latest, committed or JSON"),
    ({"startingOffsets": '{"a:0": -1}'}, "-1 \\(latest\\) is not allowed"),
    ({"startingOffsets": '{"a:0": -3}'}, "must be an integer >= 0"),
    ({"startingOffsets": "[1]"}, "must be a JSON object"),
    ({"endingOffsets": '{"a:0": -2}'}, "-2 \\(earliest\\) is not allowed"),
    ({"endingOffsets": "earliest"}, "must be latest or JSON"),
    ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "not both"),
    ({"startingTimestamp": "yesterday"}, "'startingTimestamp' must be an integer"),
    ({"maxMessagesPerTrigger": "-4"}, ">= 1, got -4"),
    # a SQL92 filter RocketMQ's brokers would refuse is refused up front, with where
    ({"sqlFilter": "num >= 5 AND"}, "option 'sqlFilter': .* was expecting .* at line 1, column 13"),
    # several topics, windows by time, partitions and stream-only options
    ({"topic": ""}, "option 'topic' is required: .* or else option 'topicPattern'"),
    ({"topicPattern": "t.*"}, "give option 'topic' or option 'topicPattern', not both"),
    ({"topic": " , "}, "names no topic"),
    ({"topic": "a,b c"}, "option 'topic': topic 'b c' has illegal characters"),
    ({"topic": "", "topicPattern": "t[("}, "is not a regular expression"),
    ({"topic": "a,b", "startingOffsets": '{"a:0": 1}'}, "names no topic, and this read has several topics"),
    ({"topic": "", "topicPattern": "a|b", "endingOffsets": '{"a:0": 1}'}, "names no topic"),
    ({"topic": "a,b", "startingOffsets": '{"c": {"a:0": 1}}'}, "names topic 'c', which is not in option 'topic'"),
    ({"topic": "", "topicPattern": "a|b", "startingOffsets": '{"ab": {"a:0": 1}}'},
     "names topic 'ab', which topicPattern 'a\\|b' does not match"),
    ({"startingOffsets": '{"t": {"a:0": 1}, "a:1": 2}'}, "mixes topics and queues"),
    ({"startingOffsets": '{"t": {"a:0": -1}}'}, "-1 \\(latest\\) is not allowed"),
    ({"startingOffsetsByTimestamp": '{"t": {"a:0": -2}}'}, "must be a timestamp in ms"),
    ({"startingOffsetsByTimestamp": '{"a:0": 5}', "startingTimestamp": "5"}, "goes with startingOffsets=earliest"),
    ({"startingOffsetsByTimestamp": '{"a:0": 5}', "startingOffsets": '{"a:0": 5}'}, "goes with startingOffsets"),
    ({"endingOffsetsByTimestamp": "soon"}, "is not valid JSON"),
    ({"endingOffsets": '{"a:0": 5}', "endingTimestamp": "5"}, "give one of endingOffsets, endingTimestamp"),
    ({"endingOffsetsByTimestamp": '{"a:0": 5}', "endingTimestamp": "5"}, "give one of endingOffsetsByTimestamp"),
    ({"endingTimestamp": "-1"}, "'endingTimestamp' must be an integer >= 0"),
    ({"group": "g", "startingOffsets": "committed", "startingTimestamp": "9", "endingTimestamp": "5"},
     "startingTimestamp \\(9\\) is after endingTimestamp \\(5\\)"),
    ({"minPartitions": "0"}, "'minPartitions' must be an integer >= 1"),
    ({"minMessagesPerTrigger": "5"}, "'minMessagesPerTrigger' is for streaming reads only"),
    ({"maxTriggerDelay": "5s"}, "only bounds how long 'minMessagesPerTrigger' holds"),
    ({"group": "../etc"}, "option 'group': group '../etc' has illegal characters"),
])
def test_bad_options(options, message):
    with pytest.raises(ConfigError, match=message):
        parse(**options)


@pytest.mark.parametrize(("options", "message"), [
    ({"endingTimestamp": "5"}, "'endingTimestamp' is for batch reads only"),
    ({"endingOffsetsByTimestamp": '{"a:0": 5}'}, "'endingOffsetsByTimestamp' is for batch reads only"),
    ({"minMessagesPerTrigger": "5", "maxTriggerDelay": "soon"}, "must be a duration like 500ms"),
    ({"minMessagesPerTrigger": "0"}, "'minMessagesPerTrigger' must be an integer >= 1"),
    ({"minMessagesPerTrigger": "50", "maxMessagesPerTrigger": "10"}, "is above maxMessagesPerTrigger"),
])
def test_bad_stream_read_limits(options, message):
    with pytest.raises(ConfigError, match=message):
        SourceOptions.parse({**BASE, **options}, streaming=True)


def test_topics_pattern_windows_and_limits_parse():
    opts = parse(topic=" a ,b,a", startingOffsets='{"a": {"x:0": 4}}', endingTimestamp="99", minPartitions="8")
    assert (opts.topics, opts.topic_pattern, opts.single_topic, opts.subject) == (("a", "b"), None, None, "topics a, b")
    assert (opts.starting, opts.ending_timestamp, opts.min_partitions) == ({"a": {("x", 0): 4}}, 99, 8)
    opts = parse(topic="", topicPattern="orders-.*", startingOffsetsByTimestamp='{"orders-eu": {"x:1": 7}}')
    assert (opts.topics, opts.topic_pattern, opts.subject) == ((), "orders-.*", "topics matching 'orders-.*'")
    assert (opts.starting, opts.starting_by_timestamp) == (o.EARLIEST, {"orders-eu": {("x", 1): 7}})
    assert parse(endingOffsetsByTimestamp='{"a:0": 5}').ending_by_timestamp == {"t": {("a", 0): 5}}
    stream = SourceOptions.parse({**BASE, "minMessagesPerTrigger": "5", "maxTriggerDelay": "2m"}, streaming=True)
    assert (stream.min_messages_per_trigger, stream.max_trigger_delay_ms) == (5, 120_000)
    assert SourceOptions.parse({**BASE, "minMessagesPerTrigger": "5"}, streaming=True).max_trigger_delay_ms == 900_000
    assert SourceOptions.parse({**BASE, "minMessagesPerTrigger": "5", "maxTriggerDelay": "250"},
                               streaming=True).max_trigger_delay_ms == 250


def test_topic_offsets_json_round_trip_and_the_older_form():
    offsets = {"b": {("broker-b", 1): 3, ("broker-a", 10): -2}, "a": {("host:with:colons", 2): 0}, "c": {}}
    obj = topic_offsets_obj(offsets)
    assert list(obj) == ["a", "b", "c"] and list(obj["b"]) == ["broker-a:10", "broker-b:1"]
    assert decode_topic_offsets(json.dumps(obj), "x", None) == offsets
    assert decode_topic_offsets('{"q:1": 5}', "x", "only") == {"only": {("q", 1): 5}}
    assert decode_topic_offsets("{}", "x", None) == {}


def test_resolve_by_timestamp_per_topic_and_queue():
    broker = FakeBroker(BROKER.mins, BROKER.maxs, by_time={("a", 0): 9, ("a", 1): 3, ("b", 0): 0})
    opts = parse(startingOffsetsByTimestamp='{"t": {"a:1": 1000}}', endingTimestamp="2000")
    start = resolve_starting(broker, QUEUES, opts)
    assert start == {("a", 0): 5, ("a", 1): 3, ("b", 0): 0}  # a:0 and b:0 left out: earliest
    assert resolve_ending(broker, QUEUES, opts, start) == {("a", 0): 9, ("a", 1): 3, ("b", 0): 0}
    other = TopicQueues("u", QUEUES.brokers, QUEUES.queues)
    opts = parse(topic="t,u", startingOffsets='{"u": {"a:0": 6}}')
    assert resolve_starting(BROKER, QUEUES, opts) == {("a", 0): 5, ("a", 1): 0, ("b", 0): 0}
    assert resolve_starting(BROKER, other, opts) == {("a", 0): 6, ("a", 1): 0, ("b", 0): 0}


def test_spread_cuts_ranges_to_at_least_min_partitions():
    def ranges(*sizes):
        return [QueueRange("t", "a", "h:1", q, 100, 100 + n, "*", "g", 10, True) for q, n in enumerate(sizes)]

    def cut(parts):
        return [(p.queue_id, p.start, p.end) for p in parts]

    assert cut(spread(ranges(10, 10), 2)) == [(0, 100, 110), (1, 100, 110)]
    assert cut(spread(ranges(30, 10), 4)) == [(0, 100, 110), (0, 110, 120), (0, 120, 130), (1, 100, 110)]
    assert len(spread(ranges(1, 1, 2), 10)) == 4, "no piece smaller than one message"
    for sizes, want in (((7, 100, 3), 11), ((5,), 5), ((50, 50, 1), 7)):
        parts = spread(ranges(*sizes), want)
        assert len(parts) >= want
        for q, n in enumerate(sizes):  # each range's pieces are consecutive and cover it exactly
            mine = [(p.start, p.end) for p in parts if p.queue_id == q]
            assert mine[0][0] == 100 and mine[-1][1] == 100 + n
            assert all(lo < hi for lo, hi in mine) and all(x[1] == y[0] for x, y in itertools.pairwise(mine))


def test_offsets_json_round_trip():
    offsets = {("broker-b", 1): 3, ("broker-a", 10): -2, ("host:with:colons", 2): 0}
    text = encode_offsets(offsets)
    assert text.index("broker-a:10") < text.index("broker-b:1")
    assert decode_offsets(text) == offsets


def test_resolve_earliest_latest_and_json():
    assert resolve_starting(BROKER, QUEUES, parse()) == {("a", 0): 5, ("a", 1): 0, ("b", 0): 0}
    opts = parse(startingOffsets='{"a:0": 7, "a:1": -2}', endingOffsets='{"a:0": 9, "a:1": -1}')
    start = resolve_starting(BROKER, QUEUES, opts)
    assert start == {("a", 0): 7, ("a", 1): 0, ("b", 0): 0}
    assert resolve_ending(BROKER, QUEUES, opts, start) == {("a", 0): 9, ("a", 1): 7, ("b", 0): 0}


def test_resolve_committed_falls_back_to_timestamp_then_earliest():
    broker = FakeBroker(BROKER.mins, BROKER.maxs, committed={("a", 0): 20},
                        by_time={("a", 0): 9, ("a", 1): 3, ("b", 0): 0})
    opts = parse(group="g", startingOffsets="committed")
    assert resolve_starting(broker, QUEUES, opts) == {("a", 0): 20, ("a", 1): 0, ("b", 0): 0}
    opts = parse(group="g", startingOffsets="committed", startingTimestamp="1000")
    assert resolve_starting(broker, QUEUES, opts) == {("a", 0): 20, ("a", 1): 3, ("b", 0): 0}
    assert resolve_starting(broker, QUEUES, parse(startingTimestamp="1000"))[("a", 1)] == 3


def test_start_below_broker_min_fails_or_skips_ahead(caplog):
    opts = parse(startingOffsets='{"a:0": 2}')
    with pytest.raises(DataLossError, match=r"queue t@a:0: requested offset 2 is below the broker's min offset 5"):
        resolve_starting(BROKER, QUEUES, opts)
    with caplog.at_level(logging.WARNING):
        start = resolve_starting(BROKER, QUEUES, parse(startingOffsets='{"a:0": 2}', failOnDataLoss="false"))
    assert start[("a", 0)] == 5
    assert "skipping ahead" in caplog.text
    assert check_start("t", ("a", 0), 6, 5, True) == 6


def test_ending_past_max_or_before_start_or_unknown_queue():
    opts = parse(endingOffsets='{"a:1": 8}')
    with pytest.raises(ConfigError, match="t@a:1 is 8, past its max offset 7"):
        resolve_ending(BROKER, QUEUES, opts, resolve_starting(BROKER, QUEUES, opts))
    opts = parse(startingOffsets='{"a:0": 30}', endingOffsets='{"a:0": 20}')
    with pytest.raises(ConfigError, match="before its starting offset 30"):
        resolve_ending(BROKER, QUEUES, opts, resolve_starting(BROKER, QUEUES, opts))
    with pytest.raises(ConfigError, match="names queue\\(s\\) c:0"):
        resolve_starting(BROKER, QUEUES, parse(startingOffsets='{"c:0": 1}'))


def test_partitions_split_ranges_and_pickle():
    import pickle

    assert split_range(3, 10, 4) == [(3, 7), (7, 10)]
    assert split_range(5, 5, 4) == []
    opts = parse(maxMessagesPerPartition="20", tags="x")
    parts = plan_ranges(opts, QUEUES, {("a", 0): 5, ("a", 1): 0, ("b", 0): 0},
                        {("a", 0): 50, ("a", 1): 7, ("b", 0): 0}, BROKER)
    planned = to_partitions(opts, parts)
    assert [(p.broker_name, p.queue_id, p.start, p.end) for p in parts] == [
        ("a", 0, 5, 25), ("a", 0, 25, 45), ("a", 0, 45, 50), ("a", 1, 0, 7)]
    assert all(isinstance(p, QueueRange) and p.broker_addr == "10.0.0.1:10911" and p.tags == "x" for p in parts)
    assert [p.value for p in pickle.loads(pickle.dumps(planned))] == parts


def test_ranges_below_the_hot_min_are_planned_from_the_archive():
    import pickle

    assert split_tiers(0, 10, 4) == ((0, 4), (4, 10))
    assert split_tiers(5, 10, 4) == (None, (5, 10))
    assert split_tiers(0, 3, 4) == ((0, 3), None)
    hot = FakeBroker({("a", 0): 30, ("a", 1): 0, ("b", 0): 0}, {})
    hot.api, hot.queues = None, QUEUES
    opts = parse(maxMessagesPerPartition="20", tieredStoreRoot="/archive")
    parts = plan_ranges(opts, QUEUES, {("a", 0): 5, ("a", 1): 0, ("b", 0): 0},
                        {("a", 0): 50, ("a", 1): 7, ("b", 0): 0}, TieredOffsets(hot, "/archive"))
    planned = to_partitions(opts, parts)
    assert [(type(p).__name__, p.queue_id, p.start, p.end) for p in parts] == [
        ("ArchiveRange", 0, 5, 25), ("ArchiveRange", 0, 25, 30), ("QueueRange", 0, 30, 50), ("QueueRange", 1, 0, 7)]
    assert all(p.root == "/archive" for p in parts if isinstance(p, ArchiveRange))
    assert [p.value for p in pickle.loads(pickle.dumps(planned))] == parts


LOOKUP = """
import io, struct
from pyspark.sql.worker.lookup_data_sources import _main
out = io.BytesIO()
_main(io.BytesIO(), out)
data = out.getvalue()
count, = struct.unpack(">i", data[:4])
names, pos = [], 4
for _ in range(count):
    n, = struct.unpack(">i", data[pos:pos + 4])
    names.append(data[pos + 4:pos + 4 + n].decode())
    pos += 4 + n
    n, = struct.unpack(">i", data[pos:pos + 4])
    pos += 4 + n
print(" ".join(names))
"""


def test_pyspark_lookup_finds_default_source_from_any_cwd(tmp_path):
    """PySpark's own lookup (pkgutil.iter_modules over ``pyspark_*`` modules, then ``DefaultSource``),
    run outside the repo: passes only if the install itself exposes ``pyspark_spark_mq`` (a wheel,
    or an editable install in compat mode; setuptools' default editable finder hides it)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", LOOKUP], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "spark_mq" in out.stdout.split(), (
        f"pyspark's data source lookup did not find pyspark_spark_mq outside the repo (found {out.stdout!r}): "
        f"reinstall with `pip install -e . --config-settings editable_mode=compat` (or a non-editable install)")
