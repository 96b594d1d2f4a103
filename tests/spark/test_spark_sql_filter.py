"""Option ``sqlFilter`` and the pushdown of ``property.<name>`` filters of ``spark.read`` / ``readStream``,
against a real NameServer and a broker with ``enablePropertyFilter=true``: the rows are exactly those the
same predicate, evaluated in Python over every message sent, selects; the broker delivers only those
(its Prometheus ``spark_mq_messages_out`` of the topic); a stream's offsets pass over filtered-out
messages. A bad expression fails at ``load()`` with its position, a broker without
``enablePropertyFilter`` fails the read on the driver with what to change."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
from conftest import create_topic
from prometheus_client.parser import text_string_to_metric_families
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, StringStartsWith
from servers import Broker, start_namesrv, unique, wait_until

from spark_mq.arrow.decoder import decode_units_to_arrow
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import Message, MessageBatch, pack_host
from spark_mq.common.unit.encode import encode_batch
from spark_mq.filter.evaluate import Sql92Filter
from spark_mq.filter.sql92 import parse
from spark_mq.spark.options import SourceOptions
from spark_mq.spark.pushdown import push_filters
from spark_mq.spark.sql_filter import matching_rows

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
QUEUES = 4
MESSAGES = 1200
COLOURS = ("red", "green", "blue", "grey")
TAGS = ("tagA", "tagB", "tagC")
# 3 clauses, as the benchmark's; `a` is missing on every 9th message and not a number on every 11th
EXPRESSION = "a >= 10 AND a < 60 AND b IN ('red', 'blue')"


def props_of(i: int) -> dict[str, str]:
    props = {"b": COLOURS[i % 4], "region": ("eu", "us", "apac")[i % 3]}
    if i % 9:
        props["a"] = "x" if i % 11 == 0 else str(i % 100)
    return props


def expected(props: dict[str, str]) -> bool:
    """EXPRESSION as RocketMQ evaluates it: a missing `a` or `b` is null, a non-integer `a` an error (neither is
    delivered)."""
    a = props.get("a")
    if a is None or not a.lstrip("+-").isdigit():
        return False
    return 10 <= int(a) < 60 and props.get("b") in ("red", "blue")


@dataclass
class FilterCluster:
    namesrv: str
    broker: Broker
    topic: str
    sent: dict[tuple[int, int], tuple[bytes, str | None, dict[str, str]]]  # (queue, offset) -> body, tag, props


@pytest.fixture(scope="module")
def filtering(tmp_path_factory) -> FilterCluster:
    root = tmp_path_factory.mktemp("sql_filter")
    namesrv = start_namesrv(root / "namesrv.log", verbose=False)
    broker = Broker(namesrv.addr, root / "broker", "enablePropertyFilter=true\n", metrics=True)
    try:
        topic = unique("sqlfilter")
        create_topic(_Cluster(namesrv.addr, broker), topic, QUEUES)
        yield FilterCluster(namesrv.addr, broker, topic, send(namesrv.addr, topic, range(MESSAGES)))
    finally:
        broker.stop()
        namesrv.stop_cleanly()


@dataclass
class _Cluster:  # what conftest.create_topic reads
    namesrv: str
    broker: Broker


def send(namesrv: str, topic: str, indexes, props=props_of) -> dict:
    sent = {}
    with SyncProducer(unique("sqlfilter_pg"), ClientConfig(namesrv)) as producer:
        for i in indexes:
            tag = TAGS[i % 3] if i % 7 else None
            result = producer.send(Message(topic, f"m-{i}".encode(), tags=tag, properties=props(i)))
            sent[(result.queue_id, result.queue_offset)] = (f"m-{i}".encode(), tag, props(i))
    return sent


def _messages_out(broker: Broker, topic: str) -> float:
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "spark_mq_messages_out_total" and s.labels.get("topic") == topic)


def _reader(spark, c: FilterCluster, **options):
    reader = spark.read.format("spark_mq").option("namesrv", c.namesrv).option("topic", c.topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def _keys(rows) -> set[tuple[int, int]]:
    return {(r.queue_id, r.queue_offset) for r in rows}


# -- options and pushdown, no Spark -------------------------------------------------------------------------------


def test_a_bad_expression_is_refused_with_its_position():
    with pytest.raises(ConfigError, match=r"option 'sqlFilter': .* at line 1, column 10"):
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "sqlFilter": "a > 5 AND"})
    with pytest.raises(ConfigError, match=r"'NULL' cannot be compared .* at line 1, column 3"):
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "sqlFilter": "a = NULL"})


def test_the_pulls_carry_the_tags_and_the_filter_in_one_expression():
    opts = SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "sqlFilter": "a > 5 -- why\n OR c = 1",
                                "tags": "tagB || tagA"})
    assert opts.pull_sql == "(TAGS IN ('tagA', 'tagB')\n) AND (a > 5 -- why\n OR c = 1\n)"
    parse(opts.pull_sql)
    sub = opts.subscription("t")
    assert (sub.expression_type, sub.sub_string) == ("SQL92", opts.pull_sql)
    assert SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t"}).pull_sql is None


def test_property_columns_must_be_names_sql92_can_say():
    with pytest.raises(ConfigError, match=r"'a-b', 'IN' cannot be named"):
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "propertyColumns": "region, a-b, IN"})
    with pytest.raises(ConfigError, match="names region more than once"):
        SourceOptions.parse({"namesrv": "127.0.0.1:9876", "topic": "t", "propertyColumns": "region,region"})


def test_property_filters_become_sql92_clauses_and_the_rest_stays_with_spark():
    filters = [EqualTo(("property", "region"), "eu"), In(("property", "b"), ("red", "o'k")),
               IsNotNull(("property", "a")), StringStartsWith(("property", "region"), "e"),
               GreaterThan(("property", "a"), "5"),  # a string ordering: Spark's, not SQL92's
               EqualTo(("property", "other"), "x"),  # not a property column
               StringStartsWith(("property", "b"), "")]  # RocketMQ answers FALSE for an empty search
    pushed, kept = push_filters(filters, ("region", "a", "b"))
    assert pushed.sql == ("(region = 'eu'\n) AND (b IN ('o''k', 'red')\n) AND (a IS NOT NULL\n) AND "
                          "(region STARTSWITH 'e'\n)")
    assert kept == filters[4:]


def test_rows_read_without_a_pull_are_judged_as_the_broker_judges_units():
    """The archive and key-index paths evaluate sqlFilter over decoded rows (``properties`` map): the same
    rows as the broker's judgement of the same stored units, names given twice and odd values included."""
    props = [props_of(i) for i in range(300)] + [{"a": "20", "b": "red", "x": "1"}, {"b": "blue"}, {"a": "+30"}]
    msgs = [Message("T", b"%d" % i, tags=TAGS[i % 3], properties=p) for i, p in enumerate(props)]
    data = bytes(encode_batch(MessageBatch.from_messages(msgs, 0), 0, 0, 1, pack_host("127.0.0.1", 1)).data)
    rows = decode_units_to_arrow(data, broker_name="b")
    for text in (EXPRESSION, "a = 20 OR TAGS = 'tagB'", "region STARTSWITH 'e' AND NOT (b IN ('red'))"):
        kept = pa.Table.from_batches(list(matching_rows([rows], text)), schema=rows.schema)
        offsets = rows.column("commitlog_offset").to_numpy()
        starts = offsets - offsets[0]
        sizes = np.diff(np.append(starts, len(data)))
        by_broker = Sql92Filter.compile(text).match_units(data, sizes)
        assert kept.column("body").to_pylist() == [b"%d" % i for i in np.flatnonzero(by_broker)], text
    assert [b"%d" % i for i, p in enumerate(props) if expected(p)] == \
        pa.Table.from_batches(list(matching_rows([rows], EXPRESSION))).column("body").to_pylist()


# -- against the broker ---------------------------------------------------------------------------------------------


def test_sql_filter_reads_exactly_the_matching_messages(spark, filtering):
    c = filtering
    before = _messages_out(c.broker, c.topic)
    rows = _reader(spark, c, sqlFilter=EXPRESSION).load().collect()
    delivered = _messages_out(c.broker, c.topic) - before
    want = {k for k, (_, _, props) in c.sent.items() if expected(props)}
    assert 0 < len(want) < MESSAGES / 4
    assert _keys(rows) == want and len(rows) == len(want)
    assert all(r.body == c.sent[(r.queue_id, r.queue_offset)][0] for r in rows)
    assert delivered == len(want)  # the broker filtered: nothing else crossed the network

    # with option tags: both at the broker, in one SQL92 expression
    rows = _reader(spark, c, sqlFilter=EXPRESSION, tags="tagA || tagC", minPartitions="7").load().collect()
    assert _keys(rows) == {k for k in want if c.sent[k][1] in ("tagA", "tagC")}


def test_a_bad_expression_fails_at_load(spark, filtering):
    with pytest.raises((PySparkException, Py4JJavaError), match=r"'x'' cannot be compared at line 1, column 15"):
        _reader(spark, filtering, sqlFilter="a > 5 AND b < 'x'").load()


def test_a_broker_without_property_filter_fails_the_read_on_the_driver(spark, cluster):
    topic = unique("sqlfilter_off")
    create_topic(cluster, topic, 1)
    with pytest.raises((PySparkException, Py4JJavaError)) as failed:
        (spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic)
         .option("sqlFilter", EXPRESSION).load().collect())
    text = str(failed.value)
    assert "does not serve this SQL92 filter" in text and "enablePropertyFilter=true" in text


def test_property_pushdown_pulls_only_the_matching_messages(spark, filtering):
    c = filtering
    where = "property.region = 'eu' AND property.b IN ('red', 'grey')"
    results = {}
    for pushdown in (True, False):
        spark.conf.set(PUSHDOWN_CONF, str(pushdown).lower())
        try:
            before = _messages_out(c.broker, c.topic)
            # no orderBy: its range partitioning would read the source twice (a sampling job first)
            rows = _reader(spark, c, propertyColumns="region,b,a", sqlFilter=EXPRESSION).load().where(where).collect()
            results[pushdown] = sorted(rows, key=lambda r: (r.queue_id, r.queue_offset)), \
                _messages_out(c.broker, c.topic) - before
        finally:
            spark.conf.unset(PUSHDOWN_CONF)
    (pushed, pushed_out), (plain, plain_out) = results[True], results[False]
    want = {k for k, (_, _, p) in c.sent.items() if expected(p) and p["region"] == "eu" and p["b"] in ("red", "grey")}
    assert want and pushed == plain and _keys(pushed) == want
    # pushed: the broker filtered by both, AND-ed; not pushed, by sqlFilter only (Spark filtered the rest)
    assert pushed_out == len(want) < plain_out == sum(expected(p) for _, _, p in c.sent.values())
    assert all(r.property.region == "eu" and r.property.a == c.sent[(r.queue_id, r.queue_offset)][2]["a"]
               for r in pushed)


def test_stream_offsets_pass_over_filtered_out_messages(spark, filtering, tmp_path):
    c = filtering
    name = unique("sqlfilter_stream")
    query = (spark.readStream.format("spark_mq").option("namesrv", c.namesrv).option("topic", c.topic)
             .option("startingOffsets", "earliest").option("sqlFilter", EXPRESSION)
             .option("maxMessagesPerTrigger", "500").load()
             .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "cp"))
             .start())
    try:
        query.processAllAvailable()
        want = {k for k, (_, _, props) in c.sent.items() if expected(props)}
        assert _keys(spark.table(name).collect()) == want
        # messages none of which match: the next batches deliver nothing, and the offsets reach the queues' ends
        more = send(c.namesrv, c.topic, range(MESSAGES, MESSAGES + 200), props=lambda i: {"a": "1", "b": "red"})
        query.processAllAvailable()
        with SyncMQClientAPI() as api:
            ends = {f"{c.broker.name}:{q}": api.get_max_offset(c.broker.addr, c.topic, q) for q in range(QUEUES)}
        wait_until(lambda: any(json.loads(p["sources"][0]["endOffset"]) == {c.topic: ends}
                               for p in query.recentProgress), timeout=60, what="the offsets at the queues' ends")
        rows = spark.table(name).collect()
        assert _keys(rows) == want and len(rows) == len(want)
        assert not _keys(rows) & set(more)
    finally:
        query.stop()
