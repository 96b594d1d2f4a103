"""TimerWheel and TimerLog against a dict model (slot time -> record numbers in order): batches linked in
one numpy pass chain each slot's records through ``prev``; walking a chain gives exactly the model's
records; a reopened wheel is empty until a rebuild from the reopened log (cut back to an end) makes it equal
the model of what is left, and a later rebuild clears what it no longer keeps."""

from __future__ import annotations

import collections

import numpy as np

from spark_mq.store.timer_log import RECORD_SIZE, TimerLog, record_type, records
from spark_mq.store.timer_wheel import SLOT_SIZE, TimerWheel, slot_times, slot_type, wheel_slots

PRECISION = 100
MAX_DELAY_MS = 10_000


def _model(times: list[int]) -> dict[int, list[int]]:
    model: dict[int, list[int]] = collections.defaultdict(list)
    for i, t in enumerate(times):
        model[t].append(i)
    return model


def _check(wheel: TimerWheel, log: TimerLog, model: dict[int, list[int]]) -> None:
    for t, want in model.items():
        last, count = wheel.slot(t)
        assert count == len(want) and last == want[-1]
        assert log.chain(last, count).tolist() == want


def test_the_record_types_are_their_declared_sizes():
    assert record_type().itemsize == RECORD_SIZE
    assert slot_type().itemsize == SLOT_SIZE


def test_linked_batches_chain_every_slot_and_a_rebuild_matches(tmp_path):
    rng = np.random.default_rng(3)
    slots = wheel_slots(MAX_DELAY_MS, PRECISION)
    wheel = TimerWheel(tmp_path / "timerwheel", slots, PRECISION)
    log = TimerLog(tmp_path / "timerlog", RECORD_SIZE * 50)  # many small files
    log.load(0)
    base = 1_700_000_000_000
    due_all: list[int] = []
    for size in (1, 7, 300, 64, 2):
        due = base + rng.integers(0, MAX_DELAY_MS, size)
        times = slot_times(due, PRECISION)
        first = log.end
        prev = wheel.link(times, first)
        n = np.arange(size)
        log.append(records(n * 100, np.full(size, 100), due, first + n, prev))
        due_all += due.tolist()
    times_all = slot_times(np.array(due_all), PRECISION).tolist()
    assert all(t >= d for t, d in zip(times_all, due_all, strict=True))  # never early
    _check(wheel, log, _model(times_all))
    assert wheel.next_pending(base) == min(times_all)

    # reopen: cut back to 200 records, rebuild from what is left (only slots from a read time on)
    log.flush()
    log.close()
    wheel.close()
    log = TimerLog(tmp_path / "timerlog", RECORD_SIZE * 50)
    log.load(200)
    assert log.end == 200
    wheel = TimerWheel(tmp_path / "timerwheel", slots, PRECISION)
    assert wheel.next_pending(0) is None  # re-created empty: the old file's chains are gone before any rebuild
    read_time = base + MAX_DELAY_MS // 2 // PRECISION * PRECISION
    kept = {t: ids for t, ids in _model(times_all[:200]).items() if t >= read_time}
    assert wheel.rebuild(log.chunks(log.min_index, log.end), read_time) == sum(map(len, kept.values()))
    _check(wheel, log, kept)
    assert wheel.slot(min(times_all[:200]))[1] == 0  # before the read time: delivered, not in the wheel

    # a second rebuild, later: what the first one linked before the new read time is cleared
    later = max(kept) - PRECISION
    assert wheel.rebuild(log.chunks(log.min_index, log.end), later) == sum(
        len(ids) for t, ids in kept.items() if t >= later)
    assert wheel.next_pending(0) == min(t for t in kept if t >= later)
