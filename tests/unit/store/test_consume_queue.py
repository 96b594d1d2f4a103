"""ConsumeQueue against a dict model (as Kafka's OffsetIndexTest checks against a TreeMap):
writes, reads across many small files, reopen, truncation and retention arithmetic."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.errors import CorruptFileError
from spark_mq.store.consume_queue import ENTRY_SIZE, ConsumeQueue

PER_FILE = 7  # entries per file: small and odd so batches straddle file boundaries


class Model:
    """queue offset -> (commitlog offset, size, tag); units laid out back to back."""

    def __init__(self, first_phys: int = 1000) -> None:
        self.entries: dict[int, tuple[int, int, int]] = {}
        self.next_phys = first_phys

    def batch(self, rng: random.Random, queue_offset: int, n: int):
        sizes = np.array([rng.randrange(91, 500) for _ in range(n)], dtype=np.int64)
        phys = self.next_phys + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        tags = np.array([rng.randrange(-(2**31), 2**31) for _ in range(n)], dtype=np.int64)
        self.next_phys = int(phys[-1] + sizes[-1])
        for i in range(n):
            self.entries[queue_offset + i] = (int(phys[i]), int(sizes[i]), int(tags[i]))
        return phys, sizes, tags


def open_cq(directory: Path, per_file: int = PER_FILE, load: bool = True) -> ConsumeQueue:
    cq = ConsumeQueue("TopicA", 3, directory, per_file * ENTRY_SIZE)
    if load:
        cq.load()
    return cq


def as_tuples(ent: np.ndarray) -> list[tuple[int, int, int]]:
    return [(int(p), int(s), int(t)) for p, s, t in zip(ent["phys"], ent["size"], ent["tag"], strict=True)]


def check_against(cq: ConsumeQueue, model: Model, lo: int, hi: int) -> None:
    assert (cq.min_offset, cq.max_offset) == (lo, hi)
    assert as_tuples(cq.get(lo, hi - lo + 5)) == [model.entries[i] for i in range(lo, hi)]
    for start in range(lo, hi):
        for count in (1, 2, PER_FILE, PER_FILE + 3):
            want = [model.entries[i] for i in range(start, min(start + count, hi))]
            assert as_tuples(cq.get(start, count)) == want
    assert cq.get(hi, 10).size == 0
    if hi > lo:
        assert cq.last_phys() == model.entries[hi - 1][0]


def filled(tmp_path: Path, batches: list[int], seed: int = 1) -> tuple[ConsumeQueue, Model]:
    rng = random.Random(seed)
    cq, model = open_cq(tmp_path), Model()
    for n in batches:
        cq.put_batch(cq.max_offset, *model.batch(rng, cq.max_offset, n))
    return cq, model


def test_put_get_across_files_and_reopen(tmp_path):
    cq, model = filled(tmp_path, [1, 6, 7, 13, 2, 20, 1])
    check_against(cq, model, 0, 50)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"{i * PER_FILE * ENTRY_SIZE:020d}" for i in range(8)]  # 50 entries, 7 per file
    cq.flush()
    cq.close()
    again = open_cq(tmp_path)
    check_against(again, model, 0, 50)
    # writing continues where it stopped
    rng = random.Random(2)
    again.put_batch(50, *model.batch(rng, 50, 9))
    check_against(again, model, 0, 59)
    again.close()


def test_empty_queue(tmp_path):
    cq = open_cq(tmp_path / "none")
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.get(0, 10).size == 0
    assert cq.last_phys() == -1
    assert cq.offset_by_time(5, lambda _p: 0) == 0


def test_reopen_when_last_file_is_exactly_full(tmp_path):
    cq, model = filled(tmp_path, [PER_FILE * 3])
    cq.close()
    again = open_cq(tmp_path)
    check_against(again, model, 0, PER_FILE * 3)
    again.put_batch(PER_FILE * 3, *model.batch(random.Random(3), PER_FILE * 3, 1))
    check_against(again, model, 0, PER_FILE * 3 + 1)


def test_put_batch_skips_entries_already_present(tmp_path):
    cq, model = filled(tmp_path, [10])
    rng = random.Random(9)
    # a redispatch of offsets 5..14 with different values: 5..9 are kept as they were
    phys, sizes, tags = Model(first_phys=model.next_phys).batch(rng, 5, 10)
    cq.put_batch(5, phys, sizes, tags)
    for i in range(10, 15):
        model.entries[i] = (int(phys[i - 5]), int(sizes[i - 5]), int(tags[i - 5]))
    check_against(cq, model, 0, 15)
    # a batch that is wholly present changes nothing
    cq.put_batch(0, phys[:3], sizes[:3], tags[:3])
    check_against(cq, model, 0, 15)


def test_put_batch_with_a_gap_raises(tmp_path):
    cq, model = filled(tmp_path, [4])
    phys, sizes, tags = model.batch(random.Random(1), 5, 2)
    with pytest.raises(CorruptFileError, match="gap"):
        cq.put_batch(5, phys, sizes, tags)
    assert cq.max_offset == 4


def test_empty_queue_can_start_at_a_later_offset(tmp_path):
    cq, model = open_cq(tmp_path), Model()
    phys, sizes, tags = model.batch(random.Random(4), 23, 10)
    cq.put_batch(23, phys, sizes, tags)
    check_against(cq, model, 23, 33)
    assert min(int(p.name) for p in tmp_path.iterdir()) == 21 * ENTRY_SIZE  # the file holding offset 23
    cq.close()
    check_against(open_cq(tmp_path), model, 23, 33)


@pytest.mark.parametrize("cut", [0, 1, 6, 7, 8, 14, 20, 29])
def test_truncate(tmp_path, cut):
    cq, model = filled(tmp_path, [30])
    cq.truncate(cut)
    for i in range(cut, 30):
        del model.entries[i]
    check_against(cq, model, 0, cut)
    cq.close()
    again = open_cq(tmp_path)
    check_against(again, model, 0, cut)
    # and appends continue from the cut
    again.put_batch(cut, *model.batch(random.Random(5), cut, 12))
    check_against(again, model, 0, cut + 12)
    again.close()
    check_against(open_cq(tmp_path), model, 0, cut + 12)


def test_truncate_at_or_past_the_end_changes_nothing(tmp_path):
    cq, model = filled(tmp_path, [9])
    cq.truncate(9)
    cq.truncate(100)
    check_against(cq, model, 0, 9)


@pytest.mark.parametrize("keep", [0, 1, 7, 15, 19, 20])
def test_truncate_past_drops_entries_whose_unit_is_not_in_the_commitlog(tmp_path, keep):
    cq, model = filled(tmp_path, [5, 15])
    # the commitlog ends one byte short of unit ``keep``'s end: it and later entries go
    phys, size, _ = model.entries[min(keep, 19)]
    end = phys + size - 1 if keep < 20 else model.next_phys
    cq.truncate_past(end)
    for i in range(keep, 20):
        del model.entries[i]
    check_against(cq, model, 0, keep)
    cq.close()
    check_against(open_cq(tmp_path), model, 0, keep)


def test_correct_min_offset_and_delete_files_below(tmp_path):
    cq, model = filled(tmp_path, [30])
    # commitlog now starts inside unit 3: entries 0..3 point at deleted bytes
    cl_min = model.entries[3][0] + 1
    cq.correct_min_offset(cl_min)
    check_against(cq, model, 4, 30)
    assert cq.delete_files_below(cl_min) == 0  # file 0 still holds entries 4..6

    cl_min = model.entries[17][0]  # units before 17 are gone
    assert cq.delete_files_below(cl_min) == 2  # files [0, 7) and [7, 14)
    check_against(cq, model, 17, 30)
    assert sorted(int(p.name) for p in tmp_path.iterdir())[0] == 14 * ENTRY_SIZE
    cq.close()
    again = open_cq(tmp_path)
    again.correct_min_offset(cl_min)  # the store does this after loading
    check_against(again, model, 17, 30)

    # the last file is never deleted, even when all it points at is gone
    assert again.delete_files_below(model.next_phys) == 2
    assert len(list(tmp_path.iterdir())) == 1
    assert (again.min_offset, again.max_offset) == (30, 30)
    assert again.get(29, 5).size == 0


@pytest.mark.parametrize("first_kept", [0, 1, 6, 7, 13, 15, 20, 21, 24, 27, 29])
def test_delete_files_below_on_a_queue_never_corrected_before(tmp_path, first_kept):
    cq, model = filled(tmp_path, [30])
    cl_min = model.entries[first_kept][0]  # the commitlog now starts at unit ``first_kept``
    assert cq.delete_files_below(cl_min) == first_kept // PER_FILE  # files wholly below it
    check_against(cq, model, first_kept, 30)
    cq.close()
    again = open_cq(tmp_path)
    again.correct_min_offset(cl_min)
    check_against(again, model, first_kept, 30)


def test_offset_by_time(tmp_path):
    cq, model = filled(tmp_path, [40])
    rng = random.Random(8)
    # store times never decrease along the commitlog, with runs of equal times
    times, t = {}, 1_000
    for i in range(40):
        t += rng.choice([0, 0, 1, 5])
        times[model.entries[i][0]] = t
    store_time = times.get
    for ts in range(900, t + 3):
        want = next((i for i in range(40) if times[model.entries[i][0]] >= ts), 40)
        assert cq.offset_by_time(ts, store_time) == want, ts
    # units no longer in the commitlog count as older than anything
    gone = {model.entries[i][0] for i in range(10)}
    assert cq.offset_by_time(0, lambda p: None if p in gone else times[p]) == 10


@given(
    per_file=st.integers(1, 9),
    batches=st.lists(st.integers(1, 25), min_size=1, max_size=12),
    cut=st.integers(0, 400),
    seed=st.integers(0, 1000),
)
@settings(max_examples=80)
def test_offset_arithmetic_for_any_file_and_batch_sizes(per_file, batches, cut, seed):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        cq, model = open_cq(path, per_file), Model()
        for n in batches:
            cq.put_batch(cq.max_offset, *model.batch(rng, cq.max_offset, n))
        total = sum(batches)
        assert cq.max_offset == total
        assert as_tuples(cq.get(0, total)) == [model.entries[i] for i in range(total)]
        # every file but the last is full and named by its first entry's byte offset
        names = sorted(int(p.name) for p in path.iterdir())
        assert names == [i * per_file * ENTRY_SIZE for i in range(-(-total // per_file))]
        start = rng.randrange(total)
        count = rng.randrange(1, 2 * per_file + 2)
        assert as_tuples(cq.get(start, count)) == [model.entries[i] for i in range(start, min(total, start + count))]

        cut = min(cut, total)
        cq.truncate(cut)
        cq.close()
        again = open_cq(path, per_file)
        assert (again.min_offset, again.max_offset) == (0, cut)
        assert as_tuples(again.get(0, total)) == [model.entries[i] for i in range(cut)]
        again.close()
