"""A damaged commitlog tail is cut off at start-up, and only the damaged part.

Damaged units below the checkpoint's safe offset were durable, so they are no torn write:
recovery quarantines them (never served, their queue offsets kept) instead of cutting there.

The store is built by a clean run (everything flushed, checkpoint at the end) or by a killed
writer subprocess (checkpoint left behind at its start), then the tail of the commitlog is
damaged on disk: random bytes after the last unit, zeroed bytes inside the last units, or the
second half of the last unit zeroed (a torn write). With the checkpoint kept or deleted and
the abort file present, the reopened store must serve everything before the damage intact,
nothing from the damaged units on, and keep working.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.unit.decode import decode_message
from spark_mq.store.mapped_file import file_name
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus, PutStatus

from ._support import (
    COMMITLOG_FILE,
    SEED_ENV,
    body_for,
    check_units,
    crash_seed,
    key_for,
    kill,
    read_lines,
    read_queue,
    seq_of,
    spawn,
    store_config,
    wait_for_line,
)

TOPICS = ("crashA", "crashB", "crash_C")  # the writer subprocess's topics
QUEUES = 4


@dataclass(frozen=True)
class StoredUnit:
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int
    keyed: bool

    @property
    def end(self) -> int:
        return self.phys + self.size


def _record(units: list[StoredUnit], topic: str, qid: int, res, seqs: list[int], keyed: bool) -> None:
    for i, s in enumerate(seqs):
        units.append(StoredUnit(s, topic, qid, res.queue_offset + i, int(res.physical_offsets[i]),
                                int(res.sizes[i]), keyed))


def _put_in_process(store: MessageStore, units: list[StoredUnit], rng: random.Random, count: int, seq: int) -> int:
    done = 0
    while done < count:
        topic, qid = rng.choice(TOPICS), rng.randrange(QUEUES)
        n = min(rng.randint(1, 6), count - done)
        seqs = list(range(seq, seq + n))
        msgs = [Message(topic, body_for(s, rng.randint(13, 700)), tags="t", keys=[key_for(s)]) for s in seqs]
        res = store.put_messages(MessageBatch.from_messages(msgs, qid))
        assert res.status == PutStatus.PUT_OK
        _record(units, topic, qid, res, seqs, True)
        seq += n
        done += n
    return seq


def _build(root: Path, tmp: Path, how: str, seed: int) -> list[StoredUnit]:
    """Fill a store; returns every unit in commitlog order. ``how``: "clean" or "killed"."""
    rng = random.Random(seed)
    units: list[StoredUnit] = []
    store = MessageStore(store_config(root)).start()
    try:
        seq = _put_in_process(store, units, rng, 400, 1_000)
        if how == "clean":
            # make sure the last file holds the last three units, so all damage is in one file
            while sum(1 for u in units if u.phys >= store.commitlog.files.last.file_from_offset) < 3:
                seq = _put_in_process(store, units, rng, 1, seq)
    finally:
        store.shutdown()
    if how == "killed":
        out = tmp / "writer.out"
        # no periodic checkpoint: the one the writer takes at start-up stays the last
        proc = spawn("crash_writer.py", ["--root", str(root), "--seed", str(seed), "--seq-start", "500000",
                                         "--count", "120", "--checkpoint-ms", "3600000"], out)
        try:
            wait_for_line(out, proc, lambda line: line.get("done"))
        finally:
            kill(proc)
        for ack in read_lines(out):
            if "s" in ack:
                for i, s in enumerate(ack["s"]):
                    units.append(StoredUnit(s, ack["t"], ack["q"], ack["o"] + i, ack["p"][i], ack["z"][i], ack["k"]))
        assert (root / "abort").exists()
    units.sort(key=lambda u: u.phys)
    return units


def _pwrite(root: Path, phys: int, data: bytes) -> None:
    path = root / "commitlog" / file_name(phys - phys % COMMITLOG_FILE)
    pos = phys % COMMITLOG_FILE
    assert pos + len(data) <= COMMITLOG_FILE
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, pos) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _damage(root: Path, units: list[StoredUnit], mode: str, rng: random.Random) -> int:
    """Damage the tail; returns the commitlog offset recovery must cut at."""
    last, before = units[-1], units[-2]
    if mode == "garbage_after":
        room = COMMITLOG_FILE - last.end % COMMITLOG_FILE
        _pwrite(root, last.end, rng.randbytes(min(300, room)))
        return last.end
    if mode == "zeroed_inside":
        _pwrite(root, before.phys + 90, bytes(8))  # body bytes of the last two units
        _pwrite(root, last.phys + 90, bytes(8))
        return before.phys  # when past the safe offset (else they are quarantined)
    if mode == "torn_half":
        half = last.size // 2
        _pwrite(root, last.phys + half, bytes(last.size - half))
        return last.phys
    raise AssertionError(mode)


def _served(store: MessageStore) -> dict[tuple[str, int], list[int]]:
    out = {}
    for topic in TOPICS:
        for qid in store.queue_ids(topic):
            units = read_queue(store, topic, qid)
            assert check_units(units, topic, qid, gaps=True) == []  # _check_recovered compares the seqs
            out[(topic, qid)] = [seq_of(u.body) for u in units]
    return out


def _expect(units: list[StoredUnit], cut: int) -> dict[tuple[str, int], list[StoredUnit]]:
    out: dict[tuple[str, int], list[StoredUnit]] = {}
    for u in units:
        out.setdefault((u.topic, u.queue_id), [])
        if u.end <= cut:
            out[(u.topic, u.queue_id)].append(u)
    return out


def _check_recovered(store: MessageStore, units: list[StoredUnit], cut: int, ctx: str,
                     damaged: frozenset[int] = frozenset()) -> None:
    """Units ending by ``cut`` are served but the ``damaged`` ones (seqs), which keep their offsets."""
    assert store.commitlog.max_offset() == cut, ctx
    expected = _expect(units, cut)
    served = _served(store)
    for key, kept in expected.items():
        assert served.get(key, []) == [u.seq for u in kept if u.seq not in damaged], f"{ctx} {key}"
        assert store.get_max_offset(*key) == len(kept), f"{ctx} {key}: consume queue entries past the end kept"
    lost = [u for u in units if u.end > cut or u.seq in damaged]
    for u in lost:
        assert store.look_message_by_offset(u.phys) is None, ctx
        if u.keyed:
            assert store.query_by_key(u.topic, key_for(u.seq)) == [], f"{ctx} damaged seq {u.seq} found by key"
    for u in [u for u in units if u.end <= cut and u.keyed and u.seq not in damaged][-5:]:
        found = store.query_by_key(u.topic, key_for(u.seq))
        assert [seq_of(decode_message(m).body) for m in found] == [u.seq], ctx


@pytest.mark.parametrize("checkpoint", ["keep", "delete"])
@pytest.mark.parametrize("mode", ["garbage_after", "zeroed_inside", "torn_half"])
@pytest.mark.parametrize("how", ["clean", "killed"])
def test_damaged_tail_is_truncated_and_the_store_keeps_working(
    tmp_path: Path, how: str, mode: str, checkpoint: str
) -> None:
    seed = crash_seed()
    ctx = f"[{how}/{mode}/{checkpoint}, seed {seed} ({SEED_ENV}={seed} replays it)]"
    print(ctx)
    root = tmp_path / "store"
    units = _build(root, tmp_path, how, seed)
    files_before = sorted(p.name for p in (root / "commitlog").iterdir())
    assert len(files_before) >= 2, ctx
    cut = _damage(root, units, mode, random.Random(seed))
    damaged: frozenset[int] = frozenset()
    if how == "clean" and checkpoint == "keep" and mode != "garbage_after":  # below the safe offset
        damaged, cut = frozenset(u.seq for u in units if u.end > cut), units[-1].end
    if checkpoint == "delete":
        (root / "checkpoint").unlink()
    (root / "abort").touch()

    store = MessageStore(store_config(root)).start()
    try:
        rec = store.recovery
        ctx += f" {rec}"
        assert rec.abnormal, ctx
        assert rec.end_offset == cut, ctx
        _check_recovered(store, units, cut, ctx, damaged)
        assert store.corrupt_units == len(damaged), ctx
        # new puts go right where the damage was, and read back
        victim = next((u for u in units if u.end > cut), units[-1])
        qid = victim.queue_id
        before = store.get_max_offset(victim.topic, qid)
        res = store.put_messages(MessageBatch.from_messages(
            [Message(victim.topic, body_for(900_000 + i, 120), keys=[key_for(900_000 + i)]) for i in range(3)], qid))
        assert res.status == PutStatus.PUT_OK
        assert res.queue_offset == before, ctx
        room = COMMITLOG_FILE - cut % COMMITLOG_FILE  # the unit goes to the next file if it does not fit
        expected_phys = cut if int(res.sizes[0]) + 8 <= room else cut + room
        assert int(res.physical_offsets[0]) == expected_phys, ctx
        got = store.get_messages(victim.topic, qid, before, 10)
        assert got.status == GetStatus.FOUND and got.count == 3, ctx
        assert [seq_of(decode_message(m).body) for m in store.query_by_key(victim.topic, key_for(900_001))] == [900_001]
        for i in range(3):
            units.append(StoredUnit(900_000 + i, victim.topic, qid, before + i, int(res.physical_offsets[i]),
                                    int(res.sizes[i]), True))
        units = [u for u in units if u.end <= cut or u.seq >= 900_000]
        new_end = store.commitlog.max_offset()
    finally:
        store.shutdown()

    # a second reopen is stable: nothing replayed, same contents
    store = MessageStore(store_config(root)).start()
    try:
        assert not store.recovery.abnormal and store.recovery.units_replayed == 0, ctx
        _check_recovered(store, units, new_end, ctx + " (second reopen)", damaged)
    finally:
        store.shutdown()

    # and a full rescan (no checkpoint, crash) finds exactly the same end: no stale bytes behind it
    (root / "checkpoint").unlink()
    (root / "abort").touch()
    store = MessageStore(store_config(root)).start()
    try:
        rec = store.recovery
        assert rec.start_offset == 0 and rec.end_offset == new_end and rec.stop_reason == "zero", f"{ctx} {rec}"
        _check_recovered(store, units, new_end, ctx + " (full rescan)", damaged)
    finally:
        store.shutdown()


@pytest.mark.parametrize("how", ["clean", "killed"])
def test_flipped_byte_in_a_middle_unit_without_checkpoint_is_quarantined(tmp_path: Path, how: str) -> None:
    seed = crash_seed()
    ctx = f"[{how}, seed {seed} ({SEED_ENV}={seed} replays it)]"
    print(ctx)
    root = tmp_path / "store"
    units = _build(root, tmp_path, how, seed)
    files = sorted(p.name for p in (root / "commitlog").iterdir())
    assert len(files) >= 3, ctx
    # a unit in the middle of the second file
    second = [u for u in units if COMMITLOG_FILE <= u.phys < 2 * COMMITLOG_FILE]
    victim = second[len(second) // 2]
    body_at = victim.phys + 88 + 5  # a byte inside the body
    path = root / "commitlog" / file_name(COMMITLOG_FILE)
    data = bytearray(path.read_bytes())
    data[body_at % COMMITLOG_FILE] ^= 0x40
    _pwrite(root, body_at, bytes([data[body_at % COMMITLOG_FILE]]))
    (root / "checkpoint").unlink()
    (root / "abort").touch()

    store = MessageStore(store_config(root)).start()
    try:
        rec = store.recovery
        ctx += f" {rec}"
        end = units[-1].end
        assert rec.abnormal and rec.start_offset == 0, ctx
        assert rec.end_offset == end and rec.quarantined == 1, ctx
        assert sorted(p.name for p in (root / "commitlog").iterdir()) == files, "no file is deleted"
        # every unit but the damaged one is served, and no queue offset moved
        _check_recovered(store, units, end, ctx, frozenset({victim.seq}))
        assert store.corrupt_units == 1, ctx
        before = store.get_max_offset(victim.topic, victim.queue_id)
        res = store.put_message(Message(victim.topic, body_for(777_777, 50)), victim.queue_id)
        assert res.queue_offset == before > victim.queue_offset and int(res.physical_offsets[0]) >= end, ctx
        got = read_queue(store, victim.topic, victim.queue_id)
        assert seq_of(got[-1].body) == 777_777 and check_units(got, victim.topic, victim.queue_id, gaps=True) == []
        assert victim.seq not in {seq_of(u.body) for u in got}, ctx
    finally:
        store.shutdown()
