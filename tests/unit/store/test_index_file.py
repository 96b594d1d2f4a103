"""IndexFile against a model: key hash -> commitlog offsets, newest first, with slot chains
forced to collide, time windows, max_num, a full file, reopen and the raw byte layout."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from spark_mq.common.java_hash import java_hash
from spark_mq.common.unit import native
from spark_mq.store.index_file import IndexFile, index_file_size, positive_hashes

T0 = 1_700_000_000_000  # ms; every store time below is T0 + whole seconds, as entries keep seconds


class Model:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int]] = []  # (key hash, phys, store ms) in insertion order

    def add(self, hashes, phys, ts) -> None:
        self.rows += list(zip(np.asarray(hashes).tolist(), np.asarray(phys).tolist(),
                              np.asarray(ts).tolist(), strict=True))

    def query(self, h: int, begin: int = 0, end: int = 2**62, max_num: int = 10**9) -> list[int]:
        return [p for k, p, t in reversed(self.rows) if k == h and begin <= t <= end][:max_num]


def random_batches(rng: random.Random, model: Model, keys: list[int], n_batches: int, size: int, t: int):
    phys = 0
    for _ in range(n_batches):
        n = rng.randrange(1, size)
        hashes = np.array([rng.choice(keys) for _ in range(n)], dtype=np.int32)
        p = phys + np.arange(n, dtype=np.int64) * 100
        phys += n * 100
        ts = np.full(n, t, dtype=np.int64)
        t += rng.choice([0, 1000, 2000])
        model.add(hashes, p, ts)
        yield hashes, p, ts


def filled_index(path, rng: random.Random, keys: list[int], slot_num: int, n_batches: int):
    """An index file of ``slot_num`` slots (3,000 entries) with ``n_batches`` random batches of
    ``keys`` put, and its model."""
    idx = IndexFile(path, slot_num=slot_num, index_num=3000)
    model = Model()
    for hashes, p, ts in random_batches(rng, model, keys, n_batches, 30, T0):
        idx.put_batch(hashes, p, ts)
    return idx, model


def test_chains_in_few_slots_match_the_model(tmp_path):
    rng = random.Random(1)
    keys = rng.sample(range(1, 2**31 - 1), 40)  # 40 keys into 3 slots: every chain mixes keys
    idx = IndexFile(tmp_path / "i", slot_num=3, index_num=2000)
    model = Model()
    for hashes, p, ts in random_batches(rng, model, keys, 60, 25, T0):
        assert idx.put_batch(hashes, p, ts) == hashes.size
    assert idx.index_count == len(model.rows) + 1  # entry 0 is the empty sentinel
    for k in keys:
        assert idx.query(k, 0, 2**62, 10**6) == model.query(k)
    assert idx.query(12345, 0, 2**62, 100) == []  # a hash never put (shares a slot with others)
    idx.close()

    again = IndexFile(tmp_path / "i", slot_num=3, index_num=2000)
    for k in keys:
        assert again.query(k, 0, 2**62, 10**6) == model.query(k)
    again.close()


def test_time_window_and_max_num(tmp_path):
    rng = random.Random(2)
    keys = [7, 10, 13]  # all in slot 1 of 3
    idx = IndexFile(tmp_path / "i", slot_num=3, index_num=1000)
    model = Model()
    for hashes, p, ts in random_batches(rng, model, keys, 40, 10, T0):
        idx.put_batch(hashes, p, ts)
    t_end = model.rows[-1][2]
    for k in keys:
        for begin in range(T0 - 1000, t_end + 2000, 1000):
            for end in range(begin, t_end + 2000, 3000):
                assert idx.query(k, begin, end, 10**6) == model.query(k, begin, end), (k, begin, end)
        for max_num in (1, 2, 5):
            assert idx.query(k, T0 + 5000, t_end, max_num) == model.query(k, T0 + 5000, t_end, max_num)


def test_header_and_layout_on_disk(tmp_path):
    slot_num, index_num = 5, 50
    idx = IndexFile(tmp_path / "i", slot_num, index_num)
    hashes = np.array([6, 11, 3, 6], dtype=np.int32)  # 6 and 11 share slot 1
    phys = np.array([100, 200, 300, 400], dtype=np.int64)
    ts = np.array([T0, T0 + 1500, T0 + 2000, T0 + 5999], dtype=np.int64)
    idx.put_batch(hashes, phys, ts)
    idx.flush()
    idx.close()
    raw = (tmp_path / "i").read_bytes()
    assert len(raw) == index_file_size(slot_num, index_num) == 40 + 5 * 4 + 50 * 20
    begin_ts, end_ts, begin_phys, end_phys, slot_count, index_count = struct.unpack_from(">qqqqii", raw, 0)
    assert (begin_ts, end_ts, begin_phys, end_phys) == (T0, T0 + 5999, 100, 400)
    assert slot_count == 2 and index_count == 5
    slots = struct.unpack_from(">5i", raw, 40)
    assert slots == (0, 4, 0, 3, 0)  # slot 1 -> newest entry 4 (hash 6), slot 3 -> entry 3
    entries = [struct.unpack_from(">iqii", raw, 60 + 20 * i) for i in range(5)]
    assert entries[0] == (0, 0, 0, 0)
    # key hash, phys, whole seconds since the begin timestamp, previous entry of the slot
    assert entries[1:] == [(6, 100, 0, 0), (11, 200, 1, 1), (3, 300, 2, 0), (6, 400, 5, 2)]


def test_filling_the_file(tmp_path):
    idx = IndexFile(tmp_path / "i", slot_num=4, index_num=10)
    hashes = np.arange(1, 13, dtype=np.int32)
    phys = np.arange(12, dtype=np.int64) * 10
    ts = np.full(12, T0, dtype=np.int64)
    assert idx.put_batch(hashes, phys, ts) == 9  # 10 entries, entry 0 is never used
    assert idx.is_full()
    assert idx.put_batch(hashes[9:], phys[9:], ts[9:]) == 0
    assert idx.end_phys == 80
    for h in range(1, 10):
        assert idx.query(h, 0, 2**62, 10) == [(h - 1) * 10]
    assert idx.query(10, 0, 2**62, 10) == []


def test_new_file_is_empty_and_overlaps_nothing(tmp_path):
    idx = IndexFile(tmp_path / "i", slot_num=4, index_num=10)
    assert idx.is_empty() and not idx.is_full()
    assert not idx.overlaps(0, 2**62)
    assert idx.query(1, 0, 2**62, 10) == []
    idx.put_batch(np.array([1], np.int32), np.array([5], np.int64), np.array([T0], np.int64))
    assert idx.overlaps(T0, T0) and idx.overlaps(0, 2**62)
    assert not idx.overlaps(T0 + 5000, 2**62)


@pytest.mark.parametrize(
    ("java", "positive"), [(5, 5), (-5, 5), (0, 0), (2**31 - 1, 2**31 - 1), (-(2**31), 0)]
)
def test_positive_hashes_as_rocketmq_index_key_hash(java, positive):
    assert positive_hashes(np.array([java], dtype=np.int32)).tolist() == [positive]


def test_topic_key_hash_is_java_abs_hash():
    h = positive_hashes(np.array([java_hash("TopicTest#KEY1")], dtype=np.int32))[0]
    assert h == 1656969516


@pytest.mark.parametrize("seed", range(6))
def test_truncate_past_matches_the_model_and_takes_more_puts(tmp_path, seed):
    """Chains forced through few slots, cut at a random commitlog offset (also before the first
    and past the last entry), then more puts, reopen: every key's answer is the model's."""
    rng = random.Random(seed)
    keys = rng.sample(range(1, 2**31 - 1), 30)
    idx, model = filled_index(tmp_path / "i", rng, keys, slot_num=5, n_batches=40)
    end = model.rows[-1][1] + 100
    cut = rng.choice([0, end, rng.randrange(0, end, 100), rng.randrange(0, end, 100) + 50])
    kept = [r for r in model.rows if r[1] < cut]
    assert idx.truncate_past(cut) == len(model.rows) - len(kept)
    model.rows = kept
    assert idx.index_count == len(kept) + 1
    assert idx.end_phys == (kept[-1][1] if kept else 0)
    for k in keys:
        assert idx.query(k, 0, 2**62, 10**6) == model.query(k)
    t = (model.rows[-1][2] if model.rows else T0) + 1000
    more = np.array([rng.choice(keys) for _ in range(50)], dtype=np.int32)
    p = max(cut, 0) + np.arange(50, dtype=np.int64) * 100
    ts = np.full(50, t, dtype=np.int64)
    idx.put_batch(more, p, ts)
    model.add(more, p, ts)
    idx.close()
    idx = IndexFile(tmp_path / "i", slot_num=5, index_num=3000)
    for k in keys:
        assert idx.query(k, 0, 2**62, 10**6) == model.query(k)
    idx.close()


@pytest.mark.parametrize("native_insert", [True, False], ids=["native", "numpy"])
@pytest.mark.parametrize("seed", range(4))
def test_an_insert_cut_short_by_a_crash_keeps_every_older_key_reachable(tmp_path, monkeypatch, seed, native_insert):
    """A crash after an insert wrote its entries and slots but before it raised ``index_count``:
    recovery's repair moves those slots back, so the keys put before stay found, also after the
    batch is dispatched again and more keys go into the same slots."""
    if not native_insert:
        monkeypatch.setattr(native, "INDEX_PUT", None)
    elif native.INDEX_PUT is None:
        pytest.skip("the native library is not built or is switched off")
    rng = random.Random(seed)
    keys = rng.sample(range(1, 2**31 - 1), 20)
    idx, model = filled_index(tmp_path / "i", rng, keys, slot_num=4, n_batches=20)
    published = idx.index_count
    t = model.rows[-1][2] + 1000
    phys = model.rows[-1][1] + 100
    cut = np.array([rng.choice(keys) for _ in range(25)], dtype=np.int32)
    p = phys + np.arange(25, dtype=np.int64) * 100
    ts = np.full(25, t, dtype=np.int64)
    idx.put_batch(cut, p, ts)
    idx.set_header("index_count", published)  # the crash: entries and slots written, the count not
    idx.close()

    idx = IndexFile(tmp_path / "i", slot_num=4, index_num=3000)
    assert idx.repair_unpublished_heads() > 0
    assert idx.repair_unpublished_heads() == 0
    for k in keys:
        assert idx.query(k, 0, 2**62, 10**6) == model.query(k)
    idx.put_batch(cut, p, ts)  # recovery dispatches the batch again
    model.add(cut, p, ts)
    for k in keys:
        assert idx.query(k, 0, 2**62, 10**6) == model.query(k)
    idx.close()
