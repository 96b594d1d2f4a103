"""``MessageStore.truncate_to``: commitlog, consume queues and index cut back across file
boundaries (tiny files: the cut lands in a later commitlog file than most units, queues span
many files, the index several), checked against a model of what was put, before and after a
restart; new writes continue from the cut; bad offsets refused with nothing changed."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
from unit_helpers import tiny_config

from spark_mq.common.config import SYNC_FLUSH
from spark_mq.common.errors import StoreError
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.common.unit.decode import decode_message
from spark_mq.common.unit.layout import (
    BLANK_MAGIC,
    HEADER_SIZE,
    INT64,
    MESSAGE_MAGIC,
    PHYSICAL_OFFSET_OFFSET,
    SIZE_MAGIC,
)
from spark_mq.store.index_file import INVALID_INDEX
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus

TOPICS = ("TrA", "TrB")
QUEUES = 3
LATE_TOPIC = "TrLate"  # first written past the cut
INDEX_ENTRIES = 100  # per index file: a few hundred messages fill several


def config(root, **overrides):
    return tiny_config(root, max_index_num=INDEX_ENTRIES, **overrides)


@dataclass(frozen=True)
class Put:
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int
    key: str
    body: bytes


def fill(store: MessageStore, rng: random.Random, batches: int, tag: str = "") -> list[Put]:
    out = []
    for i in range(batches):
        topic, qid, n = rng.choice(TOPICS), rng.randrange(QUEUES), rng.randrange(1, 12)
        keys = [f"k{tag}-{i}-{j}" for j in range(n)]
        bodies = [rng.randbytes(rng.randrange(10, 1500)) for _ in range(n)]
        res = store.put_messages(MessageBatch.of(topic, qid, bodies, [encode_properties({"KEYS": k}) for k in keys]))
        out += [Put(topic, qid, res.queue_offset + j, int(res.physical_offsets[j]), int(res.sizes[j]), keys[j],
                    bodies[j]) for j in range(n)]
    return out


def served(store: MessageStore, topic: str, qid: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message a consumer reads from the queue's start."""
    out, offset = [], store.get_min_offset(topic, qid)
    while True:
        res = store.get_messages(topic, qid, offset, 500, max_bytes=1 << 30)
        if res.status != GetStatus.FOUND:
            return out
        for s, n, o in zip(res.unit_starts().tolist(), res.sizes.tolist(), res.queue_offsets.tolist(), strict=True):
            out.append((o, decode_message(res.data[s : s + n]).body))
        offset = res.next_begin_offset


def expect(puts: list[Put], topic: str, qid: int) -> list[tuple[int, bytes]]:
    return [(p.queue_offset, p.body) for p in puts if (p.topic, p.queue_id) == (topic, qid)]


def check_prefix(store: MessageStore, kept: list[Put], dropped: list[Put], cut: int) -> None:
    """The store serves exactly ``kept``: reads, max offsets, key queries, and nothing at or past ``cut``."""
    assert store.commitlog.max_offset() == cut
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(store, topic, q) == expect(kept, topic, q)
            assert store.get_max_offset(topic, q) == len(expect(kept, topic, q))
    for p in kept[-20:] + kept[:5]:
        assert [m for m in store.query_by_key(p.topic, p.key)], p.key
    for p in dropped[:20]:
        assert store.query_by_key(p.topic, p.key) == []
    index = store.index
    assert index is not None
    for f in index.files:
        ent = f.entries[1:f.index_count]
        assert not (ent["phys"] >= cut).any(), f.path.name
        assert (f.slots[f.slots != INVALID_INDEX] < f.index_count).all()
    files = sorted(p.name for p in (store.root / "commitlog").iterdir())
    size = store.config.maped_file_size_commit_log
    assert int(files[-1]) == (cut - 1) // size * size or int(files[-1]) == cut // size * size


def test_truncate_across_files_then_restart(tmp_path):
    rng = random.Random(5)
    store = MessageStore(config(tmp_path / "s")).start()
    puts = fill(store, rng, 120)
    size = store.config.maped_file_size_commit_log
    assert store.commitlog.max_offset() > 4 * size
    cut_at = next(i for i, p in enumerate(puts) if p.phys > 2 * size + 5000)  # inside the third file
    cut = puts[cut_at].phys
    late = store.put_messages(MessageBatch.of(LATE_TOPIC, 0, [b"late"] * 3))
    assert late.physical_offsets[0] > cut
    assert store.query_by_key(puts[-1].topic, puts[-1].key)  # (dispatches the index)
    index_files = len(store.index.files)
    assert index_files >= 3
    before = {p.name: p.read_bytes()[: cut - int(p.name)] for p in (store.root / "commitlog").iterdir()
              if int(p.name) < cut}
    assert store.truncate_to(cut) == cut
    kept, dropped = puts[:cut_at], puts[cut_at:]
    check_prefix(store, kept, dropped, cut)
    assert len(store.index.files) < index_files  # whole index files went, the one before was cut back
    assert store.queue_ids(LATE_TOPIC) == [] and not (store.root / "consumequeue" / LATE_TOPIC).exists()
    for name, data in before.items():  # the bytes below the cut are untouched, the rest of the file zeroed
        whole = (store.root / "commitlog" / name).read_bytes()
        assert whole[: len(data)] == data and not any(whole[len(data):])
    store.shutdown()
    store = MessageStore(config(tmp_path / "s")).start()
    check_prefix(store, kept, dropped, cut)
    # writes continue from the cut, queue offsets from the kept entries
    more = fill(store, rng, 30, tag="after")
    assert more[0].phys == cut
    store.shutdown()
    store = MessageStore(config(tmp_path / "s")).start()
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(store, topic, q) == expect(kept + more, topic, q)
    assert store.query_by_key(more[-1].topic, more[-1].key)
    store.shutdown()


@pytest.mark.parametrize("where", ["file start", "blank", "first unit", "last unit", "end"])
def test_truncate_at_every_kind_of_boundary(tmp_path, where):
    rng = random.Random(9)
    store = MessageStore(config(tmp_path / "s")).start()
    puts = fill(store, rng, 60)
    size = store.config.maped_file_size_commit_log
    if where == "file start":
        cut_at = next(i for i, p in enumerate(puts) if p.phys == size)
    elif where == "blank":  # right after the last unit of the first file: where its blank begins
        cut_at = next(i for i, p in enumerate(puts) if p.phys >= size)
        head = store.commitlog.read(puts[cut_at - 1].phys + puts[cut_at - 1].size, 8)
        assert SIZE_MAGIC.unpack(head)[1] == BLANK_MAGIC
    elif where == "first unit":
        cut_at = 1
    elif where == "last unit":
        cut_at = len(puts) - 1
    else:
        cut_at = len(puts)
    cut = puts[cut_at].phys if cut_at < len(puts) else store.commitlog.max_offset()
    if where == "blank":
        cut = puts[cut_at - 1].phys + puts[cut_at - 1].size
    assert store.truncate_to(cut) == cut
    check_prefix(store, puts[:cut_at], puts[cut_at:], cut)
    more = fill(store, rng, 5, tag="again")
    assert more[0].phys == cut or (where == "blank" and more[0].phys in (cut, size))
    store.shutdown()
    store = MessageStore(config(tmp_path / "s")).start()
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(store, topic, q) == expect(puts[:cut_at] + more, topic, q)
    store.shutdown()


def test_truncate_inside_a_unit_or_past_the_end_changes_nothing(make_store):
    rng = random.Random(3)
    store = make_store()
    puts = fill(store, rng, 20)
    end = store.commitlog.max_offset()
    for bad in (puts[5].phys + 1, puts[5].phys + 17, end + 1):
        with pytest.raises(StoreError, match="nothing truncated"):
            store.truncate_to(bad)
    assert store.commitlog.max_offset() == end
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(store, topic, q) == expect(puts, topic, q)


def test_a_body_imitating_a_unit_header_is_no_boundary(make_store):
    """The chain decides, not the bytes at the offset: a body may hold a header naming its own offset."""
    store = make_store()
    fill(store, random.Random(2), 3)
    start = store.commitlog.max_offset()
    fake_at = start + HEADER_SIZE  # where the body begins
    body = bytearray(300)
    SIZE_MAGIC.pack_into(body, 0, 100, MESSAGE_MAGIC)
    INT64.pack_into(body, PHYSICAL_OFFSET_OFFSET, fake_at)
    res = store.put_messages(MessageBatch.of(TOPICS[0], 0, [bytes(body)]))
    assert int(res.physical_offsets[0]) == start
    with pytest.raises(StoreError, match="does not begin a message unit"):
        store.truncate_to(fake_at)
    assert store.commitlog.max_offset() == start + int(res.sizes[0])


def test_truncate_to_nothing_empties_the_store(tmp_path):
    rng = random.Random(4)
    store = MessageStore(config(tmp_path / "s")).start()
    puts = fill(store, rng, 40)
    assert store.truncate_to(0) == 0
    assert not list((store.root / "commitlog").iterdir())
    assert all(store.queue_ids(t) == [] for t in TOPICS)
    assert store.query_by_key(puts[0].topic, puts[0].key) == []
    store.shutdown()
    store = MessageStore(config(tmp_path / "s")).start()
    assert store.commitlog.max_offset() == 0 and all(store.queue_ids(t) == [] for t in TOPICS)
    more = fill(store, rng, 3, tag="fresh")
    assert served(store, more[0].topic, more[0].queue_id)[0][0] == 0
    store.shutdown()


def test_slave_truncates_then_copies_the_new_masters_bytes(tmp_path):
    """The use it is for: a slave holding a tail the new master never had cuts it and continues
    with the master's bytes; its files then equal the master's."""
    rng = random.Random(11)
    old = MessageStore(config(tmp_path / "old")).start()
    common = fill(old, rng, 50)
    fork = old.commitlog.max_offset()
    fill(old, rng, 30, tag="lost")  # never reached the new master
    new = MessageStore(config(tmp_path / "new")).start()
    slave = MessageStore(config(tmp_path / "slave", broker_role="SLAVE", broker_id=1)).start()

    def copy(src: MessageStore, dst: MessageStore, upto: int) -> None:
        while dst.commitlog.max_offset() < upto:
            view = src.commitlog.read_from(dst.commitlog.max_offset(), rng.randrange(100, 5000))
            dst.append_replicated(dst.commitlog.max_offset(), bytes(view))

    copy(old, slave, old.commitlog.max_offset())
    new_slave = MessageStore(config(tmp_path / "new-as-slave", broker_role="SLAVE", broker_id=1)).start()
    copy(old, new_slave, fork)
    new_slave.shutdown()
    new.shutdown()
    (tmp_path / "new").rename(tmp_path / "unused")
    (tmp_path / "new-as-slave").rename(tmp_path / "new")
    new = MessageStore(config(tmp_path / "new")).start()  # promoted with the common prefix only
    fresh = fill(new, rng, 30, tag="new")
    slave.truncate_to(fork)
    copy(new, slave, new.commitlog.max_offset())
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(slave, topic, q) == expect(common + fresh, topic, q)
    assert slave.commitlog.read_from(0, 1 << 30) is not None
    mine = {p.name: p.read_bytes() for p in (slave.root / "commitlog").iterdir()}
    theirs = {p.name: p.read_bytes() for p in (new.root / "commitlog").iterdir()}
    assert mine == theirs
    for s in (old, new, slave):
        s.shutdown()


def test_sync_flush_store_keeps_acknowledging_after_truncation(tmp_path):
    rng = random.Random(6)
    store = MessageStore(config(tmp_path / "s", flush_disk_type=SYNC_FLUSH)).start()
    puts = fill(store, rng, 20)
    store.truncate_to(puts[10].phys)
    res = store.put_messages(MessageBatch.of(TOPICS[0], 0, [b"x"] * 4))
    assert res.status.name == "PUT_OK" and store.commitlog.flushed_offset() >= int(res.physical_offsets[-1])
    assert int(np.asarray(res.physical_offsets)[0]) == puts[10].phys
    store.shutdown()


def test_truncate_after_recovery_rebuilt_the_index(tmp_path):
    """Recovery rebuilds index entries queue by queue; they must still go in in commitlog order, or
    a truncation's binary search keeps entries past the cut and drops some before it."""
    rng = random.Random(8)
    store = MessageStore(config(tmp_path / "s")).start()
    puts = fill(store, rng, 80)
    store.shutdown()
    for lost in ("index", "consumequeue"):
        shutil.rmtree(tmp_path / "s" / lost)
    (tmp_path / "s" / "checkpoint").unlink()  # no safe offset: recovery walks (and indexes) everything
    store = MessageStore(config(tmp_path / "s")).start()
    assert store.recovery is not None and store.recovery.units_replayed == len(puts)
    cut_at = len(puts) // 2
    store.truncate_to(puts[cut_at].phys)
    check_prefix(store, puts[:cut_at], puts[cut_at:], puts[cut_at].phys)
    for p in puts[:cut_at]:
        assert store.query_by_key(p.topic, p.key), p
    store.shutdown()


def test_emptied_slave_copies_from_a_later_file_start(tmp_path):
    """Case 1-1: the slave keeps nothing and copies from the master's oldest file (retention
    deleted the ones before): its entries are built from that file on."""
    rng = random.Random(12)
    master = MessageStore(config(tmp_path / "m")).start()
    puts = fill(master, rng, 100)
    size = master.config.maped_file_size_commit_log
    master.commitlog.files.delete_first(2)  # what retention does to the oldest files
    start = master.commitlog.min_offset()
    assert start == 2 * size
    stale = MessageStore(config(tmp_path / "s")).start()  # the slave's own old log
    fill(stale, rng, 10, tag="stale")
    stale.shutdown()
    slave = MessageStore(config(tmp_path / "s", broker_role="SLAVE", broker_id=1)).start()
    assert slave.truncate_to(0) == 0
    while slave.commitlog.max_offset() < master.commitlog.max_offset():
        at = max(slave.commitlog.max_offset(), start)
        slave.append_replicated(at, bytes(master.commitlog.read_from(at, rng.randrange(500, 5000))))
    kept = [p for p in puts if p.phys >= start]
    for topic in TOPICS:
        for q in range(QUEUES):
            assert served(slave, topic, q) == expect(kept, topic, q)
    assert slave.query_by_key(kept[-1].topic, kept[-1].key)
    for s in (master, slave):
        s.shutdown()
