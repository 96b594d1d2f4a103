"""The real ``spark-mq`` command (``python -m spark_mq.cli``) in subprocesses against a real
NameServer and broker: produce, consume, admin, query, status, --help and errors."""

from __future__ import annotations

import json
import time

import pytest
from servers import unique

from .conftest import run_cli


def create_topic(cli, topic: str, queues: int = 2) -> None:
    out = cli("admin", "topic", "create", "--topic", topic, "--queues", str(queues)).stdout
    assert f"topic {topic} created/updated on" in out


def consume_json(cli, topic: str, group: str, *extra: str) -> list[dict]:
    out = cli("consume", "--topic", topic, "--group", group, "--json", "--timeout", "2", *extra).stdout
    return [json.loads(line) for line in out.splitlines() if line]


def test_produce_then_consume_json_gives_the_lines_back(cli):
    topic = unique("CliTopic")
    create_topic(cli, topic)
    lines = [f"line {i} ünïcode" for i in range(10)]
    out = cli("produce", "--topic", topic, "--key", "k1", "--tag", "tagA", "--batch", "3",
              input="\n".join(lines) + "\n\n").stdout
    assert out.startswith(f"produced 10 message(s) to {topic} in 4 send(s), 1 empty line(s) skipped; last msg id ")
    records = consume_json(cli, topic, unique("g"), "--from", "first")
    assert sorted(r["body"] for r in records) == sorted(lines)
    for r in records:
        assert (r["topic"], r["keys"], r["tags"], r["body_base64"]) == (topic, ["k1"], "tagA", False)
        assert r["properties"]["KEYS"] == "k1" and r["store_timestamp"] > 0 and len(r["msg_id"]) == 32
    assert sorted((r["queue_id"], r["queue_offset"]) for r in records) == sorted(
        {(r["queue_id"], r["queue_offset"]) for r in records})
    last_id = out.split("last msg id ")[1].split()[0]
    assert last_id in {r["msg_id"] for r in records}


def test_consume_pop_prints_and_acknowledges_and_a_delayed_message_pops_after_its_delay(cli):
    topic, group = unique("CliPop"), unique("g")
    create_topic(cli, topic, queues=2)
    cli("produce", "--topic", topic, input="".join(f"m{i}\n" for i in range(6)))
    cli("produce", "--topic", topic, "--delay-level", "1", input="late\n")  # level 1: 1 s
    out = cli("consume", "--topic", topic, "--group", group, "--pop", "--from", "first", "--max", "4",
              "--timeout", "3")
    first = out.stdout.split()
    assert len(first) == 4 and "consumed 4 message(s)" in out.stderr and "(pop)" in out.stderr
    rest = cli("consume", "--topic", topic, "--group", group, "--pop", "--timeout", "3").stdout.split()
    assert sorted(first + rest) == sorted([f"m{i}" for i in range(6)] + ["late"])  # acknowledged: none twice
    assert "--pop takes --from first or --from last" in cli("consume", "--topic", topic, "--group", group, "--pop",
                                                            "--from", "2024-01-01", ok=False).stderr


def test_produce_with_a_delay_level_arrives_after_the_delay(cli):
    topic = unique("CliDelay")
    create_topic(cli, topic, queues=1)
    cli("produce", "--topic", topic, "--delay-level", "1", "--batch", "2", input="x\ny\nz\n")  # level 1: 1 s
    records = []
    deadline = time.monotonic() + 60
    while len(records) < 3 and time.monotonic() < deadline:
        records = consume_json(cli, topic, unique("g"), "--from", "first")
    assert sorted(r["body"] for r in records) == ["x", "y", "z"]
    for r in records:  # parked first: stored in its topic at least 1 s after it was born
        assert r["store_timestamp"] - r["born_timestamp"] >= 1000 and "DELAY" not in r["properties"]
    assert "--delay-level must be" in cli("produce", "--topic", topic, "--delay-level", "-1", input="x\n",
                                           ok=False).stderr


def test_produce_from_file_binary_body_and_plain_consume(cli, tmp_path):
    topic = unique("CliFile")
    create_topic(cli, topic, queues=1)
    src = tmp_path / "in.txt"
    src.write_bytes(b"alpha\n\xff\xfe\nomega\n")
    assert "produced 3 message(s)" in cli("produce", "--topic", topic, "--file", str(src), "--batch", "1").stdout
    records = consume_json(cli, topic, unique("g"), "--from", "first")
    assert [r["body_base64"] for r in records] == [False, True, False]
    assert records[1]["body"] == "//4="
    plain = cli("consume", "--topic", topic, "--group", unique("g"), "--from", "first", "--timeout", "2").stdout
    assert plain.splitlines()[0] == "alpha" and plain.splitlines()[2] == "omega"


def test_max_then_group_lag_then_the_rest(cli):
    topic, group = unique("CliLag"), unique("lag")
    create_topic(cli, topic)
    cli("produce", "--topic", topic, "--batch", "5", input="".join(f"m{i}\n" for i in range(10)))
    first = consume_json(cli, topic, group, "--from", "first", "--max", "3")
    assert len(first) == 3
    lag = cli("admin", "group", "lag", "--group", group, "--topic", topic).stdout
    assert "total lag: 7" in lag and topic in lag
    rest = consume_json(cli, topic, group, "--from", "first")
    assert sorted(r["body"] for r in first + rest) == sorted(f"m{i}" for i in range(10))
    assert "total lag: 0" in cli("admin", "group", "lag", "--group", group).stdout


def test_admin_topic_create_list_stats_delete(cli):
    topic = unique("CliAdmin")
    create_topic(cli, topic, queues=3)
    assert topic in cli("admin", "topic", "list").stdout.split()
    cli("produce", "--topic", topic, input="a\nb\n")
    stats = cli("admin", "topic", "stats", "--topic", topic).stdout
    assert "total messages: 2" in stats
    assert f"topic {topic} deleted from" in cli("admin", "topic", "delete", "--topic", topic).stdout
    assert topic not in cli("admin", "topic", "list").stdout.split()


def test_offsets_reset_to_time_then_consume_from_there(cli):
    topic, group = unique("CliReset"), unique("reset")
    create_topic(cli, topic, queues=1)
    cli("produce", "--topic", topic, input="old1\nold2\n")
    time.sleep(0.1)
    cut = int(time.time() * 1000)
    time.sleep(0.1)
    cli("produce", "--topic", topic, input="new1\nnew2\n")
    assert len(consume_json(cli, topic, group, "--from", "first")) == 4
    table = cli("admin", "offsets", "reset", "--group", group, "--topic", topic, "--to-time", str(cut)).stdout
    assert " 2 " in table.splitlines()[-2]  # queue 0 moves back to offset 2
    assert [r["body"] for r in consume_json(cli, topic, group)] == ["new1", "new2"]
    # an ISO time works too (local time); far in the past -> everything again
    cli("admin", "offsets", "reset", "--group", group, "--topic", topic, "--to-time", "2000-01-01T00:00:00")
    assert len(consume_json(cli, topic, group)) == 4


def test_query_by_key_and_by_id(cli):
    topic = unique("CliQuery")
    create_topic(cli, topic)
    out = cli("produce", "--topic", topic, "--key", "order-7", "--tag", "t", "--batch", "1",
              input="hello\nworld\n").stdout
    uniq = out.split("last msg id ")[1].split()[0]
    offset_id = out.split("offset msg id ")[1].rstrip(")\n")
    by_key = cli("query", "--topic", topic, "--key", "order-7", "--json").stdout.splitlines()
    assert [json.loads(line)["body"] for line in by_key] == ["world", "hello"]  # newest first
    table = cli("query", "--topic", topic, "--key", "order-7").stdout
    assert "hello" in table and "world" in table and "2 message(s)" in table
    future = str(int(time.time() * 1000) + 3_600_000)
    miss = cli("query", "--topic", topic, "--key", "order-7", "--begin", future, ok=False)
    assert miss.returncode != 0 and "no message found" in miss.stderr
    by_offset_id = json.loads(cli("query", "--id", offset_id, "--json").stdout)
    assert (by_offset_id["body"], by_offset_id["offset_msg_id"]) == ("world", offset_id)
    by_uniq = json.loads(cli("query", "--id", uniq, "--topic", topic, "--json").stdout)
    assert (by_uniq["body"], by_uniq["msg_id"]) == ("world", uniq)


def test_status_table(cli, cluster):
    out = cli("status").stdout
    assert cluster.broker in out and "commitlog max" in out and "disk ratio" in out
    assert "1 broker(s)" in out


@pytest.mark.parametrize("command", [
    [], ["produce"], ["consume"], ["admin"], ["admin", "topic"], ["admin", "topic", "create"],
    ["admin", "topic", "list"], ["admin", "topic", "delete"], ["admin", "topic", "stats"], ["admin", "group"],
    ["admin", "group", "lag"], ["admin", "offsets"], ["admin", "offsets", "reset"], ["query"], ["status"],
])
def test_every_help_exits_0(command):
    result = run_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: spark-mq" in result.stdout


@pytest.mark.parametrize("command", [
    ["status"], ["admin", "topic", "list"], ["produce", "--topic", "T"], ["consume", "--topic", "T", "--group", "g"],
    ["query", "--topic", "T", "--key", "k"], ["admin", "group", "lag", "--group", "g"],
])
def test_bad_namesrv_is_one_line_error(command):
    result = run_cli(*command, "--namesrv", "127.0.0.1:1", input="x\n", timeout=30)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spark-mq: error: "), result.stderr
