"""Store and epoch file together: a master's epoch starts at its commitlog's end, an old master
rejoining as slave finds its fork from the two histories and ends byte-identical to the new
master, and epochs a crash left past the commitlog's end are dropped at the next open."""

from __future__ import annotations

import random

import pytest
from unit_helpers import tiny_config, write_random

from spark_mq.common.errors import DivergedLogError
from spark_mq.store.ha.divergence import LogCase, plan_truncation
from spark_mq.store.ha.epoch_file import FILE_NAME, EpochEntry, EpochFile
from spark_mq.store.ha.replica_epochs import apply_plan, begin_epoch, open_epochs, replica_log
from spark_mq.store.message_store import MessageStore

TOPIC = "TopicEpochs"


def write(store: MessageStore, rng: random.Random, batches: int) -> None:
    write_random(store, rng, batches, TOPIC)


def copy(src: MessageStore, dst: MessageStore, rng: random.Random, upto: int | None = None) -> None:
    upto = src.commitlog.max_offset() if upto is None else upto
    while dst.commitlog.max_offset() < upto:
        view = src.commitlog.read_from(dst.commitlog.max_offset(), rng.randrange(100, 6000))
        dst.append_replicated(dst.commitlog.max_offset(), bytes(view))


def commitlog_files(store: MessageStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (store.root / "commitlog").iterdir()}


def test_begin_epoch_starts_at_the_commitlog_end_and_survives_restart(tmp_path):
    rng = random.Random(1)
    store = MessageStore(tiny_config(tmp_path / "s")).start()
    epochs = open_epochs(store)
    begin_epoch(store, epochs, 1)
    write(store, rng, 20)
    end = store.commitlog.max_offset()
    begin_epoch(store, epochs, 3)
    store.shutdown()
    store = MessageStore(tiny_config(tmp_path / "s")).start()
    assert open_epochs(store).entries == (EpochEntry(1, 0), EpochEntry(3, end))
    store.shutdown()


def test_old_master_rejoins_truncates_its_unreplicated_tail_and_matches_the_new_master(tmp_path):
    rng = random.Random(2)
    old = MessageStore(tiny_config(tmp_path / "a")).start()
    old_epochs = open_epochs(old)
    begin_epoch(old, old_epochs, 1)
    write(old, rng, 60)
    fork = old.commitlog.max_offset()
    peer = MessageStore(tiny_config(tmp_path / "b", broker_role="SLAVE", broker_id=1)).start()
    copy(old, peer, rng)
    EpochFile(peer.root / FILE_NAME).append(1, 0)  # what the HA client mirrors from the master
    write(old, rng, 40)  # acknowledged by an asynchronous master only, then it dies
    peer.shutdown()
    new = MessageStore(tiny_config(tmp_path / "b")).start()  # the peer promoted (unclean for the lost tail)
    new_epochs = open_epochs(new)
    begin_epoch(new, new_epochs, 2)
    write(new, rng, 30)

    plan = plan_truncation(replica_log(old, old_epochs), replica_log(new, new_epochs), old.commitlog.file_size)
    assert plan.case is LogCase.LONGER and plan.truncate_to == fork and not plan.keeps_nothing
    old.shutdown()
    old = MessageStore(tiny_config(tmp_path / "a", broker_role="SLAVE", broker_id=1)).start()
    old_epochs = open_epochs(old)
    assert apply_plan(old, old_epochs, plan) == fork
    assert old_epochs.entries == (EpochEntry(1, 0),)
    old_epochs.append(2, fork)  # mirrored with the first bytes of epoch 2
    copy(new, old, rng)
    assert commitlog_files(old) == commitlog_files(new)
    assert old_epochs.entries == new_epochs.entries
    for s in (old, new):
        s.shutdown()


def test_epochs_past_the_commitlog_end_are_dropped_at_open(tmp_path):
    """A crash between cutting the store and cutting the epoch file."""
    rng = random.Random(3)
    store = MessageStore(tiny_config(tmp_path / "s")).start()
    epochs = open_epochs(store)
    begin_epoch(store, epochs, 1)
    write(store, rng, 10)
    mid = store.commitlog.max_offset()
    write(store, rng, 10)
    begin_epoch(store, epochs, 2)
    write(store, rng, 10)
    store.truncate_to(mid)  # the process dies before the epoch file follows
    store.shutdown()
    assert EpochFile(tmp_path / "s" / FILE_NAME).entries[-1].epoch == 2
    store = MessageStore(tiny_config(tmp_path / "s")).start()
    assert open_epochs(store).entries == (EpochEntry(1, 0),)
    assert EpochFile(store.root / FILE_NAME).entries == (EpochEntry(1, 0),)
    store.shutdown()


def test_a_replica_longer_than_a_master_that_lost_its_disk_needs_a_person(tmp_path):
    rng = random.Random(4)
    slave = MessageStore(tiny_config(tmp_path / "s", broker_role="SLAVE", broker_id=1)).start()
    master = MessageStore(tiny_config(tmp_path / "m")).start()
    write(master, rng, 40)
    copy(master, slave, rng)
    slave_epochs = open_epochs(slave)
    slave_epochs.append(1, 0)
    master.shutdown()
    lost = MessageStore(tiny_config(tmp_path / "lost")).start()  # a master that lost its disk
    lost_epochs = open_epochs(lost)
    lost_epochs.append(1, 0)
    begin_epoch(lost, lost_epochs, 2)
    assert lost_epochs.entries == (EpochEntry(2, 0),)  # epoch 1 wrote nothing there
    with pytest.raises(DivergedLogError, match="share no epoch"):
        plan_truncation(replica_log(slave, slave_epochs), replica_log(lost, lost_epochs), slave.commitlog.file_size)
    for s in (slave, lost):
        s.shutdown()
