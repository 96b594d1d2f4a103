"""A read of a few entries (``QueueReader._get_few``: struct reads, plain lists, no numpy) answers as the numpy
path does, across consume queue and commitlog files, with byte limits, units retention deleted and damaged
units a read must drop."""

from __future__ import annotations

import random

import pytest

from spark_mq.common.message import Message
from spark_mq.common.unit.layout import HEADER_SIZE
from spark_mq.store import queue_reader
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetResult, GetStatus

TOPIC = "FewReads"
COUNTS = (0, 1, 2, 7, queue_reader.FEW_ENTRIES)
MAX_BYTES = (1, 2500, 9000, queue_reader.DEFAULT_MAX_GET_BYTES)


def _answer(res: GetResult) -> tuple:
    return (res.status, res.next_begin_offset, res.min_offset, res.max_offset, res.data, res.count,
            res.queue_offsets.tolist(), res.sizes.tolist(), res.behind_bytes)


def _same_answers(store: MessageStore, monkeypatch: pytest.MonkeyPatch, queue_id: int) -> int:
    """Every (offset, count, max_bytes) read of the queue both ways; returns how many found units."""
    found = 0
    for offset in range(store.get_max_offset(TOPIC, queue_id) + 2):
        for count in COUNTS:
            for max_bytes in MAX_BYTES:
                few = store.get_messages(TOPIC, queue_id, offset, count, max_bytes=max_bytes)
                with monkeypatch.context() as m:
                    m.setattr(queue_reader, "FEW_ENTRIES", -1)  # the numpy path
                    full = store.get_messages(TOPIC, queue_id, offset, count, max_bytes=max_bytes)
                assert _answer(few) == _answer(full), (offset, count, max_bytes)
                if few.status == GetStatus.FOUND:
                    assert isinstance(few.found_sizes, list)  # the few path answered
                    found += few.count
    return found


@pytest.fixture
def filled(make_store) -> MessageStore:
    rng = random.Random(11)
    store = make_store()
    for i in range(130):  # 64 KiB commitlog files (blank tails between them), 50 entries a queue file
        store.put_message(Message(TOPIC, rng.randbytes(rng.randrange(0, 3000)), tags=f"t{i % 3}"), i % 2)
    return store


def test_few_entry_reads_answer_as_the_numpy_path(filled, monkeypatch):
    assert _same_answers(filled, monkeypatch, 0) > 0
    assert _same_answers(filled, monkeypatch, 1) > 0


def test_units_retention_deleted_lead_the_window_on_both_paths(filled, monkeypatch):
    phys = filled._queue(TOPIC, 0).entry(4)[0]
    monkeypatch.setattr(filled.commitlog, "min_offset", lambda: phys)  # the units of entries 0-3 are gone
    assert _same_answers(filled, monkeypatch, 0) > 0
    assert filled.get_messages(TOPIC, 0, 0, 3).status == GetStatus.OFFSET_FOUND_NULL


def test_damaged_unchecked_units_are_dropped_on_both_paths(filled, monkeypatch):
    cq = filled._queue(TOPIC, 1)  # dispatched first
    phys, size, _ = cq.entry(5)
    assert size > HEADER_SIZE + 100
    mf = filled.commitlog.files.find(phys)
    at = phys - mf.file_from_offset + HEADER_SIZE + 4  # a byte of the body: its CRC no longer holds
    mf.mv[at] ^= 0xFF
    filled._checks.checked_from = filled.commitlog.max_offset()  # every unit unchecked: reads check them
    _same_answers(filled, monkeypatch, 1)
    got = filled.get_messages(TOPIC, 1, 4, 3)
    assert got.queue_offsets.tolist() == [4, 6] and phys in filled._checks.damaged
