"""Retention with tiered storage on: a commitlog file goes only once every queue's messages in it
(and in earlier files) are archived. Expired files are kept quietly; disk pressure refuses with an
error naming the file and the queues, unless tieredDeleteUnarchivedForcibly lets them go.

The archive is a dict handed to the store as its ``archived_offset`` provider (the broker hands
its tiered offset table); clock and disk usage are injected as in ``test_retention``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_mq.common.message import Message, MessageBatch
from spark_mq.store.message_store import MessageStore
from spark_mq.store.retention import DISK_PRESSURE, EXPIRY

from ._support import COMMITLOG_FILE, body_for, store_config
from .test_retention import Clock, Disk

HOUR = 3600.0
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))  # deleteWhen: time-based expiry at any hour
QUEUES = [("tierA", 0), ("tierA", 1), ("tierB", 0)]
Written = dict[tuple[str, int], list[int]]  # queue -> commitlog offset of each queue offset


class Archive:
    """What the offload jobs archived: (topic, queue) -> archived-up-to offset."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.offsets.get((topic, queue_id), 0)


def _open(root: Path, archive: Archive, disk: Disk, clock: Clock, **overrides) -> MessageStore:
    cfg = store_config(root, maped_file_size_consume_queue=20 * 50, tiered_store_enable=True, delete_when=EVERY_HOUR,
                       file_reserved_time=48, **overrides)
    return MessageStore(cfg, disk_ratio=disk, clock=clock, archived_offset=archive).start()


def _fill(store: MessageStore, files: int) -> Written:
    """Batches of 8 round-robin over QUEUES until the commitlog has ``files`` files."""
    written: Written = {q: [] for q in QUEUES}
    n = 0
    while len(store.commitlog.files.files) < files:
        topic, qid = QUEUES[n % len(QUEUES)]
        res = store.put_messages(MessageBatch.from_messages([Message(topic, body_for(n * 8 + i, 300))
                                                             for i in range(8)], qid))
        written[(topic, qid)] += [int(p) for p in res.physical_offsets]
        n += 1
    return written


def _below(written: Written, queue: tuple[str, int], files: int) -> int:
    """How many of the queue's messages lie in the first ``files`` commitlog files."""
    return sum(p < files * COMMITLOG_FILE for p in written[queue])


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "commitlog").iterdir() if p.name.isdigit())


def _expire_all_but_last(root: Path, now: float) -> list[str]:
    names = _names(root)
    for n in names[:-1]:
        os.utime(root / "commitlog" / n, (now - 72 * HOUR, now - 72 * HOUR))
    return names


@dataclass
class Tiered:
    """An open tiered store filled over 6 commitlog files (``names``), all but the active one expired."""

    store: MessageStore
    root: Path
    archive: Archive
    disk: Disk
    written: Written
    names: list[str]


@pytest.fixture
def tiered_store(tmp_path):
    """``tiered_store(**config_overrides)`` opens a ``Tiered`` store; all are shut down afterwards."""
    opened: list[MessageStore] = []

    def make(**overrides) -> Tiered:
        root = tmp_path / f"store{len(opened)}"
        archive, disk, clock = Archive(), Disk(0.10), Clock(time.time())
        store = _open(root, archive, disk, clock, **overrides)
        opened.append(store)
        written = _fill(store, 6)
        return Tiered(store, root, archive, disk, written, _expire_all_but_last(root, clock.now))

    yield make
    for s in opened:
        s.shutdown()


def test_expired_files_wait_for_the_archive_then_go(tiered_store, caplog):
    t = tiered_store()
    store, root, archive, written, names = t.store, t.root, t.archive, t.written, t.names
    with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
        assert store.retention.run_once().deleted_files == 0
    assert _names(root) == names
    kept = [r for r in caplog.records if "keeps expired commitlog file" in r.getMessage()]
    assert kept and kept[0].levelno == logging.INFO and names[0] in kept[0].getMessage()
    assert store.retention.unarchived_refusals == {EXPIRY: 1, DISK_PRESSURE: 0}

    # every queue archived up to just short of file 1's end: file 0 goes, file 1 stays
    for q in QUEUES:
        archive.offsets[q] = _below(written, q, 2) - 1
    assert store.retention.run_once().deleted_files == 1
    assert _names(root) == names[1:]
    for q in QUEUES:
        assert store.get_min_offset(*q) == _below(written, q, 1)

    for q in QUEUES:  # archived up to exactly file 2's end: files 1 and 2 go
        archive.offsets[q] = _below(written, q, 3)
    assert store.retention.run_once().deleted_files == 2
    assert _names(root) == names[3:]

    for q in QUEUES:  # everything archived: every expired file goes, the active one stays
        archive.offsets[q] = store.get_max_offset(*q)
    assert store.retention.run_once().deleted_files == 2
    assert _names(root) == names[-1:]
    assert store.retention.unarchived_refusals[DISK_PRESSURE] == 0


def test_one_unarchived_queue_keeps_a_file_the_others_share(tiered_store, caplog):
    t = tiered_store()
    store, root, archive, written, names = t.store, t.root, t.archive, t.written, t.names
    archive.offsets[("tierA", 0)] = store.get_max_offset("tierA", 0)
    archive.offsets[("tierB", 0)] = store.get_max_offset("tierB", 0)
    lagging = ("tierA", 1)
    archive.offsets[lagging] = _below(written, lagging, 1)  # its messages in file 0 only
    with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
        assert store.retention.run_once().deleted_files == 1
    assert _names(root) == names[1:]
    kept = next(r.getMessage() for r in caplog.records if "keeps expired" in r.getMessage())
    assert names[1] in kept and "tierA:1" in kept and "tierA:0" not in kept and "tierB:0" not in kept
    assert f"archived up to {_below(written, lagging, 1)}, needs {_below(written, lagging, 2)}" in kept
    assert store.get_min_offset(*lagging) == _below(written, lagging, 1)


def test_disk_pressure_refuses_to_delete_unarchived_files_with_an_error(tiered_store, caplog):
    t = tiered_store()
    store, root, archive, disk, written, names = t.store, t.root, t.archive, t.disk, t.written, t.names
    for q in QUEUES:
        archive.offsets[q] = _below(written, q, 1)  # file 0 archived, file 1 not
    disk.ratio = 0.80  # over diskMaxUsedSpaceRatio (75%): expired files are due at once
    with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
        rep = store.retention.run_once()
    assert rep.deleted_files == 1 and _names(root) == names[1:]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "refusing to delete commitlog file " + names[1] in errors[0]
    assert all(f"{t}:{q}" in errors[0] for t, q in QUEUES)
    assert store.retention.unarchived_refusals == {EXPIRY: 0, DISK_PRESSURE: 1}

    # over diskSpaceCleanForciblyRatio: even unexpired files would go, but not unarchived ones
    caplog.clear()
    now = time.time()
    for n in names[1:]:
        os.utime(root / "commitlog" / n, (now, now))
    disk.per_file, disk.base = 0.06, 0.62  # 5 files: 0.92 (writes refused until usage falls)
    with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
        rep = store.retention.run_once()
    assert rep.deleted_files == 0 and not rep.writable
    assert _names(root) == names[1:]
    assert sum(r.levelno == logging.ERROR and names[1] in r.getMessage() for r in caplog.records) == 1
    assert store.retention.unarchived_refusals[DISK_PRESSURE] == 2

    for q in QUEUES:  # the offload catches up: the oldest files go until usage is under 85% again
        archive.offsets[q] = store.get_max_offset(*q)
    rep = store.retention.run_once()
    assert rep.deleted_files == 2 and rep.writable  # 0.86, then 0.80
    assert _names(root) == names[3:]


def test_forced_config_deletes_unarchived_files_under_pressure_only(tiered_store, caplog):
    t = tiered_store(tiered_delete_unarchived_forcibly=True)
    store, root, disk, written, names = t.store, t.root, t.disk, t.written, t.names
    # no pressure: expired but unarchived files stay, forced or not
    assert store.retention.run_once().deleted_files == 0
    assert _names(root) == names

    disk.per_file, disk.base = 0.06, 0.50  # 6 files: 0.86 > 85%
    with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
        rep = store.retention.run_once()
    assert rep.deleted_files == 5  # every expired file (under 75% only once they are gone)
    assert _names(root) == names[-1:]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "forcibly" in r.getMessage()
                .lower()]
    assert len(warnings) == 5 and names[0] in warnings[0]
    assert store.retention.unarchived_refusals[DISK_PRESSURE] == 0
    for q in QUEUES:
        assert store.get_min_offset(*q) == _below(written, q, 5)


def test_cold_offset_is_the_first_message_in_the_active_file(tiered_store):
    t = tiered_store()
    store, written, names = t.store, t.written, t.names
    active = len(names) - 1
    for q in QUEUES:
        cold = store.get_cold_offset(*q)
        if _below(written, q, active) == len(written[q]):  # none in the active file
            assert cold == store.get_max_offset(*q)
        else:
            assert cold == _below(written, q, active)
            assert written[q][cold] >= active * COMMITLOG_FILE > written[q][cold - 1]
    # a queue whose newest message is in a full file: its cold offset is its max offset
    store.put_messages(MessageBatch.from_messages([Message("tierC", b"x")], 0))
    while len(store.commitlog.files.files) == len(names):
        store.put_messages(MessageBatch.from_messages([Message("tierB", body_for(0, 2000))] * 8, 0))
    assert store.get_cold_offset("tierC", 0) == store.get_max_offset("tierC", 0) == 1
    assert store.get_cold_offset("tierZ", 0) == 0  # no such queue
