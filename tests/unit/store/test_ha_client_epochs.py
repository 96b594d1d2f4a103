"""A controller-mode slave's HA client taking its master's epochs with the bytes: an epoch is in the
slave's epoch file before any byte of it is in its commitlog (a reader that finds the commitlog caught
up finds the master's epoch file too), and an append that fails leaves no epoch past the commitlog's end."""

from __future__ import annotations

import asyncio
import random

import pytest
from unit_helpers import tiny_config, write_random

from spark_mq.common.errors import ReplicationError
from spark_mq.store.ha.divergence import ReplicaLog
from spark_mq.store.ha.epoch_file import FILE_NAME, EpochEntry, EpochFile
from spark_mq.store.ha.ha_client import HAClient
from spark_mq.store.ha.ha_protocol import TRANSFER_HEADER
from spark_mq.store.ha.replica_epochs import begin_epoch, open_epochs, replica_log
from spark_mq.store.message_store import MessageStore

TOPIC = "TopicHaEpochs"


class LocalMaster:
    """The master's store as its slave asks about it (``MasterCommitLogView``), in this process."""

    def __init__(self, store: MessageStore, epochs: EpochFile) -> None:
        self.store = store
        self.epochs = epochs

    async def unit(self, offset: int) -> bytes | None:
        raise AssertionError("controller mode compares epochs here, not units")

    async def end(self) -> int:
        return self.store.commitlog.max_offset()

    async def history(self) -> ReplicaLog:
        return replica_log(self.store, self.epochs)


def write(store: MessageStore, rng: random.Random, batches: int) -> None:
    write_random(store, rng, batches, TOPIC)


def transfers(master: MessageStore, start: int, end: int | None = None) -> memoryview:
    """What the master streams from ``start`` to ``end`` (default its end), one transfer per commitlog file."""
    end = master.commitlog.max_offset() if end is None else end
    out = bytearray()
    while start < end:
        view = master.commitlog.read_from(start, min(1 << 20, end - start))
        out += TRANSFER_HEADER.pack(start, len(view)) + bytes(view)
        start += len(view)
    return memoryview(bytes(out))


@pytest.fixture
def stores(tmp_path):
    """A master in epoch 2 from offset ``fork`` and a slave that copied epoch 1 up to ``behind`` (before
    ``fork``), aligned with the master, so epoch 2 is yet to come with its bytes: (master, its epochs, slave,
    its epochs, the slave's client, behind, fork)."""
    master = MessageStore(tiny_config(tmp_path / "m")).start()
    slave = MessageStore(tiny_config(tmp_path / "s", broker_role="SLAVE", broker_id=2)).start()
    master_epochs, slave_epochs = open_epochs(master), open_epochs(slave)
    client = HAClient(slave, lambda: "", 1.0, 20.0, lambda: None, lambda: None, LocalMaster(master, master_epochs),
                      lambda: None, epochs=slave_epochs, replica_id=2)
    rng = random.Random(3)
    begin_epoch(master, master_epochs, 1)
    write(master, rng, 15)
    behind = master.commitlog.max_offset()
    write(master, rng, 15)
    fork = master.commitlog.max_offset()
    asyncio.run(client._align_with_master(slave_epochs))
    client._append_transfers(transfers(master, 0, behind))
    begin_epoch(master, master_epochs, 2)
    write(master, rng, 30)
    asyncio.run(client._align_with_master(slave_epochs))
    assert slave_epochs.entries == (EpochEntry(1, 0),)
    yield master, master_epochs, slave, slave_epochs, client, behind, fork
    for s in (master, slave):
        s.shutdown()


def test_an_epoch_is_recorded_before_its_first_byte_is_appended(stores):
    master, master_epochs, slave, slave_epochs, client, behind, fork = stores
    path = slave.root / FILE_NAME
    kept = path.read_bytes()
    path.unlink()
    path.mkdir()  # the epoch file cannot be replaced now: recording epoch 2 fails
    with pytest.raises(OSError):
        client._append_transfers(transfers(master, behind))
    # epoch 1's bytes before the run that reaches the fork may be stored, none of epoch 2's
    assert behind <= slave.commitlog.max_offset() <= fork, "bytes of epoch 2 stored while the epoch file lacks it"
    path.rmdir()
    path.write_bytes(kept)
    asyncio.run(client._align_with_master(slave_epochs))  # the client connects again (its first step), goes on
    client._append_transfers(transfers(master, slave.commitlog.max_offset()))
    assert slave.commitlog.max_offset() == master.commitlog.max_offset()
    assert EpochFile(path).entries == master_epochs.entries == (EpochEntry(1, 0), EpochEntry(2, fork))


def test_an_append_refused_leaves_no_epoch_past_the_commitlog_end(stores):
    master, _, slave, slave_epochs, client, behind, fork = stores
    ahead = transfers(master, behind + 1)  # not where the slave's commitlog ends: refused, nothing written
    with pytest.raises(ReplicationError):
        client._append_transfers(ahead)
    assert slave.commitlog.max_offset() == behind < fork
    assert slave_epochs.entries == EpochFile(slave.root / FILE_NAME).entries == (EpochEntry(1, 0),)
