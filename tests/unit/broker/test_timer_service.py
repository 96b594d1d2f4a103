"""Timer messages on a real MessageStore with an injected clock (nothing sleeps): ``stored_runs`` parks a
message due later in rmq_sys_wheel_timer with REAL_TOPIC/REAL_QID/TIMER_OUT_MS (the three properties in
RocketMQ's precedence; bad and too-far values refused); the TimerMessageService delivers each one in the
first pass at or after its slot, never before its due time, and a reopened service (timer log cut back to
the checkpoint, wheel rebuilt) neither loses nor repeats what the checkpoint counts."""

from __future__ import annotations

import numpy as np
import pytest
from unit_helpers import FakeClock

from spark_mq.broker.processors.send_runs import put_all, stored_runs
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.scheduled.timer_service import TimerMessageService
from spark_mq.client.results import decode_units_list
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import TIMER_TOPIC
from spark_mq.common.properties import encode_properties
from spark_mq.store.timer_log import TimerLog
from spark_mq.store.timer_wheel import TimerWheel, wheel_slots

PRECISION = 1000
LIMITS = TimerLimits(True, PRECISION, 3600_000)
NO_DELAY_LEVELS = 18  # the batches here name no DELAY


def read_all(store, topic, queue_id=0):
    result = store.get_messages(topic, queue_id, 0, 100_000)
    return decode_units_list(result.data) if result.data else []


def _batch(props: list[dict[str, str]], topic="orders", queue_id=3) -> MessageBatch:
    return MessageBatch.of(topic, queue_id, [f"m{i}".encode() for i in range(len(props))],
                           [encode_properties(p) for p in props], born_timestamp=123)


def _service(store, tmp_path, clock, log_file_size=40 * 64) -> TimerMessageService:
    service = TimerMessageService(store, TimerLog(tmp_path / "timerlog", log_file_size),
                                  TimerWheel(tmp_path / "timerwheel", wheel_slots(3600_000, PRECISION), PRECISION),
                                  JsonConfigFile(tmp_path / "timercheck.json"), 1.0, clock=clock)
    service.load()
    return service


def test_the_three_properties_park_in_their_precedence_and_bad_values_are_refused():
    now = 1_700_000_000_000
    props = [{"TIMER_DELIVER_MS": str(now + 5000)}, {"TIMER_DELAY_MS": "2500"}, {"TIMER_DELAY_SEC": "7"},
             {"TIMER_DELAY_SEC": "1", "TIMER_DELIVER_MS": str(now + 9000)}, {}, {"TIMER_DELIVER_MS": str(now - 1)}]
    parts = stored_runs(_batch(props), NO_DELAY_LEVELS, LIMITS, now)
    assert [(p.topic, p.queue_id, len(p)) for p in parts] == [(TIMER_TOPIC, 0, 4), ("orders", 3, 2)]
    out = [dict(kv.split("\x01") for kv in p.decode().split("\x02") if kv) for p in parts[0].properties]
    assert [int(o["TIMER_OUT_MS"]) - now for o in out] == [5000, 2500, 7000, 1000]  # DELAY_SEC wins
    assert {(o["REAL_TOPIC"], o["REAL_QID"]) for o in out} == {("orders", "3")}
    assert stored_runs(_batch([{"KEYS": "k"}]), NO_DELAY_LEVELS, LIMITS, now)[0].topic == "orders"

    with pytest.raises(MessageValidationError, match="max delay 3600000ms"):
        stored_runs(_batch([{}, {"TIMER_DELAY_SEC": "3601"}]), NO_DELAY_LEVELS, LIMITS, now)
    with pytest.raises(MessageValidationError, match=r"TIMER_DELAY_MS='soon' is not an integer"):
        stored_runs(_batch([{"TIMER_DELAY_MS": "soon"}]), NO_DELAY_LEVELS, LIMITS, now)
    with pytest.raises(MessageValidationError, match="timerWheelEnable is false"):
        stored_runs(_batch([{"TIMER_DELAY_SEC": "1"}]), NO_DELAY_LEVELS, TimerLimits(False, PRECISION, 3600_000),
                    now)


def test_timers_are_delivered_at_their_slot_never_before_their_due_time(make_store, tmp_path):
    clock = FakeClock(1_700_000_000.0)
    store = make_store(clock=clock)
    now = int(clock() * 1000)
    delays = [300, 1000, 1700, 1700, 4200]  # ms
    put_all(store, stored_runs(_batch([{"TIMER_DELAY_MS": str(d), "KEYS": f"k{i}"} for i, d in enumerate(delays)]),
                               NO_DELAY_LEVELS, LIMITS, now))
    service = _service(store, tmp_path, clock)
    assert service.run_once(now) == 0 and service.pending == 5
    delivered_at: dict[bytes, int] = {}
    for t in range(now, now + 6000, 100):  # a pass every 100 ms
        service.run_once(t)
        for m in read_all(store, "orders", 3):
            delivered_at.setdefault(m.body, t)
    assert sorted(delivered_at) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    for i, d in enumerate(delays):
        late = delivered_at[f"m{i}".encode()] - (now + d)
        assert 0 <= late <= PRECISION, f"m{i} delivered {late} ms after its due time"
    m = read_all(store, "orders", 3)[0]
    assert "REAL_TOPIC" not in m.properties and m.properties["KEYS"] == "k0" and m.born_timestamp == 123
    assert int(m.properties["TIMER_OUT_MS"]) == now + 300
    assert service.pending == 0 and service.delivered_total == 5 and int(service.lateness.sum()) == 5


def test_a_reopened_service_delivers_each_pending_timer_once(make_store, tmp_path):
    clock = FakeClock(1_700_000_000.0)
    store = make_store(clock=clock)
    now = int(clock() * 1000)
    n = 1000  # over several timer-log files of 64 records
    delays = np.arange(n) * 7 % 5000 + 1
    put_all(store, stored_runs(_batch([{"TIMER_DELAY_MS": str(int(d))} for d in delays]), NO_DELAY_LEVELS, LIMITS,
                               now))
    service = _service(store, tmp_path, clock)
    service.run_once(now)
    service.run_once(now + 2500)
    first = {m.body for m in read_all(store, "orders", 3)}
    assert first and len(first) < n
    service.persist()
    service.close()
    # enqueued after the checkpoint: the reopened service reads them from the consume queue
    put_all(store, stored_runs(_batch([{"TIMER_DELAY_MS": "3000"}], queue_id=2), NO_DELAY_LEVELS, LIMITS,
                               now + 2500))

    again = _service(store, tmp_path, clock)
    assert again.pending == n - len(first)
    again.run_once(now + 2500)
    again.run_once(now + 10_000)
    seen = [m.body for m in read_all(store, "orders", 3)]
    assert len(seen) == len(set(seen)) == n  # none lost, none twice
    assert len(read_all(store, "orders", 2)) == 1
    again.persist()
    assert again.log.min_index == again.log.end // 64 * 64  # every full file of delivered timers deleted


def test_the_service_is_idle_while_no_timer_is_pending_or_arrives(make_store, tmp_path):
    """An idle service makes no pass (a pass reads the timer topic, which makes the store dispatch its
    backlog on the event loop first); its read time stays behind meanwhile, and a timer stored after a
    long idle spell is still delivered at its slot, not before."""
    clock = FakeClock(1_700_000_000.0)
    store = make_store(clock=clock)
    now = int(clock() * 1000)
    service = _service(store, tmp_path, clock)
    assert service.idle()
    put_all(store, stored_runs(_batch([{"KEYS": "plain"}]), NO_DELAY_LEVELS, LIMITS, now))
    assert service.idle()
    later = now + 600_000  # ten idle minutes: no pass moved the read time on
    put_all(store, stored_runs(_batch([{"TIMER_DELAY_MS": "2000"}]), NO_DELAY_LEVELS, LIMITS, later))
    assert not service.idle()
    assert service.run_once(later) == 0 and service.pending == 1 and not service.idle()
    assert service.run_once(later + 1000) == 0 and len(read_all(store, "orders", 3)) == 1
    assert service.run_once(later + 2000) == 1 and service.idle()
    assert [m.body for m in read_all(store, "orders", 3)] == [b"m0", b"m0"]
