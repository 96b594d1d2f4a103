"""ConsumerOffsetManager's reconciliation of a slave's client commits with its master: what a slave keeps
for its master (and persists), what an offer clears, and the master's rule (taken only where ahead)."""

from __future__ import annotations

import json

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.store.config_file import CONSUMER_OFFSETS, JsonConfigFile


def manager(tmp_path, slave: bool) -> ConsumerOffsetManager:
    offsets = ConsumerOffsetManager(JsonConfigFile(tmp_path / "config" / CONSUMER_OFFSETS), slave=slave)
    offsets.load()
    return offsets


def test_a_slave_keeps_client_commits_for_its_master_across_a_restart_but_not_what_it_copied(tmp_path):
    slave = manager(tmp_path, slave=True)
    slave.take({"T@copied": {0: 5}})  # the master's, by the sync
    slave.commit("g", "T", 0, 7)
    slave.commit("g", "T", 1, 3)
    assert slave.for_master == {"T@g": {0: 7, 1: 3}}
    slave.persist()
    again = manager(tmp_path, slave=True)
    assert again.for_master == {"T@g": {0: 7, 1: 3}} and again.table == {"T@copied": {0: 5}, "T@g": {0: 7, 1: 3}}
    # a RocketMQ reader finds its own layout, the extra key beside it
    saved = json.loads((tmp_path / "config" / CONSUMER_OFFSETS).read_text())
    assert saved["offsetTable"]["T@g"] == {"0": 7, "1": 3}


def test_an_offer_clears_what_it_sent_but_not_a_commit_made_meanwhile(tmp_path):
    slave = manager(tmp_path, slave=True)
    slave.commit("g", "T", 0, 7)
    slave.commit("g", "T", 1, 3)
    offer = {k: dict(v) for k, v in slave.for_master.items()}
    slave.commit("g", "T", 1, 9)  # while the offer was on its way
    slave.offered(offer)
    assert slave.for_master == {"T@g": {1: 9}}
    slave.offered({"T@g": {1: 9}})
    assert slave.for_master == {}


def test_a_master_takes_offered_offsets_only_where_ahead(tmp_path):
    master = manager(tmp_path, slave=False)
    master.commit("g", "T", 0, 10)
    master.commit("g", "T", 1, 50)
    assert master.for_master is None  # a master keeps nothing aside
    taken = master.advance({"T@g": {0: 40, 1: 20, 2: 5}, "T@new": {0: 1}})
    assert taken == 3
    assert master.table == {"T@g": {0: 40, 1: 50, 2: 5}, "T@new": {0: 1}}


class Recorded:
    """An offset journal that keeps what it is given (offset_log.py writes it to the commitlog)."""

    def __init__(self) -> None:
        self.changes: list = []

    def note(self, changes: list) -> None:
        self.changes.extend(changes)

    async def recorded(self) -> bool:
        return True

    def confirmed(self, key: str, queue_id: int, offset: int) -> int:
        return offset


def test_an_older_copy_replaying_the_journal_ends_at_the_masters_table(tmp_path):
    master = manager(tmp_path / "m", slave=False)
    master.commit("g", "T", 0, 5)
    copy = manager(tmp_path / "s", slave=False)
    copy.take(master.table)  # the slave's last metadata sync
    master.journal = journal = Recorded()
    master.commit("g", "T", 0, 5)  # unchanged: not journaled
    master.commit("g", "T", 0, 9)
    master.commit("g", "T", 1, 4)
    master.advance({"T@h": {0: 3}, "T@g": {0: 1}})  # only where ahead
    master.reset("r", "T", {0: 8})
    master.commit("r", "T", 0, 12)
    master.reset("r", "T", {0: 2})  # an explicit reset moves back, and so does its replay
    master.commit("gone", "T", 0, 6)
    master.drop_group("gone")
    master.commit("CID_RMQ_SYS_REVIVE_GROUP", "T", 0, 1)  # the broker's own: not journaled
    assert all("CID_RMQ_SYS_" not in key for _, key, _, _ in journal.changes)
    assert copy.replay(journal.changes) > 0
    assert copy.table == {k: v for k, v in master.table.items() if "CID_RMQ_SYS_" not in k}
    assert copy.query("g", "T", 0) == 9 and copy.query("r", "T", 0) == 2 and copy.query("gone", "T", 0) == -1
    assert copy.replay(journal.changes[:2]) == 0  # a record replayed twice moves nothing back
