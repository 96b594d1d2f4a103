"""SIGKILL during a truncation, at every step of it, then recovery.

The test writes a store (three topics, four queues each, keyed messages, 64 KiB commitlog files,
an index of several files, epochs 1, 2 and 3) and shuts it down. A subprocess
(``truncate_crasher.py``) opens it and cuts it back to a unit in the second commitlog file, as a
slave rejoining a new master does, and is SIGKILLed at one step of the truncation. The test then
opens the store (a crash recovery) and checks what survived, by reads and key queries and by an
independent struct reader of the commitlog files: a crash before the commitlog's cut is durable
gives back the whole store as it was (the caller truncates again: done here too), a crash after it
gives exactly the prefix below the cut. Never a mix: every served message intact at its offset,
no entry without its unit, no unit without its entry.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ha.commitlog_files import read_commitlog

from spark_mq.common.message import Message, MessageBatch
from spark_mq.store.ha.epoch_file import FILE_NAME, EpochEntry, EpochFile
from spark_mq.store.ha.replica_epochs import begin_epoch, open_epochs
from spark_mq.store.message_store import MessageStore

from . import _support as support
from ._support import COMMITLOG_FILE, Acks, body_for, key_for, read_queue, seq_of, store_config, verify_store

TOPICS = ("truncA", "truncB", "trunc_C")
INDEX_ENTRIES = 256  # per index file: the cut lands in a later index file than the first
QUEUES = 4
BEFORE_CUT = ("queues", "queues-half", "index")  # the commitlog still whole: the old store comes back
AFTER_CUT = ("cut", "delete", "bookkeeping", "epochs", "done")  # exactly the prefix comes back


@dataclass(frozen=True)
class Written:
    topic: str
    queue_id: int
    queue_offset: int
    seq: int
    phys: int


def config(root: Path):
    return store_config(root, max_index_num=INDEX_ENTRIES)


def write(store: MessageStore, rng: random.Random, seq: int, count: int) -> list[Written]:
    out: list[Written] = []
    while len(out) < count:
        topic, qid, n = rng.choice(TOPICS), rng.randrange(QUEUES), rng.randint(1, 8)
        seqs = range(seq, seq + n)
        seq += n
        msgs = [Message(topic, body_for(s, rng.randint(13, 900)), keys=[key_for(s)]) for s in seqs]
        res = store.put_messages(MessageBatch.from_messages(msgs, qid))
        out += [Written(topic, qid, res.queue_offset + i, s, int(res.physical_offsets[i]))
                for i, s in enumerate(seqs)]
    return out


def acks_of(written: list[Written]) -> Acks:
    acks = Acks()
    for w in written:
        acks.add({"t": w.topic, "q": w.queue_id, "o": w.queue_offset, "s": [w.seq], "k": True})
    return acks


def check(store: MessageStore, expected: list[Written], gone: list[Written], cut_end: int) -> None:
    problems = verify_store(store, acks_of(expected), TOPICS)
    assert problems == [], problems[:10]
    served = sum(store.get_max_offset(t, q) - store.get_min_offset(t, q) for t in TOPICS for q in store.queue_ids(t))
    assert served == len(expected)
    assert store.commitlog.max_offset() == cut_end
    on_disk = read_commitlog(store.root)  # the files themselves, read without our store code
    assert [u.offset for u in on_disk.units] == [w.phys for w in expected]
    assert on_disk.end == cut_end
    assert all(int(p.name) < cut_end for p in (store.root / "commitlog").iterdir())
    for w in expected[-10:]:
        assert store.query_by_key(w.topic, key_for(w.seq)), w
    for w in gone[:10]:
        assert store.query_by_key(w.topic, key_for(w.seq)) == []


@pytest.fixture(scope="module")
def written_store(tmp_path_factory):
    """A store to copy for each run, what it holds, the cut and the epoch offsets."""
    root = tmp_path_factory.mktemp("truncation") / "template"
    rng = random.Random(7)
    store = MessageStore(config(root)).start()
    epochs = open_epochs(store)
    begin_epoch(store, epochs, 1)
    written = write(store, rng, 0, 80)
    begin_epoch(store, epochs, 2)
    epoch2 = store.commitlog.max_offset()
    written += write(store, rng, 10_000, 300)
    cut_at = next(i for i, w in enumerate(written) if w.phys > COMMITLOG_FILE + COMMITLOG_FILE // 3)
    cut = written[cut_at].phys
    begin_epoch(store, epochs, 3)
    epoch3 = store.commitlog.max_offset()
    written += write(store, rng, 20_000, 600)
    assert store.commitlog.max_offset() > 5 * COMMITLOG_FILE  # several later files to delete
    assert epoch2 < cut < epoch3
    store.shutdown()  # (dispatches the index)
    assert len(list((root / "index").iterdir())) >= 3
    return root, written, cut_at, cut, epoch2, epoch3


@pytest.mark.parametrize("step", BEFORE_CUT + AFTER_CUT)
def test_sigkill_during_truncation_recovers_old_store_or_exact_prefix(written_store, tmp_path, step):
    template, written, cut_at, cut, epoch2, epoch3 = written_store
    root = tmp_path / "store"
    root.mkdir()
    for p in template.rglob("*"):
        dest = root / p.relative_to(template)
        if p.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.write_bytes(p.read_bytes())
    out = tmp_path / "crasher.out"
    proc = support.spawn("truncate_crasher.py", ["--root", str(root), "--offset", str(cut), "--kill-at", step,
                                         "--index-entries", str(INDEX_ENTRIES)], out)
    try:
        if step == "done":
            support.wait_for_line(out, proc, lambda line: line.get("done"), timeout=60)
        else:
            proc.wait(timeout=60)
    finally:
        support.kill(proc)
    assert proc.returncode == -9, (proc.returncode, (tmp_path / "crasher.err").read_text())
    assert (root / "abort").exists()

    store = MessageStore(config(root)).start()
    try:
        assert store.recovery is not None and store.recovery.abnormal
        epochs = open_epochs(store)
        if step in BEFORE_CUT:
            check(store, written, [], read_commitlog(template).end)
            assert epochs.entries == (EpochEntry(1, 0), EpochEntry(2, epoch2), EpochEntry(3, epoch3))
            store.truncate_to(cut)  # what the rejoining slave does again
            epochs.truncate_after(cut)
        check(store, written[:cut_at], written[cut_at:], cut)
        assert epochs.entries == (EpochEntry(1, 0), EpochEntry(2, epoch2))
        assert EpochFile(root / FILE_NAME).entries == epochs.entries
        more = write(store, random.Random(1), 90_000, 50)  # writes go on from the cut
        assert more[0].phys == cut
        end = store.commitlog.max_offset()
    finally:
        store.shutdown()
    store = MessageStore(config(root)).start()
    try:
        check(store, written[:cut_at] + more, written[cut_at:], end)
    finally:
        store.shutdown()


# -- random kills of a process that writes and truncates ----------------------------------------
CYCLE_TOPICS = ("cycA", "cycB")  # truncate_cycler.py's
CYCLE_QUEUES = 3
SEQ_STRIDE = 10_000_000  # run i writes seqs [i * SEQ_STRIDE, ...)

Held = dict[tuple[str, int, int], tuple[int, int]]  # (topic, queue, queue offset) -> (seq, commitlog offset)


def served_now(store: MessageStore) -> tuple[Held, list[str]]:
    held: Held = {}
    problems: list[str] = []
    for topic in CYCLE_TOPICS:
        for q in store.queue_ids(topic):
            units = read_queue(store, topic, q)
            problems += support.check_units(units, topic, q)
            for u in units:
                held[(topic, q, u.queue_offset)] = (seq_of(u.body), u.physical_offset)
    return held, problems


def cycle_run(root: Path, tmp: Path, run: int, seed: int, model: Held, rng: random.Random) -> str:
    """One run: spawn, let it write and truncate, SIGKILL it at a random moment, recover and
    check against ``model`` (updated in place to what the store holds now); returns what the
    kill interrupted."""
    out = tmp / f"cycler-{run}.out"
    proc = support.spawn("truncate_cycler.py", ["--root", str(root), "--seed", str(seed), "--seq-start",
                                        str(run * SEQ_STRIDE), "--index-entries", str(INDEX_ENTRIES)], out)
    try:
        support.wait_for_line(out, proc, lambda line: line.get("ready"), timeout=60)
        time.sleep(rng.uniform(0.05, 0.6))
    finally:
        support.kill(proc)
    assert proc.returncode == -9
    expected = dict(model)
    pending = None
    acked_max = run * SEQ_STRIDE - 1
    for line in support.read_lines(out):
        if "truncating" in line:
            pending = line["truncating"]
        elif "truncated" in line:
            expected = {k: v for k, v in expected.items() if v[1] < line["truncated"]}
            pending = None
        elif "s" in line:
            for i, (s, p) in enumerate(zip(line["s"], line["p"], strict=True)):
                expected[(line["t"], line["q"], line["o"] + i)] = (s, p)
            acked_max = max(acked_max, line["s"][-1])
    store = MessageStore(config(root)).start()
    try:
        held, problems = served_now(store)
        context = f"[seed {seed}, run {run}, pending cut {pending}]"
        assert problems == [], (context, problems[:10])
        outcome = "writing"
        if pending is not None:
            cut_done = store.commitlog.max_offset() == pending
            if cut_done:
                expected = {k: v for k, v in expected.items() if v[1] < pending}
            outcome = "truncating: recovered the prefix" if cut_done else "truncating: recovered the old store"
        missing = {k: v for k, v in expected.items() if held.get(k) != v}
        assert not missing, (context, sorted(missing.items())[:10])
        extra = {k: v for k, v in held.items() if k not in expected}
        # only the batch the kill interrupted (never acknowledged) may be there besides
        assert all(acked_max < s < (run + 1) * SEQ_STRIDE for s, _ in extra.values()), (context, extra)
        model.clear()
        model.update(held)
    finally:
        store.shutdown()
    return outcome


def cycle_campaign(tmp: Path, runs: int) -> dict[str, int]:
    seed = support.crash_seed()
    rng = random.Random(seed)
    root = tmp / "store"
    model: Held = {}
    outcomes: dict[str, int] = {}
    for run in range(1, runs + 1):
        outcome = cycle_run(root, tmp, run, seed * 1000 + run, model, rng)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"truncation kill campaign (seed {seed}, {support.SEED_ENV} replays it): {runs} runs, {outcomes}, "
          f"{len(model)} messages held at the end")
    return outcomes


def test_random_sigkill_while_writing_and_truncating(tmp_path):
    """CI-sized: a few random kills of a process that writes and truncates in turn."""
    outcomes = cycle_campaign(tmp_path, 6)
    assert sum(outcomes.values()) == 6


@pytest.mark.slow
def test_random_sigkill_while_writing_and_truncating_long(tmp_path):
    outcomes = cycle_campaign(tmp_path, 60)
    assert sum(v for k, v in outcomes.items() if k.startswith("truncating")) > 0, outcomes
