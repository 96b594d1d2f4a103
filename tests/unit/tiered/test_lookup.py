"""The pyarrow-only lookups of the archive (``spark_mq.tiered.lookup``), against the rows appended: a key
matches KEYS tokens and UNIQ_KEY exactly, the time window is [begin, end), files are pruned by partition
and store-time statistics, a snapshot holds still while offloads go on, and a message in both tiers is
the archive's once. No broker is involved."""

from __future__ import annotations

import zlib
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from test_tiered_archive import T0, TOPIC, rows

from spark_mq.arrow.schema import SCHEMA
from spark_mq.common.errors import ConfigError
from spark_mq.common.message import pack_host
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.common.unit.layout import CRC_MASK
from spark_mq.tiered.archive import FORMATS, open_archive
from spark_mq.tiered.lookup import (
    COLD,
    HOT,
    RESULT_SCHEMA,
    ArchiveSnapshot,
    TimeWindow,
    find_archived,
    first_offset_at_or_after,
    merge_tiers,
    messages_to_arrow,
    open_snapshot,
    row_to_message,
    to_ms,
)

EPOCH_T0_MS = int(T0.replace(tzinfo=timezone.utc).timestamp() * 1000)


def stored_ms(i: int) -> int:
    """Store time of offset ``i`` in ``rows`` (T0 + 2i + 1 ms, T0 read as UTC)."""
    return EPOCH_T0_MS + 2 * i + 1


def offsets(table: pa.Table) -> list[tuple[str, int, int]]:
    return list(zip(*(table.column(c).to_pylist() for c in ("broker_name", "queue_id", "queue_offset")), strict=True))


@pytest.fixture(params=FORMATS)
def archived(request, tmp_path) -> str:
    """Queue b:0 archived as three appends [0, 10), [10, 20), [20, 30) (three files), b:1 as [0, 10)."""
    archive = open_archive(str(tmp_path), TOPIC, request.param)
    for lo in (0, 10, 20):
        archive.append("b", 0, lo, lo + 10, rows("b", 0, lo, lo + 10))
    archive.append("b", 1, 0, 10, rows("b", 1, 0, 10))
    return str(tmp_path)


def test_a_key_matches_whole_keys_and_uniq_keys_only(archived):
    # k1 is a substring of k11, k13, ... which must not match
    assert offsets(find_archived(archived, TOPIC, "k1")) == [("b", 0, 1), ("b", 1, 1)]
    assert offsets(find_archived(archived, TOPIC, "U4")) == [("b", 0, 4), ("b", 1, 4)]
    found = find_archived(archived, TOPIC, "key-1")  # the second key of odd i with i % 4 == 1
    assert {o for _, q, o in offsets(found) if q == 0} == {1, 5, 9, 13, 17, 21, 25, 29}
    assert found.schema == SCHEMA
    assert found.to_pylist() == sorted(found.to_pylist(), key=lambda r: (r["store_timestamp"], r["queue_id"]))
    # whole rows, as appended
    assert found.filter(pa.compute.equal(found.column("queue_id"), 1)).equals(rows("b", 1, 0, 10).take([1, 5, 9]))
    assert find_archived(archived, TOPIC, "nope").equals(SCHEMA.empty_table())


def test_the_window_is_begin_inclusive_end_exclusive(archived):
    found = find_archived(archived, TOPIC, "key-1", stored_ms(5), stored_ms(13))
    assert offsets(found) == [("b", 0, 5), ("b", 1, 5), ("b", 0, 9), ("b", 1, 9)]
    assert offsets(find_archived(archived, TOPIC, "key-1", stored_ms(13), None)) == [
        ("b", 0, o) for o in (13, 17, 21, 25, 29)]
    assert find_archived(archived, TOPIC, "key-1", stored_ms(5), stored_ms(5)).num_rows == 0
    every = find_archived(archived, TOPIC, None, stored_ms(8), stored_ms(12))  # no key: the whole window
    assert offsets(every) == [("b", 0, 8), ("b", 1, 8), ("b", 0, 9), ("b", 1, 9), ("b", 0, 10), ("b", 0, 11)]


def test_files_are_pruned_by_partition_and_store_time(archived):
    snap = open_snapshot(archived, TOPIC)
    assert len(snap.files()) == 4
    assert len(snap.files(broker_name="b", queue_id=0)) == 3
    assert len(snap.files(TimeWindow(stored_ms(12), stored_ms(15)))) == 1  # only b:0 [10, 20) was stored then
    assert len(snap.files(TimeWindow(stored_ms(5), stored_ms(12)))) == 3  # b:0 [0, 10), [10, 20) and b:1
    assert len(snap.files(TimeWindow(stored_ms(30), None))) == 0
    assert len(snap.files(TimeWindow(None, stored_ms(0)))) == 0
    assert len(snap.files(TimeWindow(stored_ms(29), stored_ms(30)), "b", 1)) == 0


def test_a_snapshot_holds_still_while_an_offload_appends(archived):
    snap = open_snapshot(archived, TOPIC)
    assert snap.exists and snap.ends == {("b", 0): 30, ("b", 1): 10}
    open_archive(archived, TOPIC).append("b", 0, 30, 40, rows("b", 0, 30, 40))
    assert snap.ends[("b", 0)] == 30 and len(snap.files()) == 4
    assert find_archived(archived, TOPIC, "k31", snapshot=snap).num_rows == 0
    assert find_archived(archived, TOPIC, "k31").num_rows == 1  # a new snapshot sees it
    assert ArchiveSnapshot(open_archive(archived, TOPIC)).ends[("b", 0)] == 40


def test_first_offset_at_or_after_a_time(archived):
    archive = open_archive(archived, TOPIC)
    assert first_offset_at_or_after(archive, "b", 0, 0) == 0
    assert first_offset_at_or_after(archive, "b", 0, stored_ms(14)) == 14
    assert first_offset_at_or_after(archive, "b", 0, stored_ms(14) - 1) == 14
    assert first_offset_at_or_after(archive, "b", 0, stored_ms(14) + 1) == 15
    assert first_offset_at_or_after(archive, "b", 1, stored_ms(10)) is None
    assert first_offset_at_or_after(archive, "c", 0, 0) is None


def test_missing_roots_and_topics(tmp_path):
    with pytest.raises(ConfigError, match=r"archive root .* does not exist: give the tieredStoreRoot"):
        find_archived(str(tmp_path / "nowhere"), TOPIC, "k1")
    snap = open_snapshot(str(tmp_path), "NeverOffloaded")
    assert not snap.exists and snap.ends == {} and snap.files() == []
    assert find_archived(str(tmp_path), "NeverOffloaded", "k1").equals(SCHEMA.empty_table())


def test_windows_and_keys_are_checked():
    assert to_ms(None, "begin") is None and to_ms(1_700_000_000_123, "begin") == 1_700_000_000_123
    assert to_ms(datetime(2026, 11, 22, 8, 30, tzinfo=timezone.utc), "begin") == 1_795_336_200_000
    assert to_ms(datetime(2026, 11, 22, 8, 30, 0, 123999, tzinfo=timezone.utc), "begin") == 1_795_336_200_123
    naive = datetime(2026, 11, 22, 8, 30)
    assert to_ms(naive, "end") == int(naive.timestamp() * 1000)  # local time, as datetime.timestamp reads it
    with pytest.raises(ConfigError, match=r"begin '2026' is a str: give ms since the epoch \(int\) or a datetime"):
        to_ms("2026", "begin")
    with pytest.raises(ConfigError, match="is a bool"):
        to_ms(True, "end")
    with pytest.raises(ConfigError, match=r"begins \(20 ms\) after it ends \(10 ms\): swap begin and end"):
        TimeWindow.of(20, 10)
    assert TimeWindow.of(10, 10).empty and not TimeWindow().bounded
    with pytest.raises(ConfigError, match="contains ' ', which separates the keys"):
        find_archived("unused", TOPIC, "two keys")
    with pytest.raises(ConfigError, match="must be a non-empty string"):
        find_archived("unused", TOPIC, "")


def message(queue_offset: int, store_ms: int) -> StoredMessage:
    return StoredMessage(topic=TOPIC, queue_id=0, queue_offset=queue_offset, physical_offset=1000 + queue_offset,
                         body=b"payload", properties={"KEYS": "order-1 k", "UNIQ_KEY": f"U{queue_offset}", "x": "y"},
                         flag=0, sys_flag=0, body_crc=zlib.crc32(b"payload") & CRC_MASK, born_timestamp=store_ms - 5,
                         born_host=pack_host("10.0.0.21", 53114), store_timestamp=store_ms,
                         store_host=pack_host("127.0.0.1", 10911), reconsume_times=0)


def test_hot_messages_become_rows_and_back():
    sent = [message(7, EPOCH_T0_MS), message(8, EPOCH_T0_MS + 1)]
    table = messages_to_arrow(sent, "b")
    assert table.schema == SCHEMA and table.column("keys").to_pylist() == ["order-1 k"] * 2
    assert table.column("msg_id").to_pylist()[0] == "7F00000100002A9F00000000000003EF"
    assert [row_to_message(r) for r in table.to_pylist()] == sent


def test_a_message_in_both_tiers_is_the_archives_once():
    hot = messages_to_arrow([message(7, EPOCH_T0_MS + 100), message(31, EPOCH_T0_MS + 90)], "b")
    cold = rows("b", 0, 6, 8)  # offsets 6 and 7: 7 is in both tiers
    merged = merge_tiers(hot, cold)
    assert merged.schema == RESULT_SCHEMA
    assert [(r["queue_offset"], r["tier"]) for r in merged.to_pylist()] == [(6, COLD), (7, COLD), (31, HOT)]
    assert merge_tiers(SCHEMA.empty_table(), SCHEMA.empty_table()).num_rows == 0
