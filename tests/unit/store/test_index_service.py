"""IndexService: ``topic#key`` lookups over many index files, newest first, against a model."""

from __future__ import annotations

import random
import re

import numpy as np

from spark_mq.common.java_hash import java_hash
from spark_mq.store.index_file import positive_hashes
from spark_mq.store.index_service import IndexService

T0 = 1_700_000_000_000


def key_hashes(topic: str, keys: list[str]) -> np.ndarray:
    return positive_hashes(np.array([java_hash(f"{topic}#{k}") for k in keys], dtype=np.int32))


class Model:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int, int]] = []  # (topic, key, phys, ts), oldest first

    def query(self, topic: str, key: str, max_num: int = 10**9, begin: int = 0, end: int = 2**62) -> list[int]:
        out = [p for t, k, p, ts in reversed(self.rows) if (t, k) == (topic, key) and begin <= ts <= end]
        return list(dict.fromkeys(out))[:max_num]


def fill(service: IndexService, model: Model, rng: random.Random, n_batches: int, t: int = T0) -> int:
    phys = 0
    for _ in range(n_batches):
        topic = rng.choice(["TopicA", "TopicB"])
        n = rng.randrange(1, 40)
        keys = [f"key{rng.randrange(30)}" for _ in range(n)]
        p = phys + np.arange(n, dtype=np.int64) * 50
        phys += n * 50
        service.put_batch(key_hashes(topic, keys), p, np.full(n, t, dtype=np.int64))
        model.rows += [(topic, k, int(x), t) for k, x in zip(keys, p.tolist(), strict=True)]
        t += rng.choice([0, 1000, 3000])
    return t


def all_keys():
    return [(t, f"key{i}") for t in ("TopicA", "TopicB") for i in range(30)]


def test_queries_span_files_newest_first_and_survive_reopen(tmp_path):
    rng = random.Random(3)
    service, model = IndexService(tmp_path / "index", slot_num=4, index_num=64), Model()
    service.load()
    t_end = fill(service, model, rng, 60)
    names = sorted(p.name for p in (tmp_path / "index").iterdir())
    assert len(names) > 10, "filling a file rolls to a new one"
    assert all(re.fullmatch(r"\d{17}", n) for n in names)
    assert names == [f.path.name for f in service.files]
    assert service.end_phys() == model.rows[-1][2]
    for topic, key in all_keys():
        assert service.query(topic, key, 10**6, 0, 2**62) == model.query(topic, key)
        assert service.query(topic, key, 3, 0, 2**62) == model.query(topic, key, 3)
    for begin in range(T0, t_end + 1, 7000):
        end = begin + 20_000
        for topic, key in all_keys()[::7]:
            assert service.query(topic, key, 10**6, begin, end) == model.query(topic, key, 10**6, begin, end)
    service.flush()
    service.close()

    again = IndexService(tmp_path / "index", slot_num=4, index_num=64)
    again.load()
    for topic, key in all_keys():
        assert again.query(topic, key, 10**6, 0, 2**62) == model.query(topic, key)
    # new puts go on after the reopen
    again.put_batch(key_hashes("TopicA", ["key1"]), np.array([10**9]), np.array([t_end]))
    assert again.query("TopicA", "key1", 1, 0, 2**62) == [10**9]
    again.close()


def test_same_key_in_another_topic_is_not_a_hit(tmp_path):
    service = IndexService(tmp_path / "index", slot_num=1, index_num=100)
    service.put_batch(key_hashes("A", ["k", "k"]) , np.array([1, 2]), np.array([T0, T0]))
    service.put_batch(key_hashes("B", ["k"]), np.array([3]), np.array([T0]))
    assert service.query("A", "k", 10, 0, 2**62) == [2, 1]
    assert service.query("B", "k", 10, 0, 2**62) == [3]
    assert service.query("C", "k", 10, 0, 2**62) == []


def test_empty_service(tmp_path):
    service = IndexService(tmp_path / "missing", slot_num=4, index_num=10)
    service.load()
    assert service.end_phys() == -1
    assert service.query("T", "k", 10, 0, 2**62) == []


def test_delete_files_below_keeps_the_newest(tmp_path):
    rng = random.Random(5)
    service, model = IndexService(tmp_path / "index", slot_num=4, index_num=20), Model()
    fill(service, model, rng, 10)
    n_files = len(service.files)
    cut = service.files[2].end_phys + 1  # the first three files only point below the cut
    assert service.delete_files_below(cut) == 3
    assert len(service.files) == n_files - 3 == len(list((tmp_path / "index").iterdir()))
    assert service.delete_files_below(2**62) == n_files - 4
    assert len(service.files) == 1
