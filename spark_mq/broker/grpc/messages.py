"""RocketMQ 5's protobuf ``Message`` to our columnar ``MessageBatch`` and back (RocketMQ proxy's
``GrpcConverter``): system properties become RocketMQ's message properties (TAGS, KEYS, UNIQ_KEY,
``__SHARDINGKEY`` for a FIFO message group, TIMER_DELIVER_MS for a delivery timestamp, TRAN_MSG and
PGROUP for a transactional half message), user properties are kept as they are.

A send's properties are written straight into the stored ``name\\x01value\\x02`` form, one bytes object
per message; no dict per message on the send path.
"""

from __future__ import annotations

import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from spark_mq.broker.grpc.stubs import definition_pb2 as pb
from spark_mq.common.errors import MessageValidationError
from spark_mq.common.java_hash import java_hash
from spark_mq.common.message import MessageBatch, unpack_host
from spark_mq.common.message_id import offset_msg_id, parse_offset_msg_id
from spark_mq.common.properties import (
    CHECK_IMMUNITY_TIME,
    DELAY,
    KEY_SEPARATOR,
    KEYS,
    NAME_VALUE_SEPARATOR,
    ORIGIN_MESSAGE_ID,
    PRODUCER_GROUP,
    PROPERTY_SEPARATOR,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    RETRY_TOPIC,
    TAGS,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_OUT_MS,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    TRANSACTION_PREPARED_QUEUE_OFFSET,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
)
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.headers import TRANSACTION_PREPARED_TYPE

SHARDING_KEY = "__SHARDINGKEY"  # MessageConst.PROPERTY_SHARDING_KEY: a FIFO message's group
# the producer group of a 5.x client's transactional messages of a topic (its clients have no producer group;
# a check-back goes to any live 5.x producer that publishes the topic)
GRPC_PRODUCER_GROUP_PREFIX = "rmq_grpc_producer_"
OFFSET_MSG_ID_LENGTH = 32  # an IPv4 store host (8 bytes) and a commitlog offset (8 bytes), in hex
# properties the system properties own: a user property of one of these names would forge them
RESERVED = frozenset({KEYS, TAGS, UNIQ_KEY, SHARDING_KEY, TIMER_DELIVER_MS, TRANSACTION_PREPARED, PRODUCER_GROUP})
# RocketMQ's system properties (a subset of MessageConst.STRING_HASH_SET: those our brokers and clients write), not
# handed to a 5.x client as user properties
SYSTEM = RESERVED | {WAIT_STORE_MSG_OK, DELAY, REAL_TOPIC, REAL_QUEUE_ID, TRANSACTION_CHECK_TIMES, CHECK_IMMUNITY_TIME,
                     TRANSACTION_PREPARED_QUEUE_OFFSET, TRANSACTION_ID, TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_OUT_MS,
                     RETRY_TOPIC, ORIGIN_MESSAGE_ID, "MIN_OFFSET", "MAX_OFFSET", "CLUSTER", "CONSUME_START_TIME",
                     "MSG_REGION", "TRACE_ON", "POP_CK", "INNER_NUM", "INNER_BASE", "TIMER_ENQUEUE_MS",
                     "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "__STARTDELIVERTIME"}


def producer_group(topic: str) -> str:
    """The producer group a 5.x client's transactional message of ``topic`` is stored under."""
    return GRPC_PRODUCER_GROUP_PREFIX + topic


def _properties(m: pb.Message, prepared: bool) -> bytes:
    """``m``'s properties in the stored form."""
    sp = m.system_properties
    pairs: list[tuple[str, str]] = [(UNIQ_KEY, sp.message_id)]
    if sp.tag:
        pairs.append((TAGS, sp.tag))
    if sp.keys:
        pairs.append((KEYS, KEY_SEPARATOR.join(sp.keys)))
    if sp.HasField("message_group"):
        pairs.append((SHARDING_KEY, sp.message_group))
    if sp.HasField("delivery_timestamp"):
        pairs.append((TIMER_DELIVER_MS, str(sp.delivery_timestamp.ToMilliseconds())))
    if prepared:
        pairs += [(TRANSACTION_PREPARED, "true"), (PRODUCER_GROUP, producer_group(m.topic.name))]
    for name, value in m.user_properties.items():
        if name in RESERVED:
            raise MessageValidationError(f"user property {name} is one the system properties set: rename it")
        pairs.append((name, value))
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in pairs).encode()


def to_batch(messages: list[pb.Message], born_host: bytes) -> MessageBatch:
    """The messages of one SendMessageRequest (one topic: the caller checks) as a batch for queue 0 (the send
    path picks the queue). Raises MessageValidationError for a message the broker cannot store."""
    prepared = messages[0].system_properties.message_type == pb.TRANSACTION
    for m in messages:
        if not m.system_properties.message_id:
            raise MessageValidationError("a message without system_properties.message_id")
        if (m.system_properties.message_type == pb.TRANSACTION) != prepared:
            raise MessageValidationError("a send mixes transactional and other messages: send them apart")
    batch = MessageBatch.of(messages[0].topic.name, 0, [m.body for m in messages],
                            [_properties(m, prepared) for m in messages], born_host=born_host)
    batch.born_timestamps[:] = [m.system_properties.born_timestamp.ToMilliseconds() for m in messages]
    if prepared:
        batch.sys_flags[:] = TRANSACTION_PREPARED_TYPE
    return batch


def fifo_key(messages: list[pb.Message]) -> int | None:
    """The queue key of a FIFO send (its message group's hash, as the RocketMQ proxy's queue selector), else None.
    Raises MessageValidationError when a send's messages name different groups (they would go to different
    queues)."""
    groups = {m.system_properties.message_group for m in messages if m.system_properties.HasField("message_group")}
    if not groups:
        return None
    if len(groups) > 1:
        raise MessageValidationError("one send names several message groups: send each group apart")
    return abs(java_hash(groups.pop()))


def transaction_id(store_host: bytes, physical_offset: int, queue_offset: int) -> str:
    """The transaction id a 5.x client gets for a half message: where the broker finds it again (its offset
    message id, then its half queue offset in 16 hex digits), echoed by EndTransaction."""
    return f"{offset_msg_id(store_host, physical_offset)}{queue_offset:016X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """(commitlog offset, half queue offset) of a :func:`transaction_id`; ValueError for anything else."""
    if len(text) != OFFSET_MSG_ID_LENGTH + 16:
        raise ValueError(f"transaction id {text[:64]!r} is not one this broker gave")
    _, physical_offset = parse_offset_msg_id(text[:OFFSET_MSG_ID_LENGTH])
    return physical_offset, int(text[OFFSET_MSG_ID_LENGTH:], 16)


def _timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(int(ms))
    return ts


def from_stored(m: StoredMessage, topic: str, queue_id: int) -> pb.Message:
    """A stored message as a 5.x client reads it (a check-back's message: its real topic and queue)."""
    props = m.properties
    sp = pb.SystemProperties(
        message_id=props.get(UNIQ_KEY) or offset_msg_id(m.store_host, m.physical_offset),
        body_encoding=pb.IDENTITY, queue_id=queue_id, queue_offset=m.queue_offset,
        born_timestamp=_timestamp(m.born_timestamp), store_timestamp=_timestamp(m.store_timestamp),
        born_host=unpack_host(m.born_host), store_host=unpack_host(m.store_host),
        delivery_attempt=m.reconsume_times + 1,
        message_type=pb.TRANSACTION if props.get(TRANSACTION_PREPARED) == "true" else pb.NORMAL)
    if TAGS in props:
        sp.tag = props[TAGS]
    if KEYS in props:
        sp.keys.extend(k for k in props[KEYS].split(KEY_SEPARATOR) if k)
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    user = {k: v for k, v in props.items() if k not in SYSTEM}
    sp.body_digest.CopyFrom(pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(m.body):08X}"))  # the client checks it
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=m.body)

