"""Epoch comparison: every one of seed 004's six cases of a slave's log against its master's, the
cases that need a person, and a replica-group simulation checked against the true common prefix."""

from __future__ import annotations

import random

import pytest

from spark_mq.common.errors import DivergedLogError
from spark_mq.store.ha.divergence import LogCase, ReplicaLog, classify, last_consistent_offset, plan_truncation
from spark_mq.store.ha.epoch_file import EpochEntry

FILE = 1000  # commitlog file size of these examples: retention deletes whole files


def log(lo: int, hi: int, *epochs: tuple[int, int]) -> ReplicaLog:
    return ReplicaLog(lo, hi, [EpochEntry(e, s) for e, s in epochs])


# the master of the examples: epochs 1 from 0, 2 from 2500, 4 from 4200; files below 2000 deleted
MASTER = log(2000, 5000, (1, 0), (2, 2500), (4, 4200))


def test_case_1_1_slave_older_than_everything_the_master_keeps():
    slave = log(0, 1800, (1, 0))  # down while the master's retention deleted [0, 2000)
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.OLDER
    assert plan.keeps_nothing and plan.replicate_from == 2000  # the master's min: a file start
    assert plan.truncate_to == 0


def test_case_1_1_without_a_common_epoch_left_on_the_master():
    master = log(3000, 5000, (2, 2500), (4, 4200))  # epoch 1 dropped from the master's history with its files
    plan = plan_truncation(log(0, 1800, (1, 0)), master, FILE)
    assert plan.case is LogCase.OLDER and plan.keeps_nothing and plan.replicate_from == 3000


def test_case_1_2_slave_behind_with_older_files():
    slave = log(1000, 3000, (1, 0), (2, 2500))
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.BEHIND_AND_OLDER
    assert (plan.consistent_offset, plan.truncate_to, plan.replicate_from, plan.keeps_nothing) == (3000, 3000, 3000,
                                                                                                   False)


def test_case_1_3_slave_wider_on_both_ends_truncates_its_tail():
    # the slave was master in epoch 3 from 4000 (an election the current master's history lost)
    slave = log(1000, 5600, (1, 0), (2, 2500), (3, 4000))
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.WIDER
    assert (plan.truncate_to, plan.replicate_from, plan.keeps_nothing) == (4000, 4000, False)


def test_case_2_2_slave_behind_the_usual_case():
    slave = log(2000, 4500, (1, 0), (2, 2500), (4, 4200))
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.BEHIND
    assert (plan.truncate_to, plan.replicate_from, plan.keeps_nothing) == (4500, 4500, False)


def test_case_2_2_slave_diverged_inside_the_masters_range():
    # the slave was master in epoch 3 from 3900, an epoch the current master's history does not have
    slave = log(2000, 4100, (1, 0), (2, 2500), (3, 3900))
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.BEHIND and plan.truncate_to == 3900


def test_case_2_3_unclean_election_drops_the_unconfirmed_tail():
    # the old master (this slave) wrote epoch 2 up to 5300; the new master was elected at 4200
    slave = log(2000, 5300, (1, 0), (2, 2500))
    plan = plan_truncation(slave, MASTER, FILE)
    assert plan.case is LogCase.LONGER
    assert (plan.consistent_offset, plan.truncate_to, plan.keeps_nothing) == (4200, 4200, False)


def test_case_2_3_same_epochs_slave_ahead_of_a_master_that_lost_its_tail():
    master = log(0, 3000, (1, 0))
    plan = plan_truncation(log(0, 3500, (1, 0)), master, FILE)
    assert plan.case is LogCase.LONGER and plan.truncate_to == 3000


def test_case_3_3_slave_wholly_past_the_master_needs_a_person():
    master = log(0, 100, (1, 0), (5, 100))  # lost its disk, elected uncleanly
    slave = log(3000, 6000, (1, 0), (3, 2000))
    with pytest.raises(DivergedLogError, match="wholly past its master's end") as e:
        plan_truncation(slave, master, FILE)
    assert "nothing was changed" in str(e.value) and "[3000, 6000)" in str(e.value)


def test_newer_epoch_on_the_slave_needs_a_person():
    slave = log(2000, 4500, (1, 0), (2, 2500), (7, 4400))
    with pytest.raises(DivergedLogError, match="newer than its master's last epoch 4"):
        plan_truncation(slave, MASTER, FILE)


def test_no_common_epoch_with_overlapping_logs_needs_a_person():
    with pytest.raises(DivergedLogError, match="share no epoch"):
        plan_truncation(log(2000, 4500, (3, 0)), MASTER, FILE)


def test_slave_without_history_longer_than_the_master_needs_a_person():
    with pytest.raises(DivergedLogError, match="no epoch history"):
        plan_truncation(log(0, 5100), MASTER, FILE)


def test_slave_without_history_keeps_its_log_when_not_longer():
    plan = plan_truncation(log(2000, 4000), MASTER, FILE)
    assert (plan.truncate_to, plan.keeps_nothing) == (4000, False)


def test_fresh_empty_slave_copies_from_the_masters_min():
    plan = plan_truncation(log(0, 0), MASTER, FILE)
    assert plan.keeps_nothing and plan.replicate_from == 2000


def test_empty_slave_past_the_masters_end_or_with_a_newer_epoch_just_copies():
    """Nothing to lose: no person is needed, whatever its position or history says."""
    for slave in (log(9000, 9000), log(9000, 9000, (1, 0), (9, 9000)), log(3000, 3000, (7, 3000))):
        plan = plan_truncation(slave, MASTER, FILE)
        assert plan.keeps_nothing and plan.replicate_from == 2000, slave


def test_common_point_below_the_slaves_min_keeps_nothing_and_restarts_at_a_file_start():
    # the slave's epoch 1 ran to 3500, the master's only to 2500: the slave's files from 3000 on are all past it
    master = log(0, 5000, (1, 0), (2, 2500))
    slave = log(3000, 3500, (1, 0))
    plan = plan_truncation(slave, master, FILE)
    assert plan.consistent_offset == 2500 and plan.keeps_nothing and plan.replicate_from == 2000


def test_master_without_history_is_a_caller_error():
    with pytest.raises(ValueError, match="no epoch history"):
        plan_truncation(log(0, 10, (1, 0)), log(0, 10), FILE)


def test_classify_covers_the_six_cases():
    m = log(100, 200, (1, 0))
    got = {classify(log(lo, hi), m).value for lo, hi in [(0, 50), (0, 150), (0, 250), (120, 150), (120, 250),
                                                         (220, 250)]}
    assert got == {"1-1", "1-2", "1-3", "2-2", "2-3", "3-3"}


def test_find_consistent_point_as_rocketmq_does():
    # RocketMQ EpochFileCacheTest#testFindConsistentPoint: master 1-100 2-300 3-500 (max 700),
    # slave 1-100 2-300 4-600 (max 800) -> 600? no: epoch 3 differs, epoch 2 agrees up to min(500, 600)
    master = [EpochEntry(1, 100), EpochEntry(2, 300), EpochEntry(3, 500)]
    slave = [EpochEntry(1, 100), EpochEntry(2, 300), EpochEntry(4, 600)]
    assert last_consistent_offset(slave, 800, master, 700) == 500
    assert last_consistent_offset(master, 700, slave, 800) == 500
    assert last_consistent_offset([EpochEntry(9, 0)], 10, master, 700) is None


# -- a replica group simulated unit by unit ----------------------------------------------------
class Replica:
    """A log of unit ids ``(epoch, n)`` (the n-th unit epoch's master wrote) and its epochs."""

    def __init__(self) -> None:
        self.units: list[tuple[int, int]] = []
        self.empty_epoch: int | None = None  # became master at the end of its log, wrote nothing yet

    def epochs(self) -> list[EpochEntry]:
        out: list[EpochEntry] = []
        for i, (e, _) in enumerate(self.units):
            if not out or out[-1].epoch != e:
                out.append(EpochEntry(e, i))
        if self.empty_epoch is not None:
            if out and out[-1].start_offset == len(self.units):
                out.pop()
            out.append(EpochEntry(self.empty_epoch, len(self.units)))
        return out


def common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("seed", range(40))
def test_simulated_failovers_find_the_true_common_prefix(seed):
    """Elections (clean or not), writes, partial copies and rejoins in a group of three: at every
    rejoin the epoch comparison names exactly the longest common prefix of the two logs."""
    rng = random.Random(seed)
    group = [Replica() for _ in range(3)]
    master, epoch, written = group[0], 1, {1: 0}
    master.empty_epoch = 1
    checked = 0
    for _ in range(60):
        action = rng.random()
        if action < 0.4:  # the master writes
            for _ in range(rng.randint(1, 4)):
                master.units.append((epoch, written[epoch]))
                written[epoch] += 1
            master.empty_epoch = None
        elif action < 0.75:  # a slave rejoins: truncates by the epoch comparison, copies some of the master
            slave = rng.choice([r for r in group if r is not master])
            point = last_consistent_offset(slave.epochs(), len(slave.units), master.epochs(), len(master.units))
            truth = common_prefix(slave.units, master.units)
            if slave.units:  # no common epoch: the logs differ from their first unit
                assert (0 if point is None else point) == truth, (slave.units, master.units)
                checked += 1
            keep = truth if point is None else point
            del slave.units[keep:]
            slave.empty_epoch = None
            slave.units += master.units[keep:rng.randint(keep, len(master.units))]
        else:  # a new master, in sync or not (unclean elections make the divergences)
            epoch += 1
            written[epoch] = 0
            master = rng.choice(group)
            master.empty_epoch = epoch
    assert checked > 0
