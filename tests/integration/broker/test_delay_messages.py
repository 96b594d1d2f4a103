"""Delay levels against real ``spark-mq namesrv`` / ``spark-mq broker`` processes, through our
producer: a message sent with a delay level is parked in ``SCHEDULE_TOPIC_XXXX`` (queue
``level - 1``, real topic/queue in REAL_TOPIC/REAL_QID) and reaches its real topic once due, alone
or in a batch; pending messages survive a clean restart (none delivered twice) and a SIGKILL
(none lost; the duplicates at-least-once allows are counted and reported).

"Not before" is exact: a delivered copy's store time minus the original's born time is at least
the delay (born <= parked <= parked + delay <= delivered). "Soon after" allows a loaded machine
a few seconds (LATE_SLACK_MS)."""

from __future__ import annotations

import pytest
from servers import unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message

from ._scheduled import DELIVERY_TIMEOUT_S, delivered, metric, read_all, send_ledger, setup_broker, sigkill_run

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
LATE_SLACK_MS = 4000  # delivery poll (0.1 s) + a loaded machine


def test_levels_1_and_2_alone_and_in_a_batch_arrive_after_their_delay(tmp_path, namesrv):
    broker, topic = setup_broker(tmp_path, namesrv, "", "delay", metrics=True)
    delays = {1: 1000, 2: 5000}  # the default messageDelayLevel's first two levels
    try:
        with SyncProducer(unique("pg"), ClientConfig(namesrv, instance_name=unique("i"))) as p, \
                SyncMQClientAPI(timeout=5.0) as api:
            single = [p.send(Message(topic, f"s{lv}".encode(), tags="T", keys=[f"k{lv}"], delay_level=lv,
                                     properties={"color": "red"}))
                      for lv in (1, 2)]
            batch = [Message(topic, f"b{i}".encode(), delay_level=lv, keys=[f"bk{i}"])
                     for i, lv in enumerate((1, 2, 1, 2, 2))]
            batch_result = p.send(batch)
            late = p.send(Message(topic, b"clamped", delay_level=99))  # above the 18 levels: the last, 2 h
            assert all(r.status == SendStatus.SEND_OK for r in [*single, batch_result, late])

            # parked: nothing in the real topic yet; the 2 h one waits in queue 17 with DELAY clamped to 18
            parked = read_all(api, broker.addr, SCHEDULE_TOPIC, 18)
            by_body = {m.body: m for m in parked}
            assert set(by_body) == {b"s1", b"s2", b"b0", b"b1", b"b2", b"b3", b"b4", b"clamped"}
            assert by_body[b"s2"].queue_id == 1 and by_body[b"b0"].queue_id == 0
            assert by_body[b"clamped"].queue_id == 17 and by_body[b"clamped"].properties["DELAY"] == "18"
            assert by_body[b"s1"].properties["REAL_TOPIC"] == topic
            assert by_body[b"s1"].properties["REAL_QID"] == str(single[0].queue_id)

            want = {b"s1": 1, b"s2": 2, b"b0": 1, b"b1": 2, b"b2": 1, b"b3": 2, b"b4": 2}
            got = wait_until(lambda: (ms := read_all(api, broker.addr, topic)) and len(ms) >= len(want) and ms,
                             DELIVERY_TIMEOUT_S, "the delayed messages in their real topic")
            assert sorted(m.body for m in got) == sorted(want)  # each once, the 2 h one not yet
            for m in got:
                late_by = m.store_timestamp - m.born_timestamp - delays[want[m.body]]
                assert late_by >= 0, f"{m.body!r} delivered {-late_by} ms before its delay"
                assert late_by <= LATE_SLACK_MS, f"{m.body!r} delivered {late_by} ms after its delay"
                assert "DELAY" not in m.properties and m.properties["REAL_TOPIC"] == topic
            s1 = next(m for m in got if m.body == b"s1")
            original = by_body[b"s1"]
            assert (s1.tags, s1.keys, s1.properties["color"]) == ("T", ["k1"], "red")
            assert s1.properties["UNIQ_KEY"] == single[0].msg_id and s1.queue_id == single[0].queue_id
            assert (s1.born_timestamp, s1.born_host) == (original.born_timestamp, original.born_host)
            assert {m.queue_id for m in got if m.body.startswith(b"b")} == {batch_result.queue_id}
        assert metric(broker, "spark_mq_delay_delivered_total") == len(want)
        assert metric(broker, 'spark_mq_delay_pending{level="18"}') == 1
        assert metric(broker, 'spark_mq_delay_pending{level="1"}') == 0
    finally:
        broker.stop_if_running()


FAST_LEVELS = "messageDelayLevel=2s 4s 6s\nflushDelayOffsetInterval=300\n"


def _send_ledger(namesrv: str, topic: str, rounds: int, per_batch: int) -> set[bytes]:
    """Batches across levels 1..3; the bodies of every acknowledged message."""
    return send_ledger(namesrv, topic, rounds, per_batch,
                       lambda r, i: Message(topic, f"r{r}-{i}".encode(), delay_level=1 + (r + i) % 3))


def test_pending_delays_survive_a_clean_restart_each_delivered_once(tmp_path, namesrv):
    broker, topic = setup_broker(tmp_path, namesrv, FAST_LEVELS, "delay")
    try:
        acked = _send_ledger(namesrv, topic, 20, 10)
        assert len(acked) == 200
        broker.restart()  # before the first level is due: all 200 pending across the stop
        with SyncMQClientAPI(timeout=5.0) as api:
            seen = delivered(api, broker, topic, acked, "delayed message")
        assert set(seen) == acked and max(seen.values()) == 1  # clean stop: progress saved, no duplicate
        offsets = (broker.store / "config" / "delayOffset.json").read_text()
        assert '"offsetTable"' in offsets
    finally:
        broker.stop_if_running()


def _sigkill_run(tmp_path, namesrv, kills: int, rounds: int) -> None:
    """Send ``rounds`` batches of 10 delayed messages, SIGKILL the broker ``kills`` times while they are
    being delivered (each restart on the same store), then check the ledger: none lost, duplicates counted."""
    broker, topic = setup_broker(tmp_path, namesrv, FAST_LEVELS, "delay")
    sigkill_run(broker, topic, lambda: _send_ledger(namesrv, topic, rounds, 10), kills, "delay", "delayed message")


def test_pending_delays_survive_sigkill_none_lost_duplicates_counted(tmp_path, namesrv):
    _sigkill_run(tmp_path, namesrv, kills=1, rounds=30)


@pytest.mark.slow
def test_pending_delays_survive_repeated_sigkills(tmp_path, namesrv):
    _sigkill_run(tmp_path, namesrv, kills=4, rounds=300)
