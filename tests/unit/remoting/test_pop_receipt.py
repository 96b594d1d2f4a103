"""Receipt handles (RocketMQ's extraInfo) and the pop response's queue-info strings, in RocketMQ's exact text:
the strings below are what RocketMQ's ``ExtraInfoUtil.buildExtraInfo`` / ``buildStartOffsetInfo`` produce."""

from __future__ import annotations

import pytest

from spark_mq.remoting.bodies import BatchAck, BatchAckMessageRequestBody
from spark_mq.remoting.pop_receipt import Receipt, ReceiptError, parse_queue_info, pop_retry_topic, queue_info


def test_a_receipt_is_rocketmqs_extra_info_both_ways():
    # buildExtraInfo(120, popTime, 60000, reviveQid 0, "%RETRY%g_orders", "broker-a", queueId 3, msgQueueOffset 121)
    text = "120 1700000000000 60000 0 1 broker-a 3 121"
    r = Receipt.parse(text)
    assert r == Receipt(120, 1700000000000, 60000, 0, True, "broker-a", 3, 121)
    assert r.encode() == text and r.visible_at == 1700000060000 and not r.order
    assert r.real_topic("g", "orders") == "%RETRY%g_orders" == pop_retry_topic("g", "orders")
    assert r.real_topic("g", "%RETRY%g_orders") == "%RETRY%g_orders"  # RocketMQ's Java client acks with it
    seven = Receipt.parse("5 1 2000 999 0 b 0")  # the 7-field form: the request's offset names the message
    assert seven.queue_offset is None and seven.order and seven.encode() == "5 1 2000 999 0 b 0"


@pytest.mark.parametrize("bad", ["", "1 2 3", "a 1 2 0 0 b 0 1", "1 2 3 4 0 b 0 1 9"])
def test_a_malformed_receipt_is_refused_saying_what_to_do(bad):
    with pytest.raises(ReceiptError, match="pass back the receipt handle the pop returned"):
        Receipt.parse(bad)


def test_queue_info_strings_are_rocketmqs():
    info = queue_info([("orders", 2, "120"), ("%RETRY%g_orders", 0, "7")])
    assert info == "0 2 120;1 0 7"
    assert parse_queue_info(info) == {(False, 2): "120", (True, 0): "7"}
    assert parse_queue_info(None) == {}


def test_a_batch_ack_bitset_is_javas_bitset_bytes_in_base64():
    # BitSet with bits 0, 2 and 20 set: toByteArray() == [0x05, 0x00, 0x10] -> base64 "BQAQ"
    ack = BatchAck("g", "orders", False, 10, 1, 0, 5, 6, (10, 12, 30))
    assert ack.to_obj()["b"] == "BQAQ"
    body = BatchAckMessageRequestBody("broker-a", [ack])
    assert BatchAckMessageRequestBody.from_json(body.to_json()) == body
