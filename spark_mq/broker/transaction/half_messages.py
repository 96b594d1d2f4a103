"""Half messages on the send path (RocketMQ's ``TransactionalMessageBridge.parseHalfMessageInner``):
what the broker does with the half run of a send.

A prepared send (``TRAN_MSG=true``, or the prepared type in its sysFlag) is stored in
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 instead of its topic, its real topic and queue in the properties
``REAL_TOPIC``/``REAL_QID``: consumers of the real topic never see it. A batch is prepared as a whole
or not at all (every message ``TRAN_MSG=true``, e.g. the Spark sink's). A transaction is the half
messages with the same ``__transactionId__`` (else each message is its own, by UNIQ_KEY); the
service (``service.py``) tracks each stored half message under it until it is resolved.

Every function here reads the send's properties through the one :class:`JoinedProperties` the send
path made: nothing is decoded per message.
"""

from __future__ import annotations

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import MessageBatch
from spark_mq.common.names import TRANSACTION_HALF_TOPIC
from spark_mq.common.properties import (
    NAME_VALUE_SEPARATOR,
    PRODUCER_GROUP,
    PROPERTY_SEPARATOR,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    TRANSACTION_ID,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    JoinedProperties,
    encode_properties,
)
from spark_mq.remoting.headers import (
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    transaction_type,
)

HALF_TOPIC = TRANSACTION_HALF_TOPIC
HALF_QUEUE_ID = 0
_PREPARED_NEEDLE = f"{TRANSACTION_PREPARED}{NAME_VALUE_SEPARATOR}".encode()
_GROUP_NAME = f"{PRODUCER_GROUP}{NAME_VALUE_SEPARATOR}".encode()


def is_prepared_transaction(sys_flag: int, props: JoinedProperties) -> bool:
    """Whether a send carries prepared transactional messages (in its sysFlag, or as TRAN_MSG=true --
    Java's ``Boolean.parseBoolean`` -- in the properties of the message or of every message of a batch).
    An ordinary send costs one C-level search of the joined properties. Raises MessageValidationError
    for a batch that mixes prepared and ordinary messages.
    """
    if transaction_type(sys_flag) == TRANSACTION_PREPARED_TYPE:
        return True
    if _PREPARED_NEEDLE not in props.joined:
        return False
    prepared = sum(1 for value in props.values(TRANSACTION_PREPARED)[1] if value.lower() == b"true")
    if 0 < prepared < len(props):
        raise MessageValidationError(f"a batch mixes {prepared} transactional (TRAN_MSG=true) message(s) with "
                                     f"{len(props) - prepared} ordinary one(s): send them in separate batches")
    return prepared > 0


def transaction_key(properties: dict[str, str], queue_offset: int) -> str:
    """The transaction of a half message: its ``__transactionId__`` (shared by a prepared batch's
    messages), else its UNIQ_KEY (a message of its own)."""
    return properties.get(TRANSACTION_ID) or properties.get(UNIQ_KEY) or f"half:{queue_offset}"


def transaction_keys(props: JoinedProperties, queue_offset: int) -> list[str]:
    """:func:`transaction_key` of each message of a half batch stored from ``queue_offset`` on, from the
    joined properties of the send."""
    keys = [f"half:{queue_offset + i}" for i in range(len(props))]
    for name in (UNIQ_KEY, TRANSACTION_ID):  # the lower precedence first: a later one overwrites
        rows, values = props.values(name)
        for row, value in zip(rows.tolist(), values, strict=True):
            if value:
                keys[row] = value.decode("utf-8", "replace")
    return keys


def _appended(properties: bytes, tail: bytes) -> bytes:
    """An encoded property string with ``tail`` (encoded pairs) after it; later pairs win on decode."""
    if properties and not properties.endswith(PROPERTY_SEPARATOR.encode()):
        properties += PROPERTY_SEPARATOR.encode()
    return properties + tail


def _names_group(properties: bytes) -> bool:
    return properties.startswith(_GROUP_NAME) or PROPERTY_SEPARATOR.encode() + _GROUP_NAME in properties


def half_batch(batch: MessageBatch, producer_group: str) -> MessageBatch:
    """The half messages of a prepared batch (RocketMQ's ``parseHalfMessageInner`` for each): the real
    topic and queue, and the producer group unless a message names its own, appended to the encoded
    properties (no decoding)."""
    real = encode_properties({REAL_TOPIC: batch.topic, REAL_QUEUE_ID: str(batch.queue_id)})
    with_group = real + encode_properties({PRODUCER_GROUP: producer_group})
    props = [_appended(p, real if _names_group(p) else with_group) for p in batch.properties]
    half = MessageBatch.of(HALF_TOPIC, HALF_QUEUE_ID, batch.bodies, props, born_host=batch.born_host)
    half.born_timestamps[:] = batch.born_timestamps
    half.flags[:] = batch.flags
    half.sys_flags[:] = (batch.sys_flags & ~TRANSACTION_ROLLBACK_TYPE) | TRANSACTION_NOT_TYPE
    half.reconsume_times[:] = batch.reconsume_times
    return half
