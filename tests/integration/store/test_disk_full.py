"""A store whose disk fills up while the commitlog file still has room: the message is stored
but its consume queue file cannot be created (a small tmpfs, mounted by the test: root only).

Dispatch must pause rather than die or skip the entry, writes are refused until space returns,
and a restart on the full disk starts (recovery keeps every unit and builds their entries once
the disk takes them).
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest
from servers import small_tmpfs, wait_until

from spark_mq.common.errors import DiskFullError
from spark_mq.common.java_hash import java_hash
from spark_mq.common.message import Message
from spark_mq.store.index_file import positive_hash
from spark_mq.store.index_service import IndexService
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import PutStatus

from ._support import body_for, key_for, read_queue, seq_of, store_config

DISK = 2 * 1024 * 1024
TOPIC = "fullT"


def fill_disk(path: Path) -> Path:
    """Write ``path`` until the disk is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\xff" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return path


def put(store: MessageStore, seq: int, queue_id: int) -> None:
    res = store.put_message(Message(TOPIC, body_for(seq, 100), keys=[key_for(seq)]), queue_id)
    assert res.status == PutStatus.PUT_OK


def served(store: MessageStore, queue_id: int) -> list[int]:
    return [seq_of(u.body) for u in read_queue(store, TOPIC, queue_id)]


def accepts(store: MessageStore, seq: int, queue_id: int) -> bool:
    try:
        put(store, seq, queue_id)
    except DiskFullError:
        return False
    return True


def test_a_queue_file_that_does_not_fit_pauses_dispatch_and_loses_nothing(tmp_path):
    with small_tmpfs(tmp_path / "disk", DISK) as disk:
        cfg = store_config(disk / "store")
        store = MessageStore(cfg).start()
        try:
            put(store, 0, 0)
            assert served(store, 0) == [0] and store.query_by_key(TOPIC, key_for(0))  # its files exist
            filler = fill_disk(disk / "filler")
            put(store, 1, 1)  # room in the commitlog file: stored, but queue 1 gets no file
            assert store.get_max_offset(TOPIC, 1) == 0
            with pytest.raises(DiskFullError, match="disk full"):
                put(store, 2, 0)
            assert served(store, 0) == [0] and store.disk_full is not None

            filler.unlink()  # dispatch resumes by itself, then writes
            wait_until(lambda: served(store, 1) == [1], what="queue 1 dispatched once space returned")
            wait_until(lambda: accepts(store, 2, 0), what="writes accepted again")
            assert served(store, 0) == [0, 2] and store.query_by_key(TOPIC, key_for(1))

            filler = fill_disk(disk / "filler")
            put(store, 3, 2)  # stored; queue 2's file does not fit
            assert store.get_max_offset(TOPIC, 2) == 0
        finally:
            store.shutdown()

        store = MessageStore(cfg).start()  # on the full disk: recovery cannot build queue 2 either
        try:
            assert served(store, 0) == [0, 2] and served(store, 1) == [1]
            with pytest.raises(DiskFullError, match="disk full"):
                put(store, 4, 0)
            filler.unlink()
            wait_until(lambda: accepts(store, 4, 0), what="writes accepted after the late rebuild")
            assert served(store, 2) == [3] and served(store, 0) == [0, 2, 4]
            assert store.query_by_key(TOPIC, key_for(3))
        finally:
            store.shutdown()
        reopened = MessageStore(cfg).start()
        try:
            assert [served(reopened, q) for q in range(3)] == [[0, 2, 4], [1], [3]]
        finally:
            reopened.shutdown()


def test_an_index_batch_that_needs_a_file_the_disk_cannot_hold_goes_in_whole_or_not_at_all(tmp_path):
    with small_tmpfs(tmp_path / "disk", DISK) as disk:
        index = IndexService(disk / "index", 64, 100)  # 99 keys a file
        hashes = np.array([positive_hash(java_hash(f"{TOPIC}#k{i}")) for i in range(150)], dtype=np.int32)
        phys = np.arange(150, dtype=np.int64) * 100
        ts = np.full(150, 1_700_000_000_000, dtype=np.int64)
        index.put_batch(hashes[:50], phys[:50], ts[:50])
        filler = fill_disk(disk / "filler")
        with pytest.raises(DiskFullError, match="disk full"):
            index.put_batch(hashes[50:], phys[50:], ts[50:])  # needs a second file
        assert index.end_phys() == int(phys[49]) and len(index.files) == 1  # nothing of it went in
        filler.unlink()
        index.put_batch(hashes[50:], phys[50:], ts[50:])  # the same batch again
        assert [index.query(TOPIC, f"k{i}", 10, 0, 2**62) for i in range(150)] == [[int(p)] for p in phys]
        index.close()
