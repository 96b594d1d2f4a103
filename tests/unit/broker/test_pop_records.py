"""Checkpoint and ack records of the revive topic (RocketMQ's PopCheckPoint/AckMsg field names), and the table
of open checkpoints a replay of them rebuilds."""

from __future__ import annotations

import json

import pytest

from spark_mq.broker.pop.checkpoints import CheckpointTable
from spark_mq.broker.pop.records import Ack, Checkpoint
from spark_mq.common.errors import BodyError


def ck(start: int = 120, pop_time: int = 1000, diffs: tuple[int, ...] = (0, 1, 4), ro: int = 7) -> Checkpoint:
    return Checkpoint("readers", "orders", 2, start, pop_time, 60_000, diffs, "broker-a", ro)


def test_records_use_rocketmqs_field_names_and_round_trip():
    c = ck()
    assert json.loads(c.to_json()) == {"so": 120, "pt": 1000, "it": 60000, "n": 3, "d": [0, 1, 4], "q": 2,
                                      "t": "orders", "c": "readers", "bm": 0, "ro": 7, "bn": "broker-a"}
    assert Checkpoint.from_json(c.to_json()) == c and c.offsets == [120, 121, 124]
    a = Ack("readers", "orders", 2, 120, 1000, (121,), "broker-a")
    assert json.loads(a.to_json()) == {"ao": 121, "so": 120, "pt": 1000, "q": 2, "t": "orders", "c": "readers",
                                       "bn": "broker-a"}
    batch = Ack("readers", "orders", 2, 120, 1000, (120, 124), "broker-a")
    assert json.loads(batch.to_json())["aol"] == [120, 124] and batch.tag == "bAck"
    assert Ack.from_json(batch.to_json()) == batch and a.key == c.key
    # RocketMQ's older checkpoints carry no "d": consecutive offsets
    assert Checkpoint.from_json(b'{"so":5,"pt":1,"it":2,"n":2,"q":0,"t":"t","c":"g"}').offsets == [5, 6]
    with pytest.raises(BodyError):
        Checkpoint.from_json(b'{"so":5}')


def test_the_table_closes_a_checkpoint_once_every_message_is_done_and_says_where_a_replay_starts():
    table = CheckpointTable()
    first, second = ck(ro=7), ck(start=125, pop_time=2000, diffs=(0,), ro=9)
    table.add(first)
    table.add(second)
    assert table.in_flight("readers", "orders", 2) == 4 and table.revive_offset(end=20) == 7
    assert table.ack(first.key, (121, 999)) == [121]  # an offset not in the checkpoint is ignored
    assert [(c.key, p) for c, p in table.due(61_000)] == [(first.key, [120, 124])]
    assert table.ack(first.key, (120, 124)) == [120, 124]
    assert table.revive_offset(end=20) == 9 and not table.pending(first.key, 120)
    table.ack(second.key, (125,))
    assert len(table) == 0 and table.revive_offset(end=20) == 20 and table.in_flight("readers", "orders", 2) == 0


def test_due_checkpoints_come_from_a_heap_and_stay_due_until_acknowledged():
    table = CheckpointTable()
    cks = [ck(start=100 * i, pop_time=1000 + i, diffs=(0, 1), ro=i) for i in range(500)]
    for c in cks:
        table.add(c)
    table.add(cks[3])  # the same pop seen twice (a replay): counted once, due once
    assert table.in_flight("readers", "orders", 2) == 1000
    assert [c.key for c, _ in table.due(61_004)] == [c.key for c in cks[:5]]  # soonest first
    for c in cks[:250]:
        table.ack(c.key, tuple(c.offsets))
    # the checkpoints not acknowledged after they fell due come up again; closed ones never do
    assert [c.key for c, _ in table.due(61_260)] == [c.key for c in cks[250:261]]
    assert table.revive_offset(end=9_999) == 250  # the oldest open checkpoint's record
    for c in cks[250:]:
        table.ack(c.key, tuple(c.offsets))
    assert table.due(10**9) == [] and table.revive_offset(end=9_999) == 9_999
