"""A slave's store: a master's commitlog bytes appended at the same offsets (in transfers that cut
units anywhere) give the same files and the same reads; bytes that do not continue it are refused
before anything is written; puts are refused."""

from __future__ import annotations

import random

import pytest
from unit_helpers import crash, tiny_config

from spark_mq.common.errors import ReplicationError, StoreNotWritableError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.properties import encode_properties
from spark_mq.common.unit.layout import INT64, PHYSICAL_OFFSET_OFFSET
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


def queue_files(store: MessageStore) -> dict[str, bytes]:
    root = store.root / "consumequeue" / TOPIC
    return {f"{q.name}/{p.name}": p.read_bytes() for q in sorted(root.iterdir()) for p in sorted(q.iterdir())}


def test_entries_built_while_transfers_cut_units_match_the_masters(pair):
    """Reads between transfers make the slave build entries for whatever whole units it has so far
    (a unit cut by a transfer waits for the rest): its consume queue files (offsets, sizes, tag
    codes) and key queries end up as the master's."""
    master, slave = pair
    rng = random.Random(11)
    fill_master(master, rng, 60)
    while slave.commitlog.max_offset() < master.commitlog.max_offset():
        view = master.commitlog.read_from(slave.commitlog.max_offset(), rng.randrange(1, 3000))
        slave.append_replicated(slave.commitlog.max_offset(), bytes(view))
        if rng.random() < 0.3:
            slave.get_messages(TOPIC, rng.randrange(3), 0, 1)
    for store in (master, slave):
        store.shutdown()  # everything dispatched and flushed
        store.start()
    assert queue_files(slave) == queue_files(master)
    for i in range(0, 60, 7):
        assert slave.query_by_key(TOPIC, f"key-{i}-0") == master.query_by_key(TOPIC, f"key-{i}-0") != []


def test_a_damaged_replicated_unit_is_quarantined_not_served(pair):
    """A unit whose body the transfer damaged: its queue offset is kept but never served, and the
    units after it are served as the master's."""
    master, slave = pair
    for i in range(10):
        master.put_message(Message(TOPIC, f"body-{i:04d}".encode()), 0)
    data = bytearray(master.commitlog.read_from(0, 1 << 20))
    data[data.index(b"body-0004")] ^= 0xFF
    slave.append_replicated(0, bytes(data))
    res = slave.get_messages(TOPIC, 0, 0, 100)
    got = [bytes(res.data[s:s + n]) for s, n in zip(res.unit_starts().tolist(), res.sizes.tolist(), strict=True)]
    want = reads(master)[0]
    assert got == want[:4] + want[5:]
    assert slave.corrupt_units == 1
    assert slave.get_max_offset(TOPIC, 0) == 10


def written_below(units: list[list[bytes]], end: int) -> list[list[bytes]]:
    """Per queue, the units written at a commitlog offset below ``end``."""
    return [[u for u in queue if INT64.unpack_from(u, PHYSICAL_OFFSET_OFFSET)[0] < end] for queue in units]


def test_a_crashed_slave_recovers_the_entries_it_had_not_built(pair):
    """Killed with units appended but not yet handed to dispatch, and entries built but not yet
    checkpointed: the store's recovery at the next start builds them (all but its last unit, which
    a crashed slave's recovery drops: a cut-off transfer may have left only its first bytes), and
    the slave serves what the master does and carries on replicating (the master sends that unit again)."""
    master, slave = pair
    rng = random.Random(12)
    fill_master(master, rng, 30)
    copy(master, slave, rng, 4000)
    slave.get_messages(TOPIC, 0, 0, 1)  # entries built up to here
    slave._checkpointer.take()
    fill_master(master, rng, 30)
    copy(master, slave, rng, 4000)
    slave.get_messages(TOPIC, 1, 0, 1)  # built, not checkpointed
    fill_master(master, rng, 10)
    copy(master, slave, rng, 4000)  # appended only
    slave.commitlog.flush()
    crash(slave)
    again = slave_store(slave.root).start()
    try:
        assert again.recovery is not None and again.recovery.abnormal
        last = master.commitlog.last_unit()
        assert last is not None and again.commitlog.max_offset() == last[0]
        assert reads(again) == written_below(reads(master), last[0])
        fill_master(master, rng, 10)
        copy(master, again, rng, 4000)
        assert reads(again) == reads(master)
        assert again.query_by_key(TOPIC, "key-9-0") == master.query_by_key(TOPIC, "key-9-0") != []
    finally:
        again.shutdown()
