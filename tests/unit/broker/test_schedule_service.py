"""ScheduleService and ``stored_runs`` on a real MessageStore, with an injected clock (nothing
sleeps): a delayed message parks in SCHEDULE_TOPIC_XXXX queue level-1 with REAL_TOPIC/REAL_QID,
its consume-queue tag code is its due time, and it is delivered to its real topic when due (not a
millisecond before), without DELAY, everything else kept; progress is kept in delayOffset.json."""

from __future__ import annotations

from unit_helpers import FakeClock

from spark_mq.broker.processors.send_runs import put_all, stored_runs
from spark_mq.broker.scheduled.delay_service import ScheduleService
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.client.results import decode_units_list
from spark_mq.common.delay_levels import SCHEDULE_TOPIC
from spark_mq.common.json_file import JsonSectionsFile
from spark_mq.common.message import MessageBatch
from spark_mq.common.properties import REAL_QUEUE_ID as REAL_QID
from spark_mq.common.properties import REAL_TOPIC, encode_properties
from spark_mq.store.config_file import DELAY_OFFSETS

LEVELS = "1s 5s 10s"
NO_TIMERS = TimerLimits(False, 1, 0)  # the batches here name no timer property


def read_all(store, topic, queue_id=0):
    result = store.get_messages(topic, queue_id, 0, 1000)
    return decode_units_list(result.data) if result.data else []


def _batch(props: list[dict[str, str]], topic="orders", queue_id=3) -> MessageBatch:
    return MessageBatch.of(topic, queue_id, [f"m{i}".encode() for i in range(len(props))],
                           [encode_properties(p) for p in props], born_timestamp=123)


def test_delayed_messages_park_with_their_due_time_and_arrive_when_due(make_store, tmp_path):
    clock = FakeClock()
    store = make_store(clock=clock, message_delay_level=LEVELS)
    now = int(clock() * 1000)
    parts = stored_runs(_batch([{"DELAY": "1", "KEYS": "a"}, {"DELAY": "1"}, {}, {"DELAY": "9"}]), 3,
                        NO_TIMERS)
    assert [(p.topic, p.queue_id, len(p)) for p in parts] == [(SCHEDULE_TOPIC, 0, 2), ("orders", 3, 1),
                                                              (SCHEDULE_TOPIC, 2, 1)]
    result = put_all(store, parts)
    assert result.count == 4
    ent = store.get_queue_entries(SCHEDULE_TOPIC, 0, 0, 10)
    assert ent["tag"].tolist() == [now + 1000, now + 1000]  # the due time, RocketMQ's tags code
    assert store.get_queue_entries(SCHEDULE_TOPIC, 2, 0, 10)["tag"].tolist() == [now + 10_000]
    parked = read_all(store, SCHEDULE_TOPIC, 2)[0]
    assert parked.properties["DELAY"] == "3" and parked.properties[REAL_TOPIC] == "orders"  # clamped to the last
    assert parked.properties[REAL_QID] == "3"

    file = JsonSectionsFile(store.config_file(DELAY_OFFSETS).path)
    file.persist({"pendingRetries": []})  # the retry scheduler's section stays beside ours
    stored = []
    service = ScheduleService(store, file, 10.0, on_stored=lambda *a: stored.append(a), clock=clock)
    service.load()
    assert service.deliver_due(now + 999) == 0 and len(read_all(store, "orders", 3)) == 1
    assert service.deliver_due(now + 1000) == 2
    got = read_all(store, "orders", 3)
    assert [m.body for m in got] == [b"m2", b"m0", b"m1"]
    m0 = got[1]
    assert "DELAY" not in m0.properties and m0.properties["KEYS"] == "a" and m0.properties[REAL_TOPIC] == "orders"
    assert m0.born_timestamp == 123 and stored == [("orders", 3, 3)]
    assert service.pending() == {1: 0, 2: 0, 3: 1}
    service.persist()
    assert file.load() == {"offsetTable": {"1": 2}, "pendingRetries": []}
    again = ScheduleService(store, file, 10.0, clock=clock)
    again.load()
    assert again.deliver_due(now + 5000) == 0  # level 1 done before the restart: not delivered twice
    assert again.deliver_due(now + 10_000) == 1 and again.delivered_total == 1


def test_delay_pairs_are_cut_from_many_messages_at_once(make_store, tmp_path):
    clock = FakeClock()
    store = make_store(clock=clock, message_delay_level=LEVELS)
    n = 5000
    props = [{"A": str(i), "DELAY": "2", "Z": "z"} if i % 2 else {"DELAY": "2"} for i in range(n)]
    put_all(store, stored_runs(_batch(props), 3, NO_TIMERS))
    service = ScheduleService(store, JsonSectionsFile(tmp_path / "d.json"), 10.0, clock=clock)
    assert service.deliver_due(int(clock() * 1000) + 5000) == n
    assert store.get_max_offset("orders", 3) == n
    for m in read_all(store, "orders", 3)[:200]:
        i = int(m.body[1:])
        want = {"A": str(i), "Z": "z"} if i % 2 else {}
        assert {k: v for k, v in m.properties.items() if k not in (REAL_TOPIC, REAL_QID)} == want


def test_the_service_is_idle_until_a_delayed_message_is_stored_or_falls_due(make_store, tmp_path):
    """Idle polls make no pass (a pass makes the store dispatch its backlog on the event loop first):
    a plain message does not wake the service, a delayed one does, and one left waiting wakes it again
    when it falls due, not a millisecond before."""
    clock = FakeClock()
    store = make_store(clock=clock, message_delay_level=LEVELS)
    now = int(clock() * 1000)
    service = ScheduleService(store, JsonSectionsFile(tmp_path / "d.json"), 10.0, clock=clock)
    service.load()
    assert not service.idle(now)  # the first pass looks at what the store recovered
    assert service.deliver_due(now) == 0 and service.idle(now) and service.idle(now + 3_600_000)
    put_all(store, stored_runs(_batch([{}]), 3, NO_TIMERS))
    assert service.idle(now)
    put_all(store, stored_runs(_batch([{"DELAY": "2"}]), 3, NO_TIMERS))
    assert not service.idle(now)
    assert service.deliver_due(now) == 0  # not due yet
    assert service.idle(now + 4999) and not service.idle(now + 5000)
    assert service.deliver_due(now + 5000) == 1 and service.idle(now + 5000) and service.idle(now + 3_600_000)
    assert [m.body for m in read_all(store, "orders", 3)] == [b"m0", b"m0"]
