"""The archive table and its Arrow reader, checked against the rows appended (no broker involved):
exactly-once appends per queue, offset-range files, crash leftovers, pruning, the schema round trip."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_mq.arrow.schema import SCHEMA, UTC_SCHEMA
from spark_mq.common.errors import ConfigError
from spark_mq.tiered.archive import (
    FORMAT_DELTA,
    FORMAT_PARQUET,
    FORMATS,
    TEMP_PREFIX,
    ArchiveError,
    ParquetArchive,
    detect_format,
    open_archive,
    parse_range_file_name,
    partition_dir,
    range_file_name,
    table_uri,
)
from spark_mq.tiered.reader import read_archived_range, read_queue_range

TOPIC = "ArchiveTopic"
T0 = datetime(2026, 11, 22, 8, 30, 0, 123000)


def rows(broker: str, queue_id: int, start: int, end: int) -> pa.Table:
    """Messages [start, end) of a queue in SCHEMA, varied: nulls, empty and non-empty property maps."""
    return pa.Table.from_pylist([{
        "topic": TOPIC, "broker_name": broker, "queue_id": queue_id, "queue_offset": i,
        "commitlog_offset": 1000 * queue_id + 97 * i, "msg_id": f"{i:032X}",
        "uniq_key": f"U{i}" if i % 3 else None, "keys": f"k{i} key-{i % 4}" if i % 2 else None,
        "tags": "tagA" if i % 5 else None, "properties": [("n", str(i)), ("q", str(queue_id))] if i % 4 else [],
        "body": bytes([i % 256]) * (i % 7), "born_timestamp": T0 + timedelta(milliseconds=i),
        "store_timestamp": T0 + timedelta(milliseconds=2 * i + 1), "born_host": "10.0.0.21:53114",
        "store_host": "127.0.0.1:10911", "reconsume_times": i % 2, "sys_flag": 0, "flag": i % 3,
    } for i in range(start, end)], schema=SCHEMA)


@pytest.mark.parametrize("fmt", FORMATS)
def test_append_is_exactly_once_per_queue(tmp_path, fmt):
    archive = open_archive(str(tmp_path), TOPIC, fmt)
    assert archive.format == fmt and archive.archived_end("b", 0) is None
    assert archive.append("b", 0, 0, 10, rows("b", 0, 0, 10))
    assert archive.append("b", 1, 5, 8, rows("b", 1, 5, 8))  # a queue may start anywhere (its min)
    assert not archive.append("b", 0, 0, 10, rows("b", 0, 0, 10))  # a re-run: skipped
    assert not archive.append("b", 0, 4, 10, rows("b", 0, 4, 10))
    with pytest.raises(ArchiveError, match=r"archived up to 10.*repeat \[5, 10\)"):
        archive.append("b", 0, 5, 15, rows("b", 0, 5, 15))
    assert archive.append("b", 0, 10, 20, rows("b", 0, 10, 20))
    assert (archive.archived_end("b", 0), archive.archived_end("b", 1), archive.archived_end("c", 0)) == (20, 8, None)
    assert (archive.archived_range("b", 0), archive.archived_range("b", 1), archive.archived_range("c", 0)) == (
        (0, 20), (5, 8), (None, None))

    reopened = open_archive(str(tmp_path), TOPIC)  # the format is found on disk
    assert reopened.format == fmt and reopened.archived_end("b", 0) == 20
    assert read_archived_range(reopened, "b", 0, 0, 20).equals(rows("b", 0, 0, 20))
    assert read_queue_range(str(tmp_path), TOPIC, "b", 0, 3, 13).equals(rows("b", 0, 3, 13))
    assert read_queue_range(str(tmp_path), TOPIC, "b", 1, 0, 100).equals(rows("b", 1, 5, 8))
    assert read_queue_range(str(tmp_path), TOPIC, "b", 2, 0, 100).equals(SCHEMA.empty_table())


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_must_be_exactly_the_range(tmp_path, fmt):
    archive = open_archive(str(tmp_path), TOPIC, fmt)
    gap = pa.concat_tables([rows("b", 0, 0, 4), rows("b", 0, 5, 10)])
    with pytest.raises(ArchiveError, match=r"not each offset once in order"):
        archive.append("b", 0, 0, 10, gap)
    with pytest.raises(ArchiveError, match="not each offset once"):
        archive.append("b", 0, 0, 3, rows("b", 0, 0, 3).take([0, 2, 1]))
    with pytest.raises(ArchiveError, match="another queue"):
        archive.append("b", 0, 0, 3, rows("b", 1, 0, 3))
    assert archive.archived_end("b", 0) is None and archive.data_files() == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_files_prune_by_partition_and_offset(tmp_path, fmt):
    archive = open_archive(str(tmp_path), TOPIC, fmt)
    for lo in range(0, 40, 10):
        archive.append("b", 0, lo, lo + 10, rows("b", 0, lo, lo + 10))
    archive.append("b", 1, 0, 10, rows("b", 1, 0, 10))
    assert len(archive.data_files()) == 5
    assert len(archive.data_files("b", 0)) == 4
    assert len(archive.data_files("b", 0, 12, 25)) == 2
    assert len(archive.data_files("b", 0, 40, 50)) == 0
    assert read_archived_range(archive, "b", 0, 12, 25).equals(rows("b", 0, 12, 25))
    # every data file is a plain Parquet file with the stored columns (partition values in its path)
    for f in archive.data_files():
        assert pq.read_schema(f).names == [n for n in UTC_SCHEMA.names if n not in ("broker_name", "queue_id")]


def test_parquet_files_are_named_by_range_and_crash_leftovers_are_ignored(tmp_path):
    archive = ParquetArchive(str(tmp_path), TOPIC)
    archive.append("b", 0, 0, 10, rows("b", 0, 0, 10))
    base = partition_dir(archive.uri, "b", 0)
    (tmp_path / TOPIC / "broker_name=b" / "queue_id=0" / f"{TEMP_PREFIX}dead-{range_file_name(10, 20)}").write_bytes(
        b"half a file")
    assert archive.archived_end("b", 0) == 10 and [f.rsplit("/", 1)[1] for f in archive.data_files()] == [
        range_file_name(0, 10)]
    assert read_queue_range(str(tmp_path), TOPIC, "b", 0, 0, 20).num_rows == 10
    assert archive.discard_incomplete("b", 0) == 1
    assert sorted(p.name for p in (tmp_path / TOPIC / "broker_name=b" / "queue_id=0").iterdir()) == [
        range_file_name(0, 10)]
    assert base.endswith("/broker_name=b/queue_id=0")


def test_range_file_names_round_trip():
    assert range_file_name(5, 1_000_000_000_000) == "00000000000000000005-00000001000000000000.parquet"
    assert parse_range_file_name(range_file_name(5, 17)) == (5, 17)
    assert parse_range_file_name(f"{TEMP_PREFIX}x-{range_file_name(5, 17)}") is None
    assert parse_range_file_name("part-0001.parquet") is None


def test_format_and_topic_errors(tmp_path):
    open_archive(str(tmp_path), TOPIC, FORMAT_PARQUET).append("b", 0, 0, 1, rows("b", 0, 0, 1))
    assert detect_format(str(tmp_path), TOPIC) == FORMAT_PARQUET
    with pytest.raises(ConfigError, match="is a parquet table, not delta: pass --format parquet"):
        open_archive(str(tmp_path), TOPIC, FORMAT_DELTA)
    with pytest.raises(ConfigError, match="unknown: use one of delta, parquet"):
        open_archive(str(tmp_path), TOPIC, "orc")
    with pytest.raises(ConfigError, match="cannot name an archive table"):
        table_uri(str(tmp_path), "a/b")
    assert detect_format(str(tmp_path), "Nothing") is None
