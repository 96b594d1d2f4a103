"""``spark_mq.spark.query.by_key`` and ``by_time`` against a real broker and an archive: messages produced,
the first batch offloaded (``spark-mq offload --all``, in process: it stays on the broker too), a second
batch produced. Every answer is checked against the rows the broker serves: the right messages, each
once, with the right tier, and nothing outside the window."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest
from conftest import create_topic
from pyspark.sql import functions as F
from servers import unique

from spark_mq.cli import main as cli_main
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import Message
from spark_mq.spark.query import QUERY_SCHEMA, by_key, by_time
from spark_mq.tiered.archive import FORMATS
from spark_mq.tiered.lookup import COLD, HOT

ARCHIVED = 40  # produced, then offloaded
HOT_ONLY = 40  # produced after the offload
SHARED_KEY = "shared"  # a key of every other message of both batches
SPREAD_S = 0.002  # between sends, so store times spread over many milliseconds


@dataclass(frozen=True)
class Row:
    uniq_key: str
    store_ms: int
    archived: bool  # in the first batch
    shared: bool  # carries SHARED_KEY


@dataclass
class Tiers:
    topic: str
    root: str
    rows: list[Row]  # by store time

    def between(self, lo: int, hi: int, shared_only: bool = False) -> set[str]:
        return {r.uniq_key for r in self.rows if lo <= r.store_ms < hi and (r.shared or not shared_only)}

    def tier(self, uniq_key: str) -> str:
        return COLD if next(r for r in self.rows if r.uniq_key == uniq_key).archived else HOT


def produce(namesrv: str, topic: str, first: int, count: int) -> list[str]:
    ids = []
    with SyncProducer(unique("query_pg"), ClientConfig(namesrv)) as producer:
        for i in range(first, first + count):
            keys = [f"order-{i}", SHARED_KEY] if i % 2 == 0 else [f"order-{i}"]
            ids.append(producer.send(Message(topic, f"body-{i}".encode(), tags="t", keys=keys)).msg_id)
            time.sleep(SPREAD_S)
    return ids


@pytest.fixture(scope="module", params=FORMATS)
def tiers(request, spark, cluster, tmp_path_factory) -> Tiers:
    topic = unique(f"query_{request.param}")
    root = str(tmp_path_factory.mktemp(f"archive_{request.param}"))
    create_topic(cluster, topic)
    archived = set(produce(cluster.namesrv, topic, 0, ARCHIVED))
    assert cli_main(["offload", "--namesrv", cluster.namesrv, "--topic", topic, "--root", root,
                     "--format", request.param, "--all"]) == 0
    produce(cluster.namesrv, topic, ARCHIVED, HOT_ONLY)
    served = (spark.read.format("spark_mq").option("namesrv", cluster.namesrv).option("topic", topic).load()
              .select("uniq_key", F.unix_millis("store_timestamp").alias("ms"), "keys").collect())
    rows = sorted((Row(r.uniq_key, r.ms, r.uniq_key in archived, SHARED_KEY in r.keys.split(" ")) for r in served),
                  key=lambda r: r.store_ms)
    assert len(rows) == ARCHIVED + HOT_ONLY
    return Tiers(topic, root, rows)


def answer(df) -> dict[str, str]:
    """uniq_key -> tier of every row, checking each message comes once."""
    rows = df.select("uniq_key", "tier").collect()
    found = {r.uniq_key: r.tier for r in rows}
    assert len(found) == len(rows), "a message came twice"
    return found


def test_a_key_is_found_in_both_tiers_once_each(spark, cluster, tiers):
    df = by_key(spark, tiers.topic, SHARED_KEY, namesrv=cluster.namesrv, root=tiers.root)
    assert df.schema == QUERY_SCHEMA
    found = answer(df)  # the archived half is on the broker too: reported once, as cold
    assert found == {r.uniq_key: tiers.tier(r.uniq_key) for r in tiers.rows if r.shared}
    assert set(found.values()) == {HOT, COLD}
    times = [r.store_timestamp for r in df.collect()]
    assert times == sorted(times)

    hot_only = answer(by_key(spark, tiers.topic, SHARED_KEY, namesrv=cluster.namesrv))
    assert hot_only == dict.fromkeys(found, HOT)  # without an archive, the broker still has them all


def test_a_key_within_a_window_across_the_seam(spark, cluster, tiers):
    lo, hi = tiers.rows[ARCHIVED // 2].store_ms, tiers.rows[ARCHIVED + HOT_ONLY // 2].store_ms
    found = answer(by_key(spark, tiers.topic, SHARED_KEY, lo, hi, namesrv=cluster.namesrv, root=tiers.root))
    expected = tiers.between(lo, hi, shared_only=True)
    assert set(found) == expected and set(found.values()) == {HOT, COLD}
    assert found == {k: tiers.tier(k) for k in expected}
    outside = {r.uniq_key for r in tiers.rows if r.shared} - expected
    assert outside and not outside & set(found)


def test_one_message_by_its_key_or_uniq_key(spark, cluster, tiers):
    for i, tier in ((3, COLD), (ARCHIVED + 3, HOT)):
        rows = by_key(spark, tiers.topic, f"order-{i}", namesrv=cluster.namesrv, root=tiers.root).collect()
        assert [(r.body, r.tier) for r in rows] == [(f"body-{i}".encode(), tier)]
        by_uniq = by_key(spark, tiers.topic, rows[0].uniq_key, namesrv=cluster.namesrv, root=tiers.root).collect()
        assert [(r.queue_offset, r.tier) for r in by_uniq] == [(rows[0].queue_offset, tier)]
    assert by_key(spark, tiers.topic, "order-3", 0, tiers.rows[0].store_ms, namesrv=cluster.namesrv,
                  root=tiers.root).count() == 0


def test_by_time_returns_exactly_the_window_across_the_seam(spark, cluster, tiers):
    lo, hi = tiers.rows[ARCHIVED // 3].store_ms, tiers.rows[ARCHIVED + HOT_ONLY // 3].store_ms
    df = by_time(spark, tiers.topic, lo, hi, namesrv=cluster.namesrv, root=tiers.root)
    assert df.schema.names == QUERY_SCHEMA.names
    found = answer(df)
    assert found == {k: tiers.tier(k) for k in tiers.between(lo, hi)}
    assert set(found.values()) == {HOT, COLD}
    everything = answer(by_time(spark, tiers.topic, None, None, namesrv=cluster.namesrv, root=tiers.root))
    assert everything == {r.uniq_key: tiers.tier(r.uniq_key) for r in tiers.rows}
    assert answer(by_time(spark, tiers.topic, hi, hi, namesrv=cluster.namesrv, root=tiers.root)) == {}


def test_bad_inputs_say_what_to_do(spark, cluster, tiers, tmp_path):
    with pytest.raises(ConfigError, match="not known to the NameServer"):
        by_key(spark, unique("NoSuchTopic"), SHARED_KEY, namesrv=cluster.namesrv)
    with pytest.raises(ConfigError, match="not known to the NameServer"):
        by_time(spark, unique("NoSuchTopic"), 0, 1, namesrv=cluster.namesrv)
    with pytest.raises(ConfigError, match=r"begins \(20 ms\) after it ends \(10 ms\)"):
        by_time(spark, tiers.topic, 20, 10, namesrv=cluster.namesrv)
    with pytest.raises(ConfigError, match="cannot reach any NameServer"):
        by_key(spark, tiers.topic, SHARED_KEY, namesrv="127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"archive root .* does not exist"):
        by_key(spark, tiers.topic, SHARED_KEY, namesrv=cluster.namesrv, root=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"archive root .* does not exist"):
        by_time(spark, tiers.topic, 0, 1, namesrv=cluster.namesrv, root=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="is a str"):
        by_key(spark, tiers.topic, SHARED_KEY, "yesterday", namesrv=cluster.namesrv)
    with pytest.raises(ConfigError, match="namesrv names no NameServer"):
        by_key(spark, tiers.topic, SHARED_KEY, namesrv="")


def test_the_cli_searches_the_archive_too(cluster, tiers, capsys):
    base = ["query", "--namesrv", cluster.namesrv, "--topic", tiers.topic, "--key", SHARED_KEY]
    assert cli_main([*base, "--archive", tiers.root, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    shared = [r for r in tiers.rows if r.shared]
    assert [(r["msg_id"], r["tier"]) for r in lines] == [(r.uniq_key, tiers.tier(r.uniq_key)) for r in shared[::-1]]
    assert cli_main([*base, "--archive", tiers.root, "--max", "3", "--end", str(shared[2].store_ms)]) == 0
    table = capsys.readouterr().out
    assert "3 message(s)" in table and table.count(" cold ") == 3 and "tier" in table
    assert cli_main([*base, "--archive", tiers.root, "--begin", str(shared[-1].store_ms)]) == 0
    assert "1 message(s)" in (table := capsys.readouterr().out) and " hot " in table and "body-" in table
    assert cli_main(["query", "--namesrv", cluster.namesrv, "--id", "0" * 32, "--archive", tiers.root]) == 2
    assert "--archive searches by --key" in capsys.readouterr().err
