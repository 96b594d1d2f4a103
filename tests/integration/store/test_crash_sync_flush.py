"""Acceptance test: SIGKILL a SYNC_FLUSH writer at random moments and check what recovery
brings back.

A writer subprocess (``crash_writer.py``) appends to a store with 64 KiB commitlog files and
prints an ack line after every PUT_OK. The test kills it after a random delay, then opens the
store and checks that every acknowledged message is served exactly once, in order, at its
acknowledged queue offset, with an intact body whose CRC matches the stored BODYCRC. All runs
of one test share one store directory, so each recovery starts from what the previous crash
(and the previous recovery) left behind.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from spark_mq.common.config import SYNC_FLUSH
from spark_mq.common.unit.decode import decode_message
from spark_mq.store.message_store import MessageStore

from ._support import (
    SEED_ENV,
    Acks,
    crash_seed,
    kill,
    read_lines,
    seq_of,
    spawn,
    store_config,
    verify_store,
    wait_for_line,
)

TOPICS = ("crashA", "crashB", "crash_C")
SEQ_STRIDE = 10_000_000  # run i writes seqs [i * SEQ_STRIDE, ...): unique and increasing across runs


class CrashCampaign:
    """Kill-and-recover runs over one store directory."""

    def __init__(self, tmp: Path, base_seed: int) -> None:
        self.tmp = tmp
        self.root = tmp / "store"
        self.base_seed = base_seed
        self.acks = Acks()
        self.killed_while_writing = 0
        self.files_seen: set[str] = set()

    def context(self, run: int, seed: int, extra: str = "") -> str:
        return f"[base seed {self.base_seed}, run {run}, run seed {seed}] {extra}"

    def run(self, run: int, check: bool | None = None) -> None:
        seed = self.base_seed * 100_000 + run
        rng = random.Random(seed)
        delay = rng.uniform(0.05, 1.0)
        # now and then kill at a random moment after spawn: possibly during start-up recovery
        from_spawn = rng.random() < 0.2
        if check is None:
            check = rng.random() < 0.75  # otherwise the next writer recovers this crash itself
        ctx = self.context(run, seed, f"delay {delay:.3f}s from {'spawn' if from_spawn else 'ready'}")

        abort_before = (self.root / "abort").exists()
        out = self.tmp / f"writer-{run}.out"
        proc = spawn("crash_writer.py", ["--root", str(self.root), "--seed", str(seed),
                                         "--seq-start", str((run + 1) * SEQ_STRIDE)], out)
        ready = None
        try:
            if not from_spawn:
                ready = wait_for_line(out, proc, lambda line: "ready" in line)
                assert ready["recovery"]["abnormal"] == abort_before, ctx + f" writer recovery {ready['recovery']}"
            time.sleep(delay)
            assert proc.poll() is None, ctx + " writer exited by itself:\n" + out.with_suffix(".err").read_text()
        finally:
            kill(proc)
        lines = read_lines(out)
        acks = [line for line in lines if "s" in line]
        for ack in acks:
            self.acks.add(ack)
        if acks:
            self.killed_while_writing += 1
        self.files_seen |= {p.name for p in (self.root / "commitlog").glob("0*")}
        if any("ready" in line for line in lines):
            assert (self.root / "abort").exists(), ctx + " the abort file must survive a SIGKILL"
        if check:
            self.check(ctx, seed)

    def check(self, ctx: str, seed: int) -> None:
        abort_before = (self.root / "abort").exists()
        store = MessageStore(store_config(self.root, flush_disk_type=SYNC_FLUSH)).start()
        try:
            rec = store.recovery
            ctx = f"{ctx} recovery {rec}"
            assert rec.abnormal == abort_before, ctx
            problems = verify_store(store, self.acks, TOPICS)
            assert not problems, ctx + "\n" + "\n".join(problems[:30])
            self.check_keys(store, random.Random(seed), ctx)
        finally:
            store.shutdown()
        assert not (self.root / "abort").exists(), ctx + " a clean shutdown removes the abort file"

    def check_keys(self, store: MessageStore, rng: random.Random, ctx: str) -> None:
        keyed = sorted(self.acks.keys)
        sample = set(keyed[-5:]) | set(rng.sample(keyed, min(15, len(keyed))))
        for seq in sorted(sample):
            topic, key = self.acks.keys[seq]
            found = [decode_message(u) for u in store.query_by_key(topic, key)]
            assert [seq_of(m.body) for m in found] == [seq], ctx + f" query_by_key({topic}, {key})"
            assert found[0].keys == [key] and found[0].properties["seq"] == str(seq), ctx


def test_sigkill_sync_flush_writer_loses_no_acknowledged_message(tmp_path: Path) -> None:
    base = crash_seed()
    print(f"crash test base seed {base} (rerun with {SEED_ENV}={base})")
    campaign = CrashCampaign(tmp_path, base)
    runs = 12  # ~2,500 acknowledged and ~20 64 KiB files rolled per run (measured); the slow test runs 200
    for run in range(runs):
        campaign.run(run, check=True if run == runs - 1 else None)
    # the campaign really exercised what it claims to
    assert campaign.acks.count > 500, f"only {campaign.acks.count} messages acknowledged (seed {base})"
    assert campaign.killed_while_writing >= runs // 2, f"seed {base}"
    assert len(campaign.files_seen) >= 3, f"no commitlog file rolls (seed {base}): {sorted(campaign.files_seen)}"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sigkill_sync_flush_writer_200_runs(tmp_path: Path) -> None:
    base = crash_seed()
    print(f"crash test base seed {base} (rerun with {SEED_ENV}={base})")
    # chains of 25 runs per store directory keep each check's full read short
    for chain in range(8):
        campaign = CrashCampaign(tmp_path / f"chain{chain}", base * 10 + chain)
        (tmp_path / f"chain{chain}").mkdir()
        for run in range(25):
            campaign.run(run, check=True if run == 24 else None)
        assert campaign.acks.count > 0
