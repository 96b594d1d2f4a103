"""Durability machinery: SYNC_FLUSH group commit and ASYNC_FLUSH's periodic flush and checkpoint."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from servers import wait_until

from spark_mq.common.config import ASYNC_FLUSH, SYNC_FLUSH
from spark_mq.common.message import Message, MessageBatch
from spark_mq.store.checkpoint import Checkpoint
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import PutStatus

from ._support import body_for, check_units, key_for, read_queue, seq_of, store_config

THREADS = 8
PUTS_PER_THREAD = 250
QUEUES = 2


def test_sync_flush_group_commit_shares_flushes_between_concurrent_puts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(store_config(root, flush_disk_type=SYNC_FLUSH)).start()
    results: dict[int, list[tuple[int, int, int, PutStatus]]] = {t: [] for t in range(THREADS)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(PUTS_PER_THREAD):
                seq = t * 1_000_000 + i
                qid = (t + i) % QUEUES
                msg = Message("flushT", body_for(seq, 40), tags="t", keys=[key_for(seq)])
                res = store.put_message(msg, qid)
                results[t].append((seq, qid, res.queue_offset, res.status))
        except BaseException as e:  # surfaced below
            errors.append(e)

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
        elapsed = time.perf_counter() - t0
        assert not errors, errors
        puts = THREADS * PUTS_PER_THREAD
        statuses = [r[3] for rs in results.values() for r in rs]
        assert len(statuses) == puts
        assert set(statuses) == {PutStatus.PUT_OK}

        gc = store._group_commit
        assert gc is not None
        print(f"{puts} sync puts from {THREADS} threads in {elapsed:.2f}s with {gc.flush_count} flushes")
        # shared flushes: fewer fdatasyncs than puts. How many fewer depends on how long one fdatasync
        # takes next to the CPU cost of a put (on a fast virtual disk ~0.4-0.65 flushes per put).
        assert 0 < gc.flush_count <= puts * 0.8, f"{gc.flush_count} flushes for {puts} puts: flushes are not shared"
        # everything a put returned for is flushed
        assert store.commitlog.flushed_offset() == store.commitlog.max_offset()
        assert gc.flushed >= store.commitlog.max_offset()

        # every put got its own offset, and the offsets of a queue have no gaps
        for qid in range(QUEUES):
            offsets = sorted(r[2] for rs in results.values() for r in rs if r[1] == qid)
            assert offsets == list(range(len(offsets))), f"queue {qid}"
            units = read_queue(store, "flushT", qid)
            assert check_units(units, "flushT", qid, ordered=False) == []
            by_offset = {u.queue_offset: seq_of(u.body) for u in units}
            for rs in results.values():
                for seq, q, off, _ in rs:
                    if q == qid:
                        assert by_offset[off] == seq
            # each thread's own messages come out in the order it put them
            for t in range(THREADS):
                mine = [seq_of(u.body) for u in units if seq_of(u.body) // 1_000_000 == t]
                assert mine == sorted(mine)
    finally:
        store.shutdown()


def _read_checkpoint(root: Path) -> tuple[bool, int, int]:
    cp = Checkpoint(root / "checkpoint")
    try:
        return cp.valid, cp.safe_offset, cp.physic_msg_timestamp
    finally:
        cp.close()


def test_async_flush_checkpoint_advances_and_clean_restart_replays_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cfg = store_config(root, flush_disk_type=ASYNC_FLUSH, flush_interval_commit_log=50,
                       flush_interval_consume_queue=100)
    store = MessageStore(cfg).start()
    try:
        assert store._group_commit is None
        assert (root / "abort").exists()
        valid, safe0, _ = _read_checkpoint(root)
        assert valid and safe0 == 0

        last = None
        for i in range(60):  # ~ 3 commitlog files
            bodies = [body_for(i * 100 + j, 200) for j in range(10)]
            last = store.put_messages(MessageBatch.of("asyncT", i % 3, bodies))
            assert last.status == PutStatus.PUT_OK
        end = store.commitlog.max_offset()
        assert end > 2 * cfg.maped_file_size_commit_log

        # the checkpoint and the commitlog flush catch up (the background flushes, no put asking)
        def checkpoint_at_end() -> tuple[bool, int, int] | None:
            read = _read_checkpoint(root)
            return read if read[1] == end else None

        valid, _, ts = wait_until(checkpoint_at_end, what=f"the checkpoint's safe offset at the commitlog end {end}")
        assert valid and ts == last.store_timestamp
        wait_until(lambda: store.commitlog.flushed_offset() == end, what="the commitlog flushed to its end")
        max_offsets = {q: store.get_max_offset("asyncT", q) for q in range(3)}
    finally:
        store.shutdown()
    assert not (root / "abort").exists(), "a clean shutdown removes the abort file"
    valid, safe, _ = _read_checkpoint(root)
    assert valid and safe == end

    store = MessageStore(cfg).start()
    try:
        rec = store.recovery
        assert rec.abnormal is False
        assert rec.units_replayed == 0
        # the queues ended where the clean stop left them: nothing is walked before serving, the
        # last checkCRCOnRecoverFiles files are checked in the background
        assert rec.start_offset == rec.end_offset == end
        assert store.startup_check is not None
        store.startup_check.join(30)
        assert store.corrupt_units == 0
        assert store.commitlog.max_offset() == end
        for q in range(3):
            assert store.get_max_offset("asyncT", q) == max_offsets[q]
            units = read_queue(store, "asyncT", q)
            assert len(units) == max_offsets[q]
            assert check_units(units, "asyncT", q) == []
        # and it keeps appending where it stopped
        res = store.put_message(Message("asyncT", body_for(999_999, 50)), 0)
        assert res.queue_offset == max_offsets[0]
        assert int(res.physical_offsets[0]) == end
    finally:
        store.shutdown()
