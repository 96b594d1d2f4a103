"""A 5.x client's protobuf messages as stored batches: the properties a 4.x client and our consumers read, the FIFO
queue key, the transaction id round trip, and what is refused before anything is stored."""

from __future__ import annotations

import zlib

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from spark_mq.broker.grpc.messages import fifo_key, from_stored, parse_transaction_id, to_batch, transaction_id
from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.java_hash import java_hash
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.properties import decode_properties, encode_properties
from spark_mq.common.unit.decode import decode_messages
from spark_mq.common.unit.encode import encode_batch

HOST = pack_host("127.0.0.1", 5000)


def message(body: bytes = b"b", message_id: str = "ID1", **system) -> pb.Message:
    born = Timestamp(seconds=1_700_000_000)
    return pb.Message(topic=pb.Resource(name="T"), body=body, user_properties={"u": "v"},
                      system_properties=pb.SystemProperties(message_id=message_id, born_timestamp=born, **system))


def test_system_properties_become_rocketmq_properties():
    due = Timestamp(seconds=1_800_000_000)
    batch = to_batch([message(tag="TagA", keys=["k1", "k2"], message_type=pb.NORMAL),
                      message(message_id="ID2", message_group="g", message_type=pb.FIFO),
                      message(message_id="ID3", delivery_timestamp=due, message_type=pb.DELAY)], HOST)
    props = [decode_properties(p) for p in batch.properties]
    assert props[0] == {"UNIQ_KEY": "ID1", "TAGS": "TagA", "KEYS": "k1 k2", "u": "v"}
    assert props[1] == {"UNIQ_KEY": "ID2", "__SHARDINGKEY": "g", "u": "v"}
    assert props[2] == {"UNIQ_KEY": "ID3", "TIMER_DELIVER_MS": "1800000000000", "u": "v"}
    assert batch.born_timestamps.tolist() == [1_700_000_000_000] * 3
    assert (batch.sys_flags == 0).all() and batch.topic == "T"


def test_transactional_messages_are_prepared_halves_of_the_topics_grpc_group():
    batch = to_batch([message(message_type=pb.TRANSACTION)], HOST)
    assert decode_properties(batch.properties[0]) == {"UNIQ_KEY": "ID1", "TRAN_MSG": "true",
                                                      "PGROUP": "rmq_grpc_producer_T", "u": "v"}
    assert batch.sys_flags.tolist() == [1 << 2]  # TRANSACTION_PREPARED_TYPE


@pytest.mark.parametrize("messages, error", [
    ([message(message_id="")], "message_id"),
    ([message(message_type=pb.TRANSACTION), message(message_type=pb.NORMAL)], "mixes transactional"),
])
def test_refused_sends(messages, error):
    with pytest.raises(MessageValidationError, match=error):
        to_batch(messages, HOST)


def test_a_user_property_may_not_forge_a_system_one():
    m = message()
    m.user_properties["TAGS"] = "forged"
    with pytest.raises(MessageValidationError, match="TAGS"):
        to_batch([m], HOST)


def test_fifo_key_is_the_message_groups_java_hash_and_one_group_per_send():
    assert fifo_key([message()]) is None
    assert fifo_key([message(message_group="order-42")] * 2) == abs(java_hash("order-42"))
    with pytest.raises(MessageValidationError, match="several message groups"):
        fifo_key([message(message_group="a"), message(message_group="b")])


def test_transaction_id_round_trip_and_foreign_ids():
    tid = transaction_id(HOST, 123_456_789, 42)
    assert parse_transaction_id(tid) == (123_456_789, 42)
    for foreign in ("", "7F000001", tid + "0", "zz" * 24):
        with pytest.raises((ValueError, MessageValidationError)):
            parse_transaction_id(foreign)


def test_a_stored_message_as_a_5x_client_reads_it():
    props = encode_properties({"UNIQ_KEY": "ID9", "TAGS": "T1", "KEYS": "a b", "__SHARDINGKEY": "g", "ORDER_ID": "7",
                               "REAL_TOPIC": "X", "TRAN_MSG": "true"})
    stored = decode_messages(encode_batch(MessageBatch.of("T", 2, [b"body"], [props], born_timestamp=1000,
                                                          born_host=HOST), 4096, 5, 2000, HOST).data, [0])[0]
    m = from_stored(stored, "T", 2)
    sp = m.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("ID9", "T1", ["a", "b"], "g")
    assert dict(m.user_properties) == {"ORDER_ID": "7"}  # an upper-case user property stays one
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt, sp.born_timestamp.ToMilliseconds()) == (2, 5, 1, 1000)
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == f"{zlib.crc32(b'body'):08X}"
