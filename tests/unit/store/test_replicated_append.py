"""A slave's store: a master's commitlog bytes appended at the same offsets (in transfers that cut
units anywhere) give the same files and the same reads; bytes that do not continue it are refused
before anything is written; puts are refused."""

from __future__ import annotations

import random

import pytest
from unit_helpers import tiny_config

from spark_mq.common.errors import ReplicationError, StoreNotWritableError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.store.message_store import MessageStore

TOPIC = "TopicHa"


def fill_master(store: MessageStore, rng: random.Random, batches: int) -> None:
    for i in range(batches):
        n = rng.randrange(1, 20)
        props = [encode_properties({"KEYS": f"key-{i}-{j}", "TAGS": "t"}) for j in range(n)]
        store.put_messages(MessageBatch.of(TOPIC, i % 3, [rng.randbytes(rng.randrange(10, 2000)) for _ in range(n)],
                                           props))


def copy(master: MessageStore, slave: MessageStore, rng: random.Random, batch: int) -> None:
    """What an HA connection sends: from the slave's end, at most ``batch`` bytes within one file."""
    while slave.commitlog.max_offset() < master.commitlog.max_offset():
        view = master.commitlog.read_from(slave.commitlog.max_offset(), rng.randrange(1, batch))
        assert view is not None
        slave.append_replicated(slave.commitlog.max_offset(), bytes(view))


def files(store: MessageStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store.root / "commitlog").iterdir())}


def reads(store: MessageStore) -> list[list[bytes]]:
    out = []
    for q in range(3):
        res = store.get_messages(TOPIC, q, 0, 10_000, max_bytes=1 << 30)
        out.append([bytes(res.data[s:s + n]) for s, n in zip(res.unit_starts().tolist(), res.sizes.tolist(),
                                                             strict=True)])
    return out


def slave_store(root) -> MessageStore:
    return MessageStore(tiny_config(root, broker_role="SLAVE", broker_id=1))


@pytest.fixture
def pair(tmp_path):
    master = MessageStore(tiny_config(tmp_path / "m")).start()
    slave = slave_store(tmp_path / "s").start()
    yield master, slave
    for s in (master, slave):
        s.shutdown()


def replicate(pair, seed: int, batches: int, max_transfer: int) -> tuple[MessageStore, MessageStore]:
    master, slave = pair
    rng = random.Random(seed)
    fill_master(master, rng, batches)
    copy(master, slave, rng, max_transfer)
    return master, slave


def test_replicated_bytes_give_identical_files_and_reads(pair):
    master, slave = replicate(pair, 7, 60, 5000)
    assert len(files(master)) >= 3
    master.commitlog.flush()
    slave.commitlog.flush()
    assert files(slave) == files(master)
    assert reads(slave) == reads(master)
    assert slave.query_by_key(TOPIC, "key-5-0") == master.query_by_key(TOPIC, "key-5-0") != []


def test_a_restarted_slave_continues_from_its_end(tmp_path):
    rng = random.Random(8)
    master = MessageStore(tiny_config(tmp_path / "m")).start()
    try:
        fill_master(master, rng, 20)
        for more in (0, 20):  # a first run, then a restart that goes on from the end it left
            fill_master(master, rng, more)
            with slave_store(tmp_path / "s") as slave:
                copy(master, slave, rng, 3000)
                assert reads(slave) == reads(master)
    finally:
        master.shutdown()


def test_bytes_not_at_the_slaves_end_are_refused_and_nothing_written(pair):
    _, slave = replicate(pair, 9, 5, 100_000)
    end = slave.commitlog.max_offset()
    before = files(slave)
    with pytest.raises(ReplicationError, match=f"offset {end + 10}, but this commitlog ends at {end}"):
        slave.append_replicated(end + 10, b"x" * 10)
    with pytest.raises(ReplicationError):
        slave.append_replicated(end - 10, b"x" * 10)
    assert slave.commitlog.max_offset() == end and files(slave) == before


def test_a_slave_store_refuses_puts(pair):
    _, slave = pair
    with pytest.raises(StoreNotWritableError, match="slave"):
        slave.put_message(Message(TOPIC, b"x"), 0)


def test_a_store_written_as_a_master_is_refused_as_a_diverged_slave(tmp_path):
    """Its end falls inside one of the master's units: the bytes there are no unit written at that offset."""
    with MessageStore(tiny_config(tmp_path / "s")) as was_master:
        was_master.put_message(Message(TOPIC, b"\0" * 100), 0)
    master = MessageStore(tiny_config(tmp_path / "m")).start()
    slave = slave_store(tmp_path / "s").start()
    try:
        master.put_message(Message(TOPIC, b"\0" * 500), 0)
        end = slave.commitlog.max_offset()
        before = files(slave)
        with pytest.raises(ReplicationError, match=f"ends at offset {end} after a whole unit.*diverged"):
            slave.append_replicated(end, bytes(master.commitlog.read_from(end, 1000)))
        assert slave.commitlog.max_offset() == end and files(slave) == before
    finally:
        master.shutdown()
        slave.shutdown()



def put_units(store: MessageStore, batches: int) -> list[int]:
    """Batches of 3 messages of growing bodies; where each unit starts."""
    starts: list[int] = []
    for i in range(batches):
        result = store.put_messages(MessageBatch.of(TOPIC, i % 3, [bytes([i]) * (100 + i)] * 3))
        starts += result.physical_offsets.tolist()
    return starts


def test_a_cut_off_units_first_bytes_are_dropped_and_the_unit_then_continues(pair):
    master, slave = pair
    starts = put_units(master, 30)
    cut = starts[40] + 30  # inside a unit
    slave.append_replicated(0, bytes(master.commitlog.read_from(0, cut)))
    assert slave.commitlog.max_offset() == cut
    assert slave.drop_partial_unit() == starts[40]  # the end of its last whole unit
    last = bytes(master.commitlog.read(starts[39], starts[40] - starts[39]))
    assert slave.commitlog.last_unit() == (starts[39], last)
    copy(master, slave, random.Random(6), 5000)  # the master sends that unit again whole
    assert files(slave) == files(master) and reads(slave) == reads(master)


def test_unit_boundaries_are_found_by_the_chain_not_by_the_bytes(pair):
    master, _ = pair
    starts = put_units(master, 30)
    log = master.commitlog
    end = log.max_offset()
    assert all(log.is_unit_boundary(s) for s in starts) and log.is_unit_boundary(end)
    assert not any(log.is_unit_boundary(s + d) for s in starts for d in (1, 4, 8, 50))
    assert not log.is_unit_boundary(end + 1)
    assert log.last_unit() == (starts[-1], bytes(log.read(starts[-1], end - starts[-1])))
