"""``stored_runs``: a send's batch sorted into delay-level, timer and normal runs from one read of its
properties, in message order; a delay level wins over timer properties; a prepared batch is told
apart (``is_prepared_transaction``) before any of it."""

from __future__ import annotations

import pytest

from spark_mq.broker.processors.send_runs import stored_runs
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.transaction.half_messages import is_prepared_transaction, transaction_keys
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import SCHEDULE_TOPIC, TIMER_TOPIC
from spark_mq.common.properties import JoinedProperties, encode_properties

NOW = 1_700_000_000_000
LIMITS = TimerLimits(True, 1000, 3600_000)


def _batch(props: list[dict[str, str]], topic: str = "orders") -> MessageBatch:
    return MessageBatch.of(topic, 1, [f"m{i}".encode() for i in range(len(props))],
                           [encode_properties(p) for p in props], born_timestamp=5)


def test_runs_follow_message_order_and_a_delay_level_wins_over_a_timer():
    batch = _batch([{"DELAY": "2"}, {"DELAY": "2", "TIMER_DELAY_SEC": "5"}, {"TIMER_DELAY_SEC": "5"}, {},
                    {"TIMER_DELAY_MS": "-1"}, {"DELAY": "1"}, {"TIMER_DELAY_SEC": "1"}])
    runs = stored_runs(batch, 3, LIMITS, NOW)
    assert [(r.topic, r.queue_id, [b.decode() for b in r.bodies]) for r in runs] == [
        (SCHEDULE_TOPIC, 1, ["m0", "m1"]), (TIMER_TOPIC, 0, ["m2"]), ("orders", 1, ["m3", "m4"]),
        (SCHEDULE_TOPIC, 0, ["m5"]), (TIMER_TOPIC, 0, ["m6"])]
    assert b"TIMER_OUT_MS" not in runs[0].properties[1]  # parked by its delay level only


def test_plain_batches_go_as_they_came_and_timer_errors_count_from_their_run():
    plain = _batch([{"KEYS": "k"}, {"TAGS": "t"}])
    assert stored_runs(plain, 3, LIMITS, NOW)[0] is plain
    with pytest.raises(MessageValidationError, match="message 0 of the send"):  # the run after the delayed one
        stored_runs(_batch([{"DELAY": "1"}, {"TIMER_DELAY_SEC": "7200"}]), 3, LIMITS, NOW)


def test_a_prepared_batch_is_all_or_nothing_and_keyed_by_its_transaction():
    props = JoinedProperties([encode_properties({"TRAN_MSG": "True", "UNIQ_KEY": "u0", "__transactionId__": "t"}),
                              encode_properties({"TRAN_MSG": "true", "UNIQ_KEY": "u1"})])
    assert is_prepared_transaction(0, props)
    assert transaction_keys(props, 7) == ["t", "u1"]
    with pytest.raises(MessageValidationError, match="mixes 1 transactional"):
        is_prepared_transaction(0, JoinedProperties([encode_properties({"TRAN_MSG": "true"}), b""]))


@pytest.mark.parametrize("value", ["1e3", "99999999999999999999"])
def test_a_delay_that_is_no_level_number_is_refused_with_its_value(value):
    """A DELAY past int64 was an uncaught OverflowError (SYSTEM_ERROR to the client), not the refusal
    every other bad DELAY gets."""
    with pytest.raises(MessageValidationError, match=f"DELAY property b'{value}' is not a delay level number"):
        stored_runs(_batch([{"DELAY": value}]), 18, LIMITS, NOW)
