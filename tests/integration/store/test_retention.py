"""Retention: which commitlog files go when, and what follows them (consume queue files,
index files, queue minimums, key queries, the write barrier).

The store gets an injected clock and disk-usage function; ``store.retention.run_once()`` is
called directly (the background thread's interval is an hour). Files are aged with os.utime.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from spark_mq.common.errors import StoreNotWritableError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.unit.decode import decode_message
from spark_mq.store.consume_queue import entry_record
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus, PutStatus
from spark_mq.store.retention import ReplicaFloor, no_floor

from ._support import COMMITLOG_FILE, body_for, check_units, key_for, read_queue, seq_of, store_config

HOUR = 3600.0
TOPIC = "retT"
OLD_TOPIC = "retOld"  # written only at the start: all of it ends up in deleted files


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Disk:
    """Injected disk usage: a fixed ratio, or one computed from the commitlog files left."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.per_file: float | None = None
        self.base = 0.0
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> float:
        self.calls.append(path)
        if self.per_file is not None:
            files = [p for p in (path / "commitlog").iterdir() if p.name.isdigit()]
            return self.base + self.per_file * len(files)
        return self.ratio


def _hour_start(hour_offset: int) -> float:
    """A local time at minute 10 of some hour, ``hour_offset`` hours from now."""
    t = time.time() + hour_offset * HOUR
    lt = time.localtime(t)
    return t - lt.tm_min * 60 - lt.tm_sec + 600


def _open(root: Path, clock: Clock, disk: Disk, consumed: dict | None = None, replica_floor: ReplicaFloor = no_floor,
          **overrides) -> MessageStore:
    """A store with small files; ``consumed`` maps (topic, queue) to each group's committed offset."""
    cfg = store_config(
        root,
        maped_file_size_consume_queue=20 * 50,  # 50 entries per consume queue file
        max_hash_slot_num=64,
        max_index_num=100,  # ~99 keys per index file
        file_reserved_time=48,
        delete_when=overrides.pop("delete_when", "04"),
        **overrides,
    )
    table = {} if consumed is None else consumed
    return MessageStore(cfg, disk_ratio=disk, clock=clock, consumed_offsets=lambda t, q: table.get((t, q), {}),
                        replica_floor=replica_floor).start()


def _fill(store: MessageStore, files: int, seq0: int = 0) -> dict[int, tuple[str, int, int, int]]:
    """Put keyed messages until the commitlog has ``files`` files; seq -> (topic, queue, offset, phys)."""
    written: dict[int, tuple[str, int, int, int]] = {}
    seq = seq0
    while len(store.commitlog.files.files) < files:
        topic = OLD_TOPIC if seq - seq0 < 60 else TOPIC
        qid = 0 if topic == OLD_TOPIC else (seq // 8) % 2
        seqs = list(range(seq, seq + 8))
        msgs = [Message(topic, body_for(s, 300), tags="r", keys=[key_for(s)]) for s in seqs]
        res = store.put_messages(MessageBatch.from_messages(msgs, qid))
        assert res.status == PutStatus.PUT_OK
        for i, s in enumerate(seqs):
            written[s] = (topic, qid, res.queue_offset + i, int(res.physical_offsets[i]))
        seq += 8
    store.get_max_offset(TOPIC, 0)  # a read catches dispatch up: queue and index files are on disk
    return written


def _commitlog_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "commitlog").iterdir() if p.name.isdigit())


def _age(root: Path, names: list[str], mtime: float) -> None:
    for n in names:
        os.utime(root / "commitlog" / n, (mtime, mtime))


def _cq_files_last_end(qdir: Path) -> list[tuple[str, int]]:
    """Each consume queue file on disk with the end (phys + size) of its last entry."""
    out = []
    for p in sorted(qdir.iterdir()):
        ent = np.frombuffer(p.read_bytes(), dtype=entry_record())
        used = np.flatnonzero(ent["size"] > 0)
        last = int(ent["phys"][used[-1]]) + int(ent["size"][used[-1]]) if used.size else -1
        out.append((p.name, last))
    return out


def _index_end_phys(root: Path) -> list[tuple[str, int]]:
    out = []
    for p in sorted((root / "index").iterdir()):
        with open(p, "rb") as f:
            head = f.read(40)
        out.append((p.name, struct.unpack_from(">q", head, 24)[0]))
    return out


def _check_after_deletion(store: MessageStore, root: Path, written: dict, new_min: int) -> None:
    """Everything that depended on the deleted commitlog files went with them."""
    assert store.commitlog.min_offset() == new_min
    # consume queue files: all but the last of each queue must still point at or past new_min
    for qdir in sorted((root / "consumequeue").glob("*/*")):
        files = _cq_files_last_end(qdir)
        assert files, qdir
        for name, end in files[:-1]:
            assert end > new_min, f"{qdir}/{name} only points below the commitlog min {new_min}"
    # index files: likewise, apart from the newest
    idx = _index_end_phys(root)
    for name, end_phys in idx[:-1]:
        assert end_phys >= new_min, f"index file {name} only points below the commitlog min {new_min}"

    for topic, qid in [(OLD_TOPIC, 0), (TOPIC, 0), (TOPIC, 1)]:
        mine = sorted((off, phys, s) for s, (t, q, off, phys) in written.items() if (t, q) == (topic, qid))
        first_kept = next((off for off, phys, _ in mine if phys >= new_min), mine[-1][0] + 1)
        lo = store.get_min_offset(topic, qid)
        assert lo == first_kept, f"{topic}:{qid} min offset {lo}, first message still stored is {first_kept}"
        if lo > 0:
            res = store.get_messages(topic, qid, 0, 10)
            assert res.status == GetStatus.OFFSET_TOO_SMALL
            assert res.next_begin_offset == lo
            res = store.get_messages(topic, qid, lo - 1, 10)
            assert res.status == GetStatus.OFFSET_TOO_SMALL and res.next_begin_offset == lo
        units = read_queue(store, topic, qid)
        assert check_units(units, topic, qid) == []
        assert [seq_of(u.body) for u in units] == [s for off, phys, s in mine if phys >= new_min]

    for s, (topic, _q, _off, phys) in sorted(written.items())[:: max(1, len(written) // 40)]:
        found = [seq_of(decode_message(u).body) for u in store.query_by_key(topic, key_for(s))]
        assert found == ([s] if phys >= new_min else []), f"query_by_key {key_for(s)} (phys {phys}, min {new_min})"
        assert (store.look_message_by_offset(phys) is None) == (phys < new_min)


def test_expired_files_go_only_at_the_delete_when_hour(tmp_path: Path) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    this_hour = time.localtime(now).tm_hour
    next_hour = time.localtime(now + HOUR).tm_hour
    clock, disk = Clock(now), Disk(0.10)
    store = _open(root, clock, disk, delete_when=f"{next_hour:02d}")
    try:
        written = _fill(store, 7)
        names = _commitlog_names(root)
        assert len(names) == 7
        cq_before = len(list((root / "consumequeue").rglob("0*")))
        index_before = len(list((root / "index").iterdir()))
        _age(root, names[:3], now - 72 * HOUR)  # past fileReservedTime (48 h)
        _age(root, names[3:5], now - 24 * HOUR)  # not yet

        rep = store.retention.run_once()
        assert rep.deleted_files == 0, f"deleted at hour {this_hour} though deleteWhen={next_hour}"
        assert _commitlog_names(root) == names
        assert disk.calls and disk.calls[-1] == root

        clock.now = now + HOUR  # the deleteWhen hour: files aged 24 h + 1 h are still not expired
        rep = store.retention.run_once()
        assert rep.deleted_files == 3
        assert _commitlog_names(root) == names[3:]
        new_min = 3 * COMMITLOG_FILE
        _check_after_deletion(store, root, written, new_min)
        assert len(list((root / "consumequeue").rglob("0*"))) < cq_before
        assert len(list((root / "index").iterdir())) < index_before

        # nothing else is expired: another run at the same hour deletes nothing
        assert store.retention.run_once().deleted_files == 0
        # new puts still work and are readable
        res = store.put_message(Message(TOPIC, body_for(9_999_999, 50), keys=["after"]), 0)
        assert res.status == PutStatus.PUT_OK
        assert seq_of(decode_message(store.query_by_key(TOPIC, "after")[0]).body) == 9_999_999
        written[9_999_999] = (TOPIC, 0, res.queue_offset, int(res.physical_offsets[0]))
    finally:
        store.shutdown()

    # the deletion survives a restart: minimums come back where they were
    store = _open(root, clock, disk, delete_when=f"{next_hour:02d}")
    try:
        assert not store.recovery.abnormal
        _check_after_deletion(store, root, written, 3 * COMMITLOG_FILE)
    finally:
        store.shutdown()


def test_expired_files_go_at_any_hour_once_disk_passes_max_used_ratio(tmp_path: Path) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    other_hour = (time.localtime(now).tm_hour + 12) % 24
    clock, disk = Clock(now), Disk(0.70)
    store = _open(root, clock, disk, delete_when=f"{other_hour:02d}", disk_max_used_space_ratio=75)
    try:
        written = _fill(store, 6)
        names = _commitlog_names(root)
        _age(root, names[:2], now - 49 * HOUR)
        assert store.retention.run_once().deleted_files == 0  # 70% < 75%, and not the hour

        disk.ratio = 0.80  # over diskMaxUsedSpaceRatio, under diskSpaceCleanForciblyRatio (85%)
        rep = store.retention.run_once()
        assert rep.deleted_files == 2, "only the expired files go"
        assert rep.writable
        assert _commitlog_names(root) == names[2:]
        _check_after_deletion(store, root, written, 2 * COMMITLOG_FILE)
        assert store.retention.run_once().deleted_files == 0  # the rest is not expired
    finally:
        store.shutdown()


def test_over_clean_forcibly_ratio_oldest_files_go_until_usage_falls(tmp_path: Path) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    other_hour = (time.localtime(now).tm_hour + 12) % 24
    clock, disk = Clock(now), Disk(0.10)
    store = _open(root, clock, disk, delete_when=f"{other_hour:02d}")
    try:
        written = _fill(store, 8)
        names = _commitlog_names(root)
        assert len(names) == 8
        # usage = 0.40 + 0.06 per file: 8 files -> 0.88 (> 0.85 forcibly, < 0.90 warning);
        # it takes deleting 1 file (-> 0.82) to get back under 0.85
        disk.per_file, disk.base = 0.06, 0.40
        rep = store.retention.run_once()
        assert rep.deleted_files == 1, rep
        assert _commitlog_names(root) == names[1:], "the oldest file goes first"
        assert rep.writable
        _check_after_deletion(store, root, written, COMMITLOG_FILE)

        # steeper: 7 files -> 0.40 + 7 * 0.08 = 0.96 (over the warning ratio too);
        # 0.88, 0.80: two more files go and writes are allowed again
        disk.per_file = 0.08
        rep = store.retention.run_once()
        assert rep.deleted_files == 2, rep
        assert rep.writable and store.retention.writable
        assert _commitlog_names(root) == names[3:]
        _check_after_deletion(store, root, written, 3 * COMMITLOG_FILE)
        assert store.put_message(Message(TOPIC, body_for(1, 20)), 0).status == PutStatus.PUT_OK
    finally:
        store.shutdown()


def test_a_slave_deletes_only_files_its_master_deleted(tmp_path: Path) -> None:
    """``replica_floor`` (a slave's master's commitlog min offset) bounds expiry and forced deletion alike."""
    root = tmp_path / "store"
    now = _hour_start(0)
    clock, disk = Clock(now), Disk(0.10)
    master_min = [0]  # not learned yet
    store = _open(root, clock, disk, replica_floor=lambda: master_min[0],
                  delete_when=f"{time.localtime(now).tm_hour:02d}")
    try:
        written = _fill(store, 8)
        names = _commitlog_names(root)
        _age(root, names[:5], now - 72 * HOUR)  # past fileReservedTime (48 h), at the deleteWhen hour
        assert store.retention.run_once().deleted_files == 0
        assert store.retention.kept_for_master == 1

        master_min[0] = 2 * COMMITLOG_FILE + 100  # the master deleted two files (and is inside its third)
        assert store.retention.run_once().deleted_files == 2
        assert _commitlog_names(root) == names[2:]
        _check_after_deletion(store, root, written, 2 * COMMITLOG_FILE)

        # over diskSpaceCleanForciblyRatio whatever goes: the oldest files would go even unexpired, but
        # only as far as the master's
        disk.ratio = 0.88
        master_min[0] = 5 * COMMITLOG_FILE
        assert store.retention.run_once().deleted_files == 3  # the expired ones the master deleted
        assert _commitlog_names(root) == names[5:]
        master_min[0] = 7 * COMMITLOG_FILE
        assert store.retention.run_once().deleted_files == 2  # unexpired, forced
        assert _commitlog_names(root) == names[7:]
        _check_after_deletion(store, root, written, 7 * COMMITLOG_FILE)
    finally:
        store.shutdown()


def test_over_warning_ratio_writes_are_refused_until_usage_drops(tmp_path: Path) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    other_hour = (time.localtime(now).tm_hour + 12) % 24
    clock, disk = Clock(now), Disk(0.10)
    store = _open(root, clock, disk, delete_when=f"{other_hour:02d}")
    try:
        written = _fill(store, 4)
        names = _commitlog_names(root)
        # usage stays at 95% whatever is deleted: retention deletes what it may, but never the
        # active file, and writes stay refused
        disk.ratio = 0.95
        for _ in range(3):
            rep = store.retention.run_once()
            assert not rep.writable
        assert _commitlog_names(root) == names[-1:], "everything but the active file goes"
        last_file = root / "commitlog" / names[-1]
        assert last_file.exists()

        with pytest.raises(StoreNotWritableError) as err:
            store.put_message(Message(TOPIC, body_for(5, 20)), 0)
        msg = str(err.value)
        assert "diskSpaceWarningLevelRatio" in msg and "90%" in msg, msg
        with pytest.raises(StoreNotWritableError):
            store.put_messages(MessageBatch.of(TOPIC, 1, [body_for(6, 20)]))
        # reads still work while writes are refused
        last_seq = max(written)
        t, q, off, _ = written[last_seq]
        res = store.get_messages(t, q, off, 1)
        assert res.status == GetStatus.FOUND

        disk.ratio = 0.50
        rep = store.retention.run_once()
        assert rep.writable and rep.deleted_files == 0
        res = store.put_message(Message(TOPIC, body_for(7, 20), keys=["back"]), 0)
        assert res.status == PutStatus.PUT_OK
        assert store.get_messages(TOPIC, 0, res.queue_offset, 1).status == GetStatus.FOUND
        assert _commitlog_names(root)[0] == names[-1]
    finally:
        store.shutdown()


def _in_file(written: dict, topic: str, queue_id: int, index: int) -> list[int]:
    """Queue offsets of ``topic:queue_id`` stored in commitlog file ``index``."""
    return sorted(o for t, q, o, phys in written.values()
                  if (t, q) == (topic, queue_id) and phys // COMMITLOG_FILE == index)


def test_forced_clean_up_keeps_messages_a_group_has_not_consumed(tmp_path: Path, caplog) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    consumed: dict[tuple[str, int], dict[str, int]] = {}
    disk = Disk()
    disk.per_file, disk.base = 0.05, 0.67  # 4 files: 87%, over diskSpaceCleanForciblyRatio (85%)
    store = _open(root, Clock(now), disk, consumed, delete_when=f"{(time.localtime(now).tm_hour + 12) % 24:02d}")
    try:
        written = _fill(store, 4)
        names = _commitlog_names(root)
        consumed[(OLD_TOPIC, 0)] = {"done": store.get_max_offset(OLD_TOPIC, 0)}  # consumed everything
        consumed[(TOPIC, 0)] = {"slow": 0, "done": store.get_max_offset(TOPIC, 0)}
        with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
            rep = store.retention.run_once()
        assert rep.deleted_files == 0 and not rep.writable and _commitlog_names(root) == names
        in_first = len(_in_file(written, TOPIC, 0, 0))
        assert in_first > 0
        with pytest.raises(StoreNotWritableError) as refused:
            store.put_message(Message(TOPIC, body_for(0, 20)), 0)
        assert f"{TOPIC}@slow: {in_first}" in str(refused.value) and "done" not in str(refused.value)
        assert sum("refusing writes" in r.getMessage() for r in caplog.records) == 1
        assert read_queue(store, TOPIC, 0)[0].queue_offset == 0  # nothing of it went

        consumed[(TOPIC, 0)]["slow"] = _in_file(written, TOPIC, 0, 1)[0]  # consumed the first file
        rep = store.retention.run_once()
        assert rep.deleted_files == 1 and rep.writable  # 82%: done
        assert _commitlog_names(root) == names[1:] and store.retention.unconsumed_deleted == {}
        assert store.put_message(Message(TOPIC, body_for(1, 20)), 0).status == PutStatus.PUT_OK
    finally:
        store.shutdown()


def test_clean_unconsumed_forcibly_deletes_and_counts_per_topic_and_group(tmp_path: Path, caplog) -> None:
    root = tmp_path / "store"
    now = _hour_start(0)
    consumed: dict[tuple[str, int], dict[str, int]] = {}
    disk = Disk()
    disk.per_file, disk.base = 0.05, 0.67  # 4 files: 87%; 82% once the oldest is gone
    store = _open(root, Clock(now), disk, consumed, clean_unconsumed_forcibly=True,
                  delete_when=f"{(time.localtime(now).tm_hour + 12) % 24:02d}")
    try:
        written = _fill(store, 4)
        consumed[(TOPIC, 0)] = {"slow": 0, "half": len(_in_file(written, TOPIC, 0, 0)) // 2}
        consumed[(TOPIC, 1)] = {"slow": 0}
        with caplog.at_level(logging.INFO, "spark_mq.store.retention"):
            rep = store.retention.run_once()
        assert rep.deleted_files == 1 and rep.writable
        q0, q1 = _in_file(written, TOPIC, 0, 0), _in_file(written, TOPIC, 1, 0)
        expected = {(TOPIC, "half"): len(q0) - len(q0) // 2, (TOPIC, "slow"): len(q0) + len(q1)}
        assert store.retention.unconsumed_deleted == expected
        logged = [r.getMessage() for r in caplog.records if "cleanUnconsumedForcibly=true" in r.getMessage()]
        assert len(logged) == 1 and all(f"{t}@{g}: {n}" in logged[0] for (t, g), n in expected.items()), logged
        assert store.get_min_offset(TOPIC, 0) == q0[-1] + 1
    finally:
        store.shutdown()
