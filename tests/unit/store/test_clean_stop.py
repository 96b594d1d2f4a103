"""The clean-stop record decides whether a start may check in the background: only when the
queues and the commitlog are as the last clean shutdown left them; a crash, a lost record or a
consume queue that changed while the broker was down makes the start check before serving."""

from __future__ import annotations

import json

import numpy as np
from servers import wait_until
from unit_helpers import tiny_config

from spark_mq.common.message import MessageBatch
from spark_mq.common.unit.layout import HEADER_SIZE
from spark_mq.store.clean_stop import FILE_NAME
from spark_mq.store.consume_queue import ENTRY_SIZE, QUARANTINED_TAG, entry_record
from spark_mq.store.mapped_file import file_name
from spark_mq.store.message_store import MessageStore

TOPIC = "CleanStop"


def _filled(root) -> int:
    store = MessageStore(tiny_config(root)).start()
    for q in range(2):
        store.put_messages(MessageBatch.of(TOPIC, q, [b"m%d" % i for i in range(40)]))
    end = store.commitlog.max_offset()
    store.shutdown()
    assert (root / FILE_NAME).exists()
    return end


def test_a_start_as_the_clean_stop_left_it_walks_nothing_and_checks_in_the_background(tmp_path):
    end = _filled(tmp_path)
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert not (tmp_path / FILE_NAME).exists(), "the record is consumed by the start"
        assert store.recovery.start_offset == store.recovery.end_offset == end
        assert store.startup_check is not None
        store.startup_check.join(30)
        assert store.corrupt_units == 0
    finally:
        store.shutdown()


def test_a_crash_after_the_record_was_written_checks_before_serving(tmp_path):
    end = _filled(tmp_path)
    (tmp_path / "abort").touch()  # as if killed after the record, before the abort file went
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert store.recovery.abnormal
        assert store.recovery.start_offset < end and store.recovery.units_checked > 0
        assert not (tmp_path / FILE_NAME).exists()
        # only the body CRCs below the safe offset are left to the background (reads check them meanwhile)
        assert store.recovery.crc_later_below == end
    finally:
        store.shutdown()


def test_a_damaged_body_below_the_safe_offset_after_a_crash_is_never_served(tmp_path):
    end = _filled(tmp_path)
    victim = int(_entry(tmp_path, 0, 17)["phys"])
    with open(tmp_path / "commitlog" / file_name(0), "r+b") as f:
        f.seek(victim + HEADER_SIZE + 1)  # a body byte
        f.write(b"X")
    (tmp_path / "abort").touch()  # a crash after a checkpoint that covers every unit
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert store.recovery.safe_offset == end
        res = store.get_messages(TOPIC, 0, 0, 100)  # the read checks what the start has not yet
        assert res.count == 39 and 17 not in res.queue_offsets.tolist()
        cq = store.queues[(TOPIC, 0)]
        wait_until(lambda: int(cq.get(17, 1)["tag"][0]) == QUARANTINED_TAG, 30, "the entry quarantined")
        assert store.corrupt_units == 1
        res = store.get_messages(TOPIC, 0, 0, 100)
        assert res.count == 39 and 17 not in res.queue_offsets.tolist()
    finally:
        store.shutdown()


def _entry(root, queue_id: int, offset: int):
    with open(root / "consumequeue" / TOPIC / str(queue_id) / file_name(0), "rb") as f:
        f.seek(offset * ENTRY_SIZE)
        return np.frombuffer(f.read(ENTRY_SIZE), dtype=entry_record())[0]


def _zero_last_ten_entries(root) -> None:
    """Queue 1 loses the entries of its last 10 messages (its 40 fill a consume queue file's start)."""
    with open(root / "consumequeue" / TOPIC / "1" / file_name(0), "r+b") as f:
        f.seek(30 * ENTRY_SIZE)
        f.write(bytes(10 * ENTRY_SIZE))


def test_a_consume_queue_that_lost_entries_is_rebuilt_before_serving(tmp_path):
    _filled(tmp_path)
    _zero_last_ten_entries(tmp_path)
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert store.startup_check is None
        assert store.recovery.units_replayed == 10
        assert store.get_max_offset(TOPIC, 1) == 40
        res = store.get_messages(TOPIC, 1, 30, 100)
        assert res.count == 10 and res.next_begin_offset == 40
    finally:
        store.shutdown()


def test_what_the_background_check_cannot_repair_is_rebuilt_by_the_next_start(tmp_path):
    _filled(tmp_path)
    _zero_last_ten_entries(tmp_path)
    record = json.loads((tmp_path / FILE_NAME).read_text())  # a record that agrees with the damage
    record["queues"] = [[t, q, 30 if q == 1 else m] for t, q, m in record["queues"]]
    (tmp_path / FILE_NAME).write_text(json.dumps(record))
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert store.startup_check is not None and store.get_max_offset(TOPIC, 1) == 30
        store.startup_check.join(30)
    finally:
        store.shutdown()
    assert not (tmp_path / FILE_NAME).exists(), "no record: the next start must check first"
    store = MessageStore(tiny_config(tmp_path)).start()
    try:
        assert store.startup_check is None and store.recovery.units_replayed == 10
        assert store.get_max_offset(TOPIC, 1) == 40
    finally:
        store.shutdown()
