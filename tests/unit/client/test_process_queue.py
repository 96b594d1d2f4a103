"""ProcessQueue against a simple model: the commit offset is the lowest unfinished offset."""

from __future__ import annotations

import random

import pytest

from spark_mq.client.process_queue import ProcessQueue
from spark_mq.common.unit.decode import StoredMessage


def msg(offset: int, size: int = 10) -> StoredMessage:
    return StoredMessage(topic="t", queue_id=0, queue_offset=offset, physical_offset=offset * 100, body=b"x" * size,
                         properties={}, flag=0, sys_flag=0, body_crc=0, born_timestamp=0, born_host=b"\0" * 8,
                         store_timestamp=0, store_host=b"\0" * 8, reconsume_times=0)


def test_commit_offset_is_the_lowest_unfinished_with_out_of_order_completion():
    pq = ProcessQueue()
    assert pq.commit_offset() == -1
    pq.put(msg(o) for o in range(10, 15))
    assert pq.commit_offset() == 10
    assert pq.remove([11, 12, 14]) == 10  # 10 is slow: nothing past it may be committed
    assert pq.remove([10]) == 13
    assert pq.remove([13]) == 15  # nothing left: highest + 1
    assert pq.remove([13]) == 15  # removing twice changes nothing
    assert len(pq) == 0 and pq.size_bytes == 0


def test_random_completion_order_matches_a_model():
    rnd = random.Random(7)
    pq = ProcessQueue()
    pending: set[int] = set()
    next_offset = 0
    for _ in range(300):
        if rnd.random() < 0.5:
            n = rnd.randint(1, 5)
            pq.put(msg(o) for o in range(next_offset, next_offset + n))
            pending |= set(range(next_offset, next_offset + n))
            next_offset += n
        elif pending:
            done = rnd.sample(sorted(pending), rnd.randint(1, len(pending)))
            pending -= set(done)
            got = pq.remove(done)
            assert got == (min(pending) if pending else next_offset)
        assert len(pq) == len(pending)


def test_flow_control_thresholds_by_count_and_bytes():
    pq = ProcessQueue(threshold_count=3, threshold_bytes=1000)
    pq.put([msg(0), msg(1), msg(2)])
    assert not pq.flow_controlled()
    pq.put([msg(3)])
    assert pq.flow_controlled()  # 4 > 3 messages
    pq.remove([0, 1, 2, 3])
    assert not pq.flow_controlled()
    pq.put([msg(4, size=1001)])
    assert pq.flow_controlled()  # bytes over
    pq.remove([4])
    assert not pq.flow_controlled() and pq.size_bytes == 0


def test_take_in_offset_order_and_in_flight_keeps_the_commit_below():
    pq = ProcessQueue()
    pq.put(msg(o) for o in (5, 6, 7, 8))
    assert [m.queue_offset for m in pq.take(2)] == [5, 6]
    assert pq.in_flight == 2
    assert [m.queue_offset for m in pq.take(5)] == [7, 8]
    assert pq.take(1) == []
    assert pq.remove([7, 8]) == 5
    pq.give_back([6])
    assert [m.queue_offset for m in pq.take(3)] == [6]
    pq.put([msg(9)])
    assert [m.queue_offset for m in pq.take(3)] == [9]
    assert pq.remove([5, 6, 9]) == 10


def test_duplicate_put_is_ignored_and_lock_state():
    now = [100.0]
    pq = ProcessQueue(clock=lambda: now[0])
    assert len(pq.put([msg(1), msg(1)])) == 1
    assert pq.lock_expired()
    pq.set_locked(True)
    assert not pq.lock_expired()
    now[0] += 31
    assert pq.lock_expired()


def test_thresholds_must_be_positive():
    with pytest.raises(ValueError):
        ProcessQueue(threshold_count=0)
