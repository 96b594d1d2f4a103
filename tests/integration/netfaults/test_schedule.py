"""The seeded fault schedule (``tests/fault_schedule.py``): one seed gives the same steps, in the same order,
at the same times, so a failing run's printed seed replays it; another seed gives others; each fault is
healed before the next; a kind naming no group fails before anything runs."""

from __future__ import annotations

import pytest
from fault_schedule import DEFAULT_KINDS, SEED_ENV, Schedule

GROUPS = {"controller": ["ctl"], "master": ["m"], "slaves": ["s1", "s2"], "clients": ["gateway", "c1", "c2", "c3"]}


def test_a_seed_gives_the_same_schedule_and_another_seed_another():
    one, again, other = (Schedule(seed, DEFAULT_KINDS, GROUPS) for seed in (7, 7, 8))
    assert str(one) == str(again)
    assert one.steps == again.steps
    assert one.steps != other.steps
    assert f"{SEED_ENV}=7" in str(one)
    assert Schedule(7, DEFAULT_KINDS, GROUPS, rounds=30).steps == Schedule(7, DEFAULT_KINDS, GROUPS, rounds=30).steps


def test_each_kind_once_each_healed_in_order():
    schedule = Schedule(11, DEFAULT_KINDS, GROUPS)
    faults, heals = schedule.steps[0::2], schedule.steps[1::2]
    assert len(faults) == len(DEFAULT_KINDS) and all(h.action == "heal" for h in heals)
    assert sorted(f.action for f in faults) == sorted(
        ["partition"] * 3 + ["one_way"] * 2 + ["latency", "loss"])
    times = [s.at_s for s in schedule.steps]
    assert times == sorted(times) and len(set(times)) == len(times)
    half = next(f for f in faults if f.others and set(f.others) <= set(GROUPS["clients"]))
    assert len(half.others) == 2  # half of the four clients
    print(schedule)


def test_a_kind_naming_no_group_fails_before_anything_runs():
    with pytest.raises(ValueError, match="groups"):
        Schedule(1, ["master|nobody"], GROUPS)
    with pytest.raises(ValueError, match="A\\|B"):
        Schedule(1, ["master~slaves"], GROUPS)
