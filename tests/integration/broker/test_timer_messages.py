"""Timer messages against real ``spark-mq namesrv`` / ``spark-mq broker`` processes, through our producer:
a message sent with ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` is parked in
``rmq_sys_wheel_timer`` (real topic/queue in REAL_TOPIC/REAL_QID, due time in TIMER_OUT_MS) and reaches its
real topic once due, alone or in a batch; bad and too-far values are refused with a clear error and nothing
stored; pending timers survive a clean restart (each delivered once) and SIGKILLs (none lost; the
duplicates at-least-once allows are counted and reported).

"Not before" is exact: the delivered copy's store time is at or after TIMER_OUT_MS (both the broker's
clock). "Soon after" allows the precision plus a loaded machine's slack (LATE_SLACK_MS)."""

from __future__ import annotations

import json
import time

import pytest
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import Message
from spark_mq.remoting.codes import ResponseCode

from ._scheduled import DELIVERY_TIMEOUT_S, delivered, metric, read_all, send_ledger, setup_broker, sigkill_run

TIMER_TOPIC = "rmq_sys_wheel_timer"
PRECISION_MS = 500
LATE_SLACK_MS = 4000  # delivery poll (50 ms) + a loaded machine
TIMER_CONF = (f"timerPrecisionMs={PRECISION_MS}\ntimerMaxDelaySec=60\nmappedFileSizeTimerLog=400000\n"
              "timerFlushIntervalMs=200\n")


def _producer(namesrv: str) -> SyncProducer:
    return SyncProducer(unique("pg"), ClientConfig(namesrv, instance_name=unique("i")))


def test_each_timer_property_alone_and_in_a_batch_arrives_at_its_time(tmp_path, namesrv):
    broker, topic = setup_broker(tmp_path, namesrv, TIMER_CONF, "timer", metrics=True)
    try:
        with _producer(namesrv) as p, SyncMQClientAPI(timeout=5.0) as api:
            now = int(time.time() * 1000)
            single = [
                p.send(Message(topic, b"deliver", tags="T", keys=["k1"], deliver_time_ms=now + 2500,
                               properties={"color": "red"})),
                p.send(Message(topic, b"delay_ms", properties={"TIMER_DELAY_MS": "1500"})),
                p.send(Message(topic, b"delay_sec", properties={"TIMER_DELAY_SEC": "3"})),
            ]
            batch = [Message(topic, f"b{i}".encode(), properties={"TIMER_DELAY_MS": str(1000 + 700 * i)})
                     for i in range(4)]
            batch_result = p.send(batch)
            later = p.send(Message(topic, b"later", properties={"TIMER_DELAY_SEC": "50"}))
            assert all(r.status == SendStatus.SEND_OK for r in [*single, batch_result, later])

            parked = {m.body: m for m in read_all(api, broker.addr, TIMER_TOPIC, 1)}
            assert set(parked) == {b"deliver", b"delay_ms", b"delay_sec", b"b0", b"b1", b"b2", b"b3", b"later"}
            d = parked[b"deliver"]
            assert d.properties["REAL_TOPIC"] == topic and d.properties["REAL_QID"] == str(single[0].queue_id)
            assert int(d.properties["TIMER_OUT_MS"]) == now + 2500

            want = {b"deliver", b"delay_ms", b"delay_sec", b"b0", b"b1", b"b2", b"b3"}
            got = wait_until(lambda: (ms := read_all(api, broker.addr, topic)) and len(ms) >= len(want) and ms,
                             DELIVERY_TIMEOUT_S, "the timer messages in their real topic")
            assert sorted(m.body for m in got) == sorted(want)  # each once, the 50 s one not yet
            for m in got:
                late_by = m.store_timestamp - int(m.properties["TIMER_OUT_MS"])
                assert late_by >= 0, f"{m.body!r} delivered {-late_by} ms before its time"
                assert late_by <= PRECISION_MS + LATE_SLACK_MS, f"{m.body!r} delivered {late_by} ms after its time"
                assert "REAL_TOPIC" not in m.properties
            first = next(m for m in got if m.body == b"deliver")
            assert (first.tags, first.keys, first.properties["color"]) == ("T", ["k1"], "red")
            assert first.properties["UNIQ_KEY"] == single[0].msg_id and first.queue_id == single[0].queue_id
            assert first.born_timestamp == d.born_timestamp
            assert {m.queue_id for m in got if m.body.startswith(b"b")} == {batch_result.queue_id}
        assert metric(broker, "spark_mq_timer_delivered_total") == len(want)
        assert metric(broker, "spark_mq_timer_pending") == 1
        assert metric(broker, "spark_mq_timer_lateness_seconds_count") == len(want)
    finally:
        broker.stop_if_running()


def test_bad_and_too_far_timers_are_refused_with_a_clear_error_and_nothing_stored(tmp_path, namesrv):
    broker, topic = setup_broker(tmp_path, namesrv, TIMER_CONF, "timer")
    try:
        with _producer(namesrv) as p, SyncMQClientAPI(timeout=5.0) as api:
            cases = [({"TIMER_DELAY_SEC": "61"}, "max delay 60000ms"),
                     ({"TIMER_DELIVER_MS": str(int(time.time() * 1000) + 3_600_000)}, "max delay 60000ms"),
                     ({"TIMER_DELAY_MS": "soon"}, "TIMER_DELAY_MS='soon' is not an integer")]
            for props, error in cases:
                with pytest.raises(MQClientError) as e:
                    p.send(Message(topic, b"x", properties=props))
                assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and error in e.value.remark, e.value.remark
            with pytest.raises(MQClientError) as e:  # one bad message refuses its whole batch
                p.send([Message(topic, b"ok", properties={"TIMER_DELAY_SEC": "1"}),
                        Message(topic, b"far", properties={"TIMER_DELAY_SEC": "120"})])
            assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "max delay 60000ms" in e.value.remark
            assert read_all(api, broker.addr, topic) == [] and read_all(api, broker.addr, TIMER_TOPIC, 1) == []
            # the broker serves on, and a due time already passed is stored in the real topic at once
            past = p.send(Message(topic, b"past", properties={"TIMER_DELIVER_MS": "1000"}))
            assert past.status == SendStatus.SEND_OK
            assert [m.body for m in read_all(api, broker.addr, topic)] == [b"past"]
        assert "Traceback" not in broker.log()
    finally:
        broker.stop_if_running()


def _send_ledger(namesrv: str, topic: str, rounds: int, per_batch: int, spread_ms: int) -> set[bytes]:
    """Batches of timers due over ``spread_ms`` from now; the bodies of every acknowledged message."""
    return send_ledger(namesrv, topic, rounds, per_batch, lambda r, i: Message(
        topic, f"r{r}-{i}".encode(), properties={"TIMER_DELAY_MS": str(1000 + (r * per_batch + i) * 37 % spread_ms)}))


def test_pending_timers_survive_a_clean_restart_each_delivered_once(tmp_path, namesrv):
    broker, topic = setup_broker(tmp_path, namesrv, TIMER_CONF, "timer")
    try:
        acked = _send_ledger(namesrv, topic, 20, 10, spread_ms=4000)
        assert len(acked) == 200
        broker.restart()  # most are still pending across the stop
        with SyncMQClientAPI(timeout=5.0) as api:
            seen = delivered(api, broker, topic, acked, "timer message")
        assert set(seen) == acked and max(seen.values()) == 1  # clean stop: progress saved, no duplicate
        progress = json.loads((broker.store / "config" / "timercheck.json").read_text())
        assert progress["queueOffset"] == 200
        assert (broker.store / "timerwheel").exists() and any((broker.store / "timerlog").iterdir())
    finally:
        broker.stop_if_running()


def _sigkill_run(tmp_path, namesrv, kills: int, rounds: int, spread_ms: int) -> None:
    """Send ``rounds`` batches of 10 timers due over ``spread_ms``, SIGKILL the broker ``kills`` times while they are
    being delivered (each restart on the same store), then check the ledger: none lost, duplicates counted."""
    broker, topic = setup_broker(tmp_path, namesrv, TIMER_CONF, "timer")
    sigkill_run(broker, topic, lambda: _send_ledger(namesrv, topic, rounds, 10, spread_ms=spread_ms), kills,
                "timer", "timer message")


def test_pending_timers_survive_sigkill_none_lost_duplicates_counted(tmp_path, namesrv):
    _sigkill_run(tmp_path, namesrv, kills=2, rounds=30, spread_ms=6000)


@pytest.mark.slow
def test_pending_timers_survive_repeated_sigkills(tmp_path, namesrv):
    _sigkill_run(tmp_path, namesrv, kills=6, rounds=300, spread_ms=12_000)
