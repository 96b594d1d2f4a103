"""JSON bodies of RocketMQ remoting commands, as the Java broker/NameServer write them.

Every body is a dataclass with ``to_json() -> bytes`` (fastjson's form, see
:mod:`spark_mq.remoting.fastjson`) and ``from_json(bytes)`` (fastjson's form, standard JSON,
and what the C++ client's jsoncpp writes). Property names are the Java classes' own
(``common/.../protocol/{body,heartbeat,route}/*.java``, ``common/.../admin/*.java``).

What the C++ client (apache/rocketmq-client-cpp) sends and parses — checked for 1.0.1, the
``librocketmq.so`` bundled in PyPI ``rocketmq==0.4.4`` ("VERSION: 1.0.1, BUILD DATE:
03-14-2018"; source = the repo's commit 461425c), and for tag 2.0.0:

- HEART_BEAT body (``src/protocol/HeartbeatData.h``, ``src/consumer/SubscriptionData.cpp``):
  jsoncpp ``FastWriter`` output, keys sorted, trailing newline. ``consumeType``,
  ``messageModel`` and ``consumeFromWhere`` are the enums' *ordinals* (ints), not names;
  ``subVersion`` is a *string* of digits; ``unitMode``, ``classFilterMode`` and
  ``expressionType`` are never sent; ``tagsSet``/``codeSet`` and ``producerDataSet``/
  ``consumerDataSet``/``subscriptionDataSet`` are absent (not ``[]``) when empty.
  :class:`HeartbeatData` reads all of that.
- GET_ROUTEINFO_BY_TOPIC response (``src/protocol/TopicRouteData.h`` ``Decode``): parsed with a
  jsoncpp ``CharReaderBuilder`` with ``allowNumericKeys = true``, so both ``{0:"addr"}``
  (fastjson's form) and ``{"0":"addr"}`` parse; each key goes through ``atoi``, each address
  through ``asString()``. It reads only ``orderTopicConf`` (``asString``, absent is fine),
  ``queueDatas[].brokerName/readQueueNums/writeQueueNums/perm`` (``asInt``) and
  ``brokerDatas[].brokerName/brokerAddrs``. A Java 4.9.7 NameServer sends the unquoted
  form to clients whose request ``version`` is below V4_9_4 (ordinal 401): C++ 1.0.1 sends 63
  (V3_1_8), 2.0.0 sends 333 (V4_6_0), so both get — and accept — unquoted keys.
- GET_CONSUMER_LIST_BY_GROUP and LOCK_BATCH_MQ responses (``CommandHeader.cpp``,
  ``LockBatchBody.cpp``): parsed with the old ``Json::Reader`` from the body's bytes as a C
  string; ``consumerIdList`` items must be strings; ``lockOKMQSet`` items need ``topic``,
  ``brokerName`` (strings) and ``queueId`` (int). Both are plain JSON.
- LOCK/UNLOCK_BATCH_MQ request bodies: ``{"clientId":..,"consumerGroup":..,"mqSet":[{"brokerName":..,
  "queueId":0,"topic":..}]}`` (``mqSet`` absent when empty).

Names a client sends in a request body (groups and subscribed topics of HEART_BEAT and
CHECK_CLIENT_CONFIG, the group and queues of LOCK/UNLOCK_BATCH_MQ, the topics of REGISTER_BROKER)
are checked against the naming rule (``common/names.py``) as they are decoded: a refusal is a
BodyError naming the field. Bodies a client decodes from a server are not checked.

Enum-valued properties are kept as their Java names (``"CONSUME_PASSIVELY"``); ordinals are
mapped to names on reading. Thread-safety: bodies are plain data; nothing here is shared.
"""

from __future__ import annotations

import base64
import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, TypeVar

from spark_mq.common.errors import BodyError, InvalidNameError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass
from spark_mq.common.names import validate_broker_name, validate_client_id, validate_group, validate_topic
from spark_mq.remoting.fastjson import Bean, JsonKey, ObjectKey, dumps, loads

T = TypeVar("T")

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")  # PULL, PUSH
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"
SUB_ALL = "*"


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ``ExpressionType.isTagType``: no type (C++ clients send none) or TAG."""
    return not expression_type or expression_type == EXPRESSION_TAG


class _Bad(Exception):
    """A body property is missing or of the wrong type; turned into BodyError at the top."""


# --- typed getters over a parsed JSON object ------------------------------------------------

_MISSING: Any = object()


def _obj(v: Any, name: str) -> Mapping[Any, Any]:
    if not isinstance(v, Mapping):
        raise _Bad(f"{name} must be an object, got {type(v).__name__}")
    return v


def _str(o: Mapping[Any, Any], name: str, default: Any = _MISSING) -> Any:
    v = o.get(name)
    if v is None:
        if default is _MISSING:
            raise _Bad(f"{name} is missing")
        return default
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    raise _Bad(f"{name} must be a string, got {v!r}")


def _as_int(v: Any, name: str) -> int:
    if isinstance(v, bool):
        raise _Bad(f"{name} must be an integer, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise _Bad(f"{name} must be an integer, got {v!r}")


def _int(o: Mapping[Any, Any], name: str, default: Any = _MISSING) -> Any:
    v = o.get(name)
    if v is None:
        if default is _MISSING:
            raise _Bad(f"{name} is missing")
        return default
    return _as_int(v, name)


def _float(o: Mapping[Any, Any], name: str, default: float = 0.0) -> float:
    v = o.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise _Bad(f"{name} must be a number, got {v!r}")
    try:
        return float(v)
    except ValueError:
        raise _Bad(f"{name} must be a number, got {v!r}") from None


def _bool(o: Mapping[Any, Any], name: str, default: bool = False) -> bool:
    v = o.get(name)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    raise _Bad(f"{name} must be a boolean, got {v!r}")


def _enum(o: Mapping[Any, Any], name: str, names: tuple[str, ...], default: Any = _MISSING) -> Any:
    v = o.get(name)
    if v is None:
        if default is _MISSING:
            raise _Bad(f"{name} is missing")
        return default
    if isinstance(v, str) and v in names:
        return v
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(names):
        return names[v]  # the C++ client writes ordinals
    raise _Bad(f"{name} must be one of {', '.join(names)}, got {v!r}")


def _list(o: Mapping[Any, Any], name: str, item: Callable[[Any, str], T]) -> list[T]:
    v = o.get(name)
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Bad(f"{name} must be an array, got {type(v).__name__}")
    return [item(x, f"{name}[{i}]") for i, x in enumerate(v)]


def _str_list(v: Any, name: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Bad(f"{name} must be an array, got {type(v).__name__}")
    return [_item_str(x, name) for x in v]


def _map(o: Mapping[Any, Any], name: str) -> Mapping[Any, Any]:
    v = o.get(name)
    if v is None:
        return {}
    return _obj(v, name)


def _item_str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{name} must be a string, got {v!r}")
    return v


def _named(value: str, name: str, rule: Callable[[str], None]) -> str:
    """``value`` if it follows the naming rule ``rule`` (a name in a client's request body)."""
    try:
        rule(value)
    except InvalidNameError as e:
        raise _Bad(f"{name} breaks the naming rule: {e}") from None
    return value


def _int_key(k: Any, name: str) -> int:
    return _as_int(k, f"key {k!r} of {name}")


def _mq_key(k: Any, name: str) -> MessageQueue:
    """A MessageQueue map key in either form: fastjson's object key, or its JSON as a string."""
    if isinstance(k, ObjectKey):
        return MessageQueue.from_obj(k.as_dict(), f"key of {name}")
    if isinstance(k, str) and k.startswith("{"):
        try:
            return MessageQueue.from_obj(_obj(loads(k, name), name), f"key of {name}")
        except BodyError as e:
            raise _Bad(str(e)) from None
    raise _Bad(f"key {k!r} of {name} is not a message queue")


class Body(LazyDataclass):
    """Base of the JSON bodies: ``to_obj``/``from_obj`` per class, bytes at the edge; each body a
    dataclass made at its first instance (``common/lazy_dataclass.py``)."""

    def to_obj(self) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def from_obj(cls, o: Any, name: str) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def to_json(self, standard: bool = False) -> bytes:
        return dumps(self.to_obj(), standard)

    @classmethod
    def from_json(cls: type[T], data: bytes | str) -> T:
        name = cls.__name__
        obj = loads(data, name)
        try:
            return cls.from_obj(obj, name)  # type: ignore[attr-defined]
        except _Bad as e:
            raise BodyError(f"{name}: {e}") from None
        except (TypeError, ValueError, AttributeError, KeyError) as e:  # a shape no check above foresaw
            raise BodyError(f"{name}: malformed ({type(e).__name__}: {e})") from None


# --- shared pieces --------------------------------------------------------------------------


@lazy_dataclass(frozen=True, order=True)
class MessageQueue(JsonKey, LazyDataclass):
    """``org.apache.rocketmq.common.message.MessageQueue``; hashable, usable as a map key (a lazy dataclass: a
    broker makes none before it serves)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_obj(self) -> Bean:
        return Bean(topic=self.topic, brokerName=self.broker_name, queueId=self.queue_id)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> MessageQueue:
        o = _obj(o, name)
        return cls(_str(o, "topic"), _str(o, "brokerName"), _int(o, "queueId"))


@lazy_dataclass
class DataVersion(Body):
    """``DataVersion``: when and how often a broker's topic table changed."""

    timestamp: int = 0
    counter: int = 0

    @classmethod
    def now(cls) -> DataVersion:
        """A table's first version: stamped now, counter 0."""
        return cls(int(time.time() * 1000), 0)

    def next(self) -> DataVersion:
        """The version after a change: stamped now, counter + 1 (RocketMQ's ``nextVersion``)."""
        return DataVersion(int(time.time() * 1000), self.counter + 1)

    def to_obj(self) -> Bean:
        return Bean(timestamp=self.timestamp, counter=self.counter)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> DataVersion:
        o = _obj(o, name)
        return cls(_int(o, "timestamp", 0), _int(o, "counter", 0))


@lazy_dataclass
class KVTable(Body):
    """``KVTable``: ``{"table":{k:v}}``; also the GET_BROKER_RUNTIME_INFO body (all values strings)."""

    table: dict[str, str] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(table={str(k): str(v) for k, v in self.table.items()})

    @classmethod
    def from_obj(cls, o: Any, name: str) -> KVTable:
        o = _obj(o, name)
        return cls({str(k): _item_str(v, f"table[{k}]") for k, v in _map(o, "table").items()})


BrokerRuntimeInfo = KVTable


# --- heartbeat ------------------------------------------------------------------------------


@lazy_dataclass
class SubscriptionData(Body):
    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    class_filter_mode: bool = False
    expression_type: str = EXPRESSION_TAG

    def to_obj(self) -> Bean:
        return Bean(
            classFilterMode=self.class_filter_mode,
            topic=self.topic,
            subString=self.sub_string,
            tagsSet=list(self.tags_set),
            codeSet=list(self.code_set),
            subVersion=self.sub_version,
            expressionType=self.expression_type,
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> SubscriptionData:
        o = _obj(o, name)
        return cls(
            topic=_named(_str(o, "topic"), "topic", validate_topic),
            sub_string=_str(o, "subString", SUB_ALL),
            tags_set=_list(o, "tagsSet", _item_str),
            code_set=_list(o, "codeSet", _as_int),
            sub_version=_int(o, "subVersion", 0),
            class_filter_mode=_bool(o, "classFilterMode"),
            expression_type=_str(o, "expressionType", EXPRESSION_TAG) or EXPRESSION_TAG,
        )


@lazy_dataclass
class ProducerData(Body):
    group_name: str

    def to_obj(self) -> Bean:
        return Bean(groupName=self.group_name)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ProducerData:
        return cls(_named(_str(_obj(o, name), "groupName"), "groupName", validate_group))


@lazy_dataclass
class ConsumerData(Body):
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_obj(self) -> Bean:
        return Bean(
            groupName=self.group_name,
            consumeType=self.consume_type,
            messageModel=self.message_model,
            consumeFromWhere=self.consume_from_where,
            subscriptionDataSet=[s.to_obj() for s in self.subscription_data_set],
            unitMode=self.unit_mode,
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ConsumerData:
        o = _obj(o, name)
        return cls(
            group_name=_named(_str(o, "groupName"), "groupName", validate_group),
            consume_type=_enum(o, "consumeType", CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=_enum(o, "messageModel", MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=_enum(o, "consumeFromWhere", CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"),
            subscription_data_set=_list(o, "subscriptionDataSet", SubscriptionData.from_obj),
            unit_mode=_bool(o, "unitMode"),
        )


@lazy_dataclass
class HeartbeatData(Body):
    """HEART_BEAT request body."""

    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(
            clientID=self.client_id,
            producerDataSet=[p.to_obj() for p in self.producer_data_set],
            consumerDataSet=[c.to_obj() for c in self.consumer_data_set],
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> HeartbeatData:
        o = _obj(o, name)
        return cls(
            client_id=_named(_str(o, "clientID"), "clientID", validate_client_id),
            producer_data_set=_list(o, "producerDataSet", ProducerData.from_obj),
            consumer_data_set=_list(o, "consumerDataSet", ConsumerData.from_obj),
        )


@lazy_dataclass
class ClientConnection(Body):
    """One client connection of a group, as RocketMQ's admin ``Connection``."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def to_obj(self) -> Bean:
        return Bean(clientAddr=self.client_addr, clientId=self.client_id, language=self.language,
                    version=self.version)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ClientConnection:
        o = _obj(o, name)
        return cls(_str(o, "clientId"), _str(o, "clientAddr"), _str(o, "language"), _int(o, "version", 0))


@lazy_dataclass
class ProducerConnection(Body):
    """GET_PRODUCER_CONNECTION_LIST response body: the group's producers (RocketMQ's ``ProducerConnection``)."""

    connection_set: list[ClientConnection] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(connectionSet=[c.to_obj() for c in self.connection_set])

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ProducerConnection:
        return cls(_list(_obj(o, name), "connectionSet", ClientConnection.from_obj))


# --- consumer group -------------------------------------------------------------------------


@lazy_dataclass
class GetConsumerListByGroupResponseBody(Body):
    consumer_id_list: list[str] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(consumerIdList=list(self.consumer_id_list))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> GetConsumerListByGroupResponseBody:
        return cls(_list(_obj(o, name), "consumerIdList", _item_str))


@lazy_dataclass
class ConsumerConnection(Body):
    """GET_CONSUMER_CONNECTION_LIST response body: a group's online members and what they subscribe to."""

    connection_set: list[ClientConnection] = field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def to_obj(self) -> Bean:
        return Bean(connectionSet=[c.to_obj() for c in self.connection_set],
                    subscriptionTable={k: v.to_obj() for k, v in self.subscription_table.items()},
                    consumeType=self.consume_type, messageModel=self.message_model,
                    consumeFromWhere=self.consume_from_where)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ConsumerConnection:
        o = _obj(o, name)
        return cls(_list(o, "connectionSet", ClientConnection.from_obj),
                   {str(k): SubscriptionData.from_obj(v, f"subscriptionTable[{k}]")
                    for k, v in _map(o, "subscriptionTable").items()},
                   _str(o, "consumeType", "CONSUME_PASSIVELY"), _str(o, "messageModel", "CLUSTERING"),
                   _str(o, "consumeFromWhere", "CONSUME_FROM_LAST_OFFSET"))


@lazy_dataclass
class EpochHistory(Body):
    """GET_EPOCH_HISTORY response body (spark_mq's own, controller mode): the broker's commitlog range and
    its epoch entries ``[[epoch, startOffset], ...]``, oldest first: one per master term it has seen."""

    min_offset: int
    max_offset: int
    epochs: list[tuple[int, int]] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(minOffset=self.min_offset, maxOffset=self.max_offset, epochs=[[e, s] for e, s in self.epochs])

    @classmethod
    def from_obj(cls, o: Any, name: str) -> EpochHistory:
        o = _obj(o, name)

        def entry(v: Any, where: str) -> tuple[int, int]:
            if not isinstance(v, list) or len(v) != 2:
                raise _Bad(f"{where} must be [epoch, startOffset], got {v!r}")
            return _as_int(v[0], where), _as_int(v[1], where)

        return cls(_int(o, "minOffset"), _int(o, "maxOffset"), _list(o, "epochs", entry))


@lazy_dataclass
class LockBatchRequestBody(Body):
    """LOCK_BATCH_MQ request body; UNLOCK_BATCH_MQ's has the same properties."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(consumerGroup=self.consumer_group, clientId=self.client_id, mqSet=list(self.mq_set))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> Any:
        o = _obj(o, name)
        return cls(_named(_str(o, "consumerGroup"), "consumerGroup", validate_group), _str(o, "clientId"),
                   _list(o, "mqSet", _requested_queue))


def _requested_queue(o: Any, name: str) -> MessageQueue:
    """A MessageQueue a client names in a request: its topic and broker name follow the rule."""
    mq = MessageQueue.from_obj(o, name)
    _named(mq.topic, f"{name}.topic", validate_topic)
    _named(mq.broker_name, f"{name}.brokerName", validate_broker_name)
    return mq


@lazy_dataclass(frozen=True)
class BatchAck(Body):
    """One pop's acknowledged messages in a BATCH_ACK_MESSAGE (RocketMQ's ``BatchAck``): ``offsets`` travel as
    ``b``, the base64 of Java's ``BitSet.toByteArray`` over ``offset - startOffset``."""

    consumer_group: str
    topic: str
    retry: bool  # read from the pop retry topic
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]

    def to_obj(self) -> Bean:
        bits = 0
        for o in self.offsets:
            bits |= 1 << (o - self.start_offset)
        raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
        return Bean(c=self.consumer_group, t=self.topic, r="1" if self.retry else "0", so=self.start_offset,
                    q=self.queue_id, rq=self.revive_queue_id, pt=self.pop_time, it=self.invisible_time,
                    b=base64.b64encode(raw).decode())

    @classmethod
    def from_obj(cls, o: Any, name: str) -> BatchAck:
        o = _obj(o, name)
        start = _int(o, "so")
        bits = int.from_bytes(base64.b64decode(_str(o, "b", "")), "little")
        offsets = tuple(start + i for i in range(bits.bit_length()) if bits >> i & 1)
        return cls(_named(_str(o, "c"), "c", validate_group), _named(_str(o, "t"), "t", validate_topic),
                   _str(o, "r", "0") == "1", start, _int(o, "q"), _int(o, "rq", 0), _int(o, "pt"), _int(o, "it", 0),
                   offsets)


@lazy_dataclass
class BatchAckMessageRequestBody(Body):
    """BATCH_ACK_MESSAGE's body."""

    broker_name: str
    acks: list[BatchAck] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(brokerName=self.broker_name, acks=[a.to_obj() for a in self.acks])

    @classmethod
    def from_obj(cls, o: Any, name: str) -> BatchAckMessageRequestBody:
        o = _obj(o, name)
        return cls(_str(o, "brokerName", ""), _list(o, "acks", BatchAck.from_obj))


class UnlockBatchRequestBody(LockBatchRequestBody):
    """UNLOCK_BATCH_MQ request body."""


@lazy_dataclass
class CheckClientRequestBody(Body):
    """CHECK_CLIENT_CONFIG request body: a Java consumer asks, before it starts, whether the broker
    serves its subscription's expression type (SQL92)."""

    client_id: str
    group: str
    subscription_data: SubscriptionData | None = None

    def to_obj(self) -> Bean:
        sub = self.subscription_data.to_obj() if self.subscription_data is not None else None
        return Bean(clientId=self.client_id, group=self.group, subscriptionData=sub)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> CheckClientRequestBody:
        o = _obj(o, name)
        sub = o.get("subscriptionData")
        group = _str(o, "group", "")
        return cls(_str(o, "clientId", ""), group and _named(group, "group", validate_group),
                   SubscriptionData.from_obj(sub, name) if sub is not None else None)


@lazy_dataclass
class LockBatchResponseBody(Body):
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(lockOKMQSet=list(self.lock_ok_mq_set))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> LockBatchResponseBody:
        return cls(_list(_obj(o, name), "lockOKMQSet", MessageQueue.from_obj))


# --- topics and routes ----------------------------------------------------------------------


@lazy_dataclass
class TopicConfig(Body):
    """``TopicConfig``: one topic's queues, permissions and flags."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6  # PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_obj(self) -> Bean:
        return Bean(
            topicName=self.topic_name,
            readQueueNums=self.read_queue_nums,
            writeQueueNums=self.write_queue_nums,
            perm=self.perm,
            topicFilterType=self.topic_filter_type,
            topicSysFlag=self.topic_sys_flag,
            order=self.order,
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicConfig:
        o = _obj(o, name)
        sys_flag = _int(o, "topicSysFlag", None)
        return cls(
            topic_name=_str(o, "topicName"),
            read_queue_nums=_int(o, "readQueueNums", 16),
            write_queue_nums=_int(o, "writeQueueNums", 16),
            perm=_int(o, "perm", 6),
            topic_filter_type=_enum(o, "topicFilterType", TOPIC_FILTER_TYPES, "SINGLE_TAG"),
            topic_sys_flag=_int(o, "topicSynFlag", 0) if sys_flag is None else sys_flag,  # QueueData's old name
            order=_bool(o, "order"),
        )


@lazy_dataclass
class TopicConfigSerializeWrapper(Body):
    """GET_ALL_TOPIC_CONFIG response body; also inside RegisterBrokerBody."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_obj(self) -> Bean:
        return Bean(
            topicConfigTable={k: v.to_obj() for k, v in self.topic_config_table.items()},
            dataVersion=self.data_version.to_obj(),
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicConfigSerializeWrapper:
        o = _obj(o, name)
        table = {
            str(k): TopicConfig.from_obj(v, f"topicConfigTable[{k}]") for k, v in _map(o, "topicConfigTable").items()
        }
        return cls(table, DataVersion.from_obj(o.get("dataVersion") or {}, "dataVersion"))


@lazy_dataclass
class RegisterBrokerBody(Body):
    """REGISTER_BROKER request body (JSON; ``decode_compressed`` for ``compressed=true``)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(
            topicConfigSerializeWrapper=self.topic_config_serialize_wrapper.to_obj(),
            filterServerList=list(self.filter_server_list),
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> RegisterBrokerBody:
        o = _obj(o, name)
        wrapper = o.get("topicConfigSerializeWrapper")
        if wrapper is None and "topicConfigTable" in o:
            wrapper = o  # brokers before V3_0_11 send a bare TopicConfigSerializeWrapper
        topics = TopicConfigSerializeWrapper.from_obj(wrapper or {}, "topicConfigSerializeWrapper")
        for key, tc in topics.topic_config_table.items():
            _named(key, "topicConfigTable key", validate_topic)
            _named(tc.topic_name, f"topicConfigTable[{key}].topicName", validate_topic)
        return cls(topics, _list(o, "filterServerList", _item_str))

    def encode_compressed(self) -> bytes:
        """``RegisterBrokerBody.encode(true)``: deflate of length-prefixed pieces; a topic
        config travels as ``"name read write perm filterType"`` (sys flag and order are lost)."""
        out = [_pack_piece(self.topic_config_serialize_wrapper.data_version.to_json())]
        table = self.topic_config_serialize_wrapper.topic_config_table
        out.append(_INT32.pack(len(table)))
        for tc in table.values():
            text = f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}"
            out.append(_pack_piece(text.encode()))
        out.append(_pack_piece(dumps(list(self.filter_server_list))))
        c = zlib.compressobj(9)
        return c.compress(b"".join(out)) + c.flush()

    @classmethod
    def decode_compressed(cls, data: bytes, max_size: int = 64 << 20) -> RegisterBrokerBody:
        name = "RegisterBrokerBody (compressed)"
        try:
            d = zlib.decompressobj()
            raw = d.decompress(data, max_size)
            if d.unconsumed_tail:
                raise BodyError(f"{name}: inflates to more than {max_size} bytes")
            if not d.eof:
                raise BodyError(f"{name}: the deflate stream is truncated")
        except zlib.error as e:
            raise BodyError(f"{name}: {e}") from None
        pos = 0

        def piece() -> bytes:
            nonlocal pos
            if pos + 4 > len(raw):
                raise BodyError(f"{name}: truncated at byte {pos}")
            (n,) = _INT32.unpack_from(raw, pos)
            if n < 0 or pos + 4 + n > len(raw):
                raise BodyError(f"{name}: piece of {n} bytes at byte {pos} does not fit")
            pos += 4 + n
            return raw[pos - n : pos]

        version = DataVersion.from_json(piece())
        if pos + 4 > len(raw):
            raise BodyError(f"{name}: truncated at byte {pos}")
        (count,) = _INT32.unpack_from(raw, pos)
        pos += 4
        if count < 0:
            raise BodyError(f"{name}: negative topic count {count}")
        table: dict[str, TopicConfig] = {}
        for _ in range(count):
            at = pos
            parts = piece().decode(errors="replace").split(" ")
            if len(parts) != 5 or parts[4] not in TOPIC_FILTER_TYPES:
                raise BodyError(f"{name}: bad topic config at byte {at}")
            try:
                nums = [int(p) for p in parts[1:4]]
                _named(parts[0], f"topic at byte {at}", validate_topic)
            except ValueError:
                raise BodyError(f"{name}: bad topic config at byte {at}") from None
            except _Bad as e:
                raise BodyError(f"{name}: {e}") from None
            table[parts[0]] = TopicConfig(parts[0], nums[0], nums[1], nums[2], parts[4])
        servers = loads(piece(), name)
        if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
            raise BodyError(f"{name}: filter server list is not an array of strings")
        return cls(TopicConfigSerializeWrapper(table, version), servers)


_INT32 = struct.Struct(">i")


def _pack_piece(b: bytes) -> bytes:
    return _INT32.pack(len(b)) + b


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32``: what RegisterBrokerRequestHeader.bodyCrc32 carries."""
    return zlib.crc32(body) & 0x7FFFFFFF


@lazy_dataclass
class QueueData(Body):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_syn_flag: int = 0

    def to_obj(self, both_flag_names: bool = False) -> Bean:
        """The flag is "topicSynFlag" through 4.8, "topicSysFlag" since 4.9 (clients ignore both);
        ``both_flag_names`` writes it under both names, for readers of either version."""
        bean = Bean(
            brokerName=self.broker_name,
            readQueueNums=self.read_queue_nums,
            writeQueueNums=self.write_queue_nums,
            perm=self.perm,
            topicSynFlag=self.topic_syn_flag,
        )
        if both_flag_names:
            bean["topicSysFlag"] = self.topic_syn_flag
        return bean

    @classmethod
    def from_obj(cls, o: Any, name: str) -> QueueData:
        o = _obj(o, name)
        return cls(
            _str(o, "brokerName"),
            _int(o, "readQueueNums"),
            _int(o, "writeQueueNums"),
            _int(o, "perm"),
            _int(o, "topicSynFlag", None) or _int(o, "topicSysFlag", 0),
        )


@lazy_dataclass
class BrokerData(Body):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)  # broker id (0 = master) -> "ip:port"

    def to_obj(self) -> Bean:
        return Bean(cluster=self.cluster, brokerName=self.broker_name, brokerAddrs=dict(self.broker_addrs))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> BrokerData:
        o = _obj(o, name)
        addrs = _map(o, "brokerAddrs")
        return cls(
            _str(o, "cluster", ""),
            _str(o, "brokerName"),
            {_int_key(k, "brokerAddrs"): _item_str(v, f"brokerAddrs[{k}]") for k, v in addrs.items()},
        )


@lazy_dataclass
class TopicRouteData(Body):
    """GET_ROUTEINFO_BY_TOPIC response body."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_obj(self, both_flag_names: bool = False) -> Bean:
        return Bean(
            orderTopicConf=self.order_topic_conf,
            queueDatas=[q.to_obj(both_flag_names) for q in self.queue_datas],
            brokerDatas=[b.to_obj() for b in self.broker_datas],
            filterServerTable={k: list(v) for k, v in self.filter_server_table.items()},
        )

    def to_json(self, standard: bool = False, both_flag_names: bool = False) -> bytes:
        """As :meth:`Body.to_json`; ``both_flag_names`` as in :meth:`QueueData.to_obj`."""
        return dumps(self.to_obj(both_flag_names), standard)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicRouteData:
        o = _obj(o, name)
        fst = {str(k): _str_list(v, f"filterServerTable[{k}]") for k, v in _map(o, "filterServerTable").items()}
        return cls(
            _list(o, "queueDatas", QueueData.from_obj),
            _list(o, "brokerDatas", BrokerData.from_obj),
            _str(o, "orderTopicConf", None),
            fst,
        )


@lazy_dataclass
class ClusterInfo(Body):
    """GET_BROKER_CLUSTER_INFO response body."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(
            brokerAddrTable={k: v.to_obj() for k, v in self.broker_addr_table.items()},
            clusterAddrTable={k: list(v) for k, v in self.cluster_addr_table.items()},
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ClusterInfo:
        o = _obj(o, name)
        brokers = {
            str(k): BrokerData.from_obj(v, f"brokerAddrTable[{k}]") for k, v in _map(o, "brokerAddrTable").items()
        }
        clusters = {str(k): _str_list(v, f"clusterAddrTable[{k}]") for k, v in _map(o, "clusterAddrTable").items()}
        return cls(brokers, clusters)


@lazy_dataclass
class TopicList(Body):
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER / GET_TOPICS_BY_CLUSTER response body."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_obj(self) -> Bean:
        return Bean(topicList=list(self.topic_list), brokerAddr=self.broker_addr)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicList:
        o = _obj(o, name)
        return cls(_list(o, "topicList", _item_str), _str(o, "brokerAddr", None))


# --- admin statistics -----------------------------------------------------------------------


@lazy_dataclass
class TopicOffset(Body):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_obj(self) -> Bean:
        return Bean(
            minOffset=self.min_offset, maxOffset=self.max_offset, lastUpdateTimestamp=self.last_update_timestamp
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicOffset:
        o = _obj(o, name)
        return cls(_int(o, "minOffset", 0), _int(o, "maxOffset", 0), _int(o, "lastUpdateTimestamp", 0))


@lazy_dataclass
class TopicStatsTable(Body):
    """GET_TOPIC_STATS_INFO response body: ``offsetTable`` keyed by MessageQueue objects."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(offsetTable={mq: v.to_obj() for mq, v in self.offset_table.items()})

    @classmethod
    def from_obj(cls, o: Any, name: str) -> TopicStatsTable:
        table = _map(_obj(o, name), "offsetTable")
        return cls({_mq_key(k, "offsetTable"): TopicOffset.from_obj(v, "offsetTable value") for k, v in table.items()})


@lazy_dataclass
class OffsetWrapper(Body):
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    def to_obj(self) -> Bean:
        return Bean(
            brokerOffset=self.broker_offset, consumerOffset=self.consumer_offset, lastTimestamp=self.last_timestamp
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> OffsetWrapper:
        o = _obj(o, name)
        return cls(_int(o, "brokerOffset", 0), _int(o, "consumerOffset", 0), _int(o, "lastTimestamp", 0))


@lazy_dataclass
class ConsumeStats(Body):
    """GET_CONSUME_STATS response body."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def to_obj(self) -> Bean:
        return Bean(
            offsetTable={mq: v.to_obj() for mq, v in self.offset_table.items()}, consumeTps=float(self.consume_tps)
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ConsumeStats:
        o = _obj(o, name)
        table = {
            _mq_key(k, "offsetTable"): OffsetWrapper.from_obj(v, "offsetTable value")
            for k, v in _map(o, "offsetTable").items()
        }
        return cls(table, _float(o, "consumeTps"))


@lazy_dataclass
class ResetOffsetBody(Body):
    """INVOKE_BROKER_TO_RESET_OFFSET's response and RESET_CONSUMER_CLIENT_OFFSET's request body: the
    group's new offset per queue, ``offsetTable`` keyed by MessageQueue objects (RocketMQ's ResetOffsetBody)."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(offsetTable=dict(self.offset_table))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ResetOffsetBody:
        table = _map(_obj(o, name), "offsetTable")
        return cls({_mq_key(k, "offsetTable"): _as_int(v, "offsetTable value") for k, v in table.items()})

    def to_json_for_cpp(self) -> bytes:
        """RocketMQ's ResetOffsetBodyForC, what the C++ client reads: ``offsetTable`` a list of
        MessageQueueForC (the queue's fields and its ``offset``), since jsoncpp cannot read object keys."""
        return dumps(Bean(offsetTable=[Bean(mq.to_obj(), offset=o) for mq, o in sorted(self.offset_table.items())]))


# --- broker metadata a slave copies from its master (SlaveSynchronize) ---------------------


@lazy_dataclass
class SubscriptionGroupConfig(Body):
    """``org.apache.rocketmq.common.subscription.SubscriptionGroupConfig`` (4.x fields and defaults, and 5.x's
    ``consumeMessageOrderly``: a 5.x consumer of the group reads each queue in order, over orderly pop); the
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP request body."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False

    def to_obj(self) -> Bean:
        return Bean(
            groupName=self.group_name, consumeEnable=self.consume_enable,
            consumeFromMinEnable=self.consume_from_min_enable, consumeBroadcastEnable=self.consume_broadcast_enable,
            retryQueueNums=self.retry_queue_nums, retryMaxTimes=self.retry_max_times, brokerId=self.broker_id,
            whichBrokerWhenConsumeSlowly=self.which_broker_when_consume_slowly,
            notifyConsumerIdsChangedEnable=self.notify_consumer_ids_changed_enable,
            consumeMessageOrderly=self.consume_message_orderly,
        )

    @classmethod
    def from_obj(cls, o: Any, name: str) -> SubscriptionGroupConfig:
        o = _obj(o, name)
        return cls(
            _str(o, "groupName"), _bool(o, "consumeEnable", True), _bool(o, "consumeFromMinEnable", True),
            _bool(o, "consumeBroadcastEnable", True), _int(o, "retryQueueNums", 1), _int(o, "retryMaxTimes", 16),
            _int(o, "brokerId", 0), _int(o, "whichBrokerWhenConsumeSlowly", 1),
            _bool(o, "notifyConsumerIdsChangedEnable", True), _bool(o, "consumeMessageOrderly", False),
        )


@lazy_dataclass
class SubscriptionGroupWrapper(Body):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG response body (also ``subscriptionGroup.json``'s layout)."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_obj(self) -> Bean:
        return Bean(subscriptionGroupTable={k: v.to_obj() for k, v in self.subscription_group_table.items()},
                    dataVersion=self.data_version.to_obj())

    @classmethod
    def from_obj(cls, o: Any, name: str) -> SubscriptionGroupWrapper:
        o = _obj(o, name)
        table = {str(k): SubscriptionGroupConfig.from_obj(v, f"subscriptionGroupTable[{k}]")
                 for k, v in _map(o, "subscriptionGroupTable").items()}
        return cls(table, DataVersion.from_obj(o.get("dataVersion") or {}, "dataVersion"))


@lazy_dataclass
class ConsumerOffsetSerializeWrapper(Body):
    """GET_ALL_CONSUMER_OFFSET response body: ``{"offsetTable":{"topic@group":{0:42}}}`` (queue ids
    are integer keys, unquoted as fastjson writes them)."""

    offset_table: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(offsetTable={k: dict(v) for k, v in self.offset_table.items()})

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ConsumerOffsetSerializeWrapper:
        table = _map(_obj(o, name), "offsetTable")
        return cls({str(k): {_int_key(q, f"offsetTable[{k}]"): _as_int(v, f"offsetTable[{k}][{q}]")
                             for q, v in _obj(qs, f"offsetTable[{k}]").items()} for k, qs in table.items()})


@lazy_dataclass
class DelayOffsetSerializeWrapper(Body):
    """GET_ALL_DELAY_OFFSET response body: RocketMQ's ``{"offsetTable":{level:offset}}`` (the schedule
    service's progress per delay level); this broker's pending consumer send-back redeliveries travel
    beside it as ``pendingRetries`` (``delayOffset.json``'s entries, which a RocketMQ reader ignores),
    so a slave holds both."""

    offset_table: dict[int, int] = field(default_factory=dict)
    pending_retries: list[Any] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(offsetTable=dict(self.offset_table), pendingRetries=list(self.pending_retries))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> DelayOffsetSerializeWrapper:
        o = _obj(o, name)
        table = {_int_key(k, "offsetTable"): _as_int(v, f"offsetTable[{k}]") for k, v in _map(o, "offsetTable").items()}
        return cls(table, _list(o, "pendingRetries", _obj))


# --- replication controller (RocketMQ 5: protocol/body/{SyncStateSet,ElectMasterResponseBody,...}.java) ---------


def _id_set(o: Mapping[Any, Any], name: str) -> frozenset[int]:
    return frozenset(_list(o, name, _as_int))


@lazy_dataclass(frozen=True)
class SyncStateSet(Body):
    """The replicas of a broker set that have the master's log (ALTER_SYNC_STATE_SET's request body,
    GET_REPLICA_INFO's and REGISTER_BROKER_TO_CONTROLLER's response body)."""

    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def to_obj(self) -> Bean:
        return Bean(syncStateSet=sorted(self.sync_state_set), syncStateSetEpoch=self.sync_state_set_epoch)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> SyncStateSet:
        o = _obj(o, name)
        return cls(_id_set(o, "syncStateSet"), _int(o, "syncStateSetEpoch", 0))


@lazy_dataclass(frozen=True)
class BrokerMemberGroup(Body):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)  # broker id -> address

    def to_obj(self) -> Bean:
        return Bean(cluster=self.cluster, brokerName=self.broker_name, brokerAddrs=dict(self.broker_addrs))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> BrokerMemberGroup:
        o = _obj(o, name)
        addrs = _map(o, "brokerAddrs")
        return cls(_str(o, "cluster", ""), _str(o, "brokerName"),
                   {_int_key(k, "brokerAddrs"): _item_str(v, f"brokerAddrs[{k}]") for k, v in addrs.items()})


@lazy_dataclass(frozen=True)
class ElectMasterResponseBody(Body):
    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: frozenset[int] = frozenset()

    def to_obj(self) -> Bean:
        group = self.broker_member_group.to_obj() if self.broker_member_group is not None else None
        return Bean(brokerMemberGroup=group, syncStateSet=sorted(self.sync_state_set))

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ElectMasterResponseBody:
        o = _obj(o, name)
        group = o.get("brokerMemberGroup")
        return cls(BrokerMemberGroup.from_obj(group, "brokerMemberGroup") if group is not None else None,
                   _id_set(o, "syncStateSet"))


@lazy_dataclass(frozen=True)
class ReplicaIdentity(Body):
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool = False

    def to_obj(self) -> Bean:
        return Bean(brokerName=self.broker_name, brokerId=self.broker_id, brokerAddress=self.broker_address,
                    alive=self.alive)

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ReplicaIdentity:
        o = _obj(o, name)
        return cls(_str(o, "brokerName"), _int(o, "brokerId"), _str(o, "brokerAddress", ""), _bool(o, "alive"))


@lazy_dataclass(frozen=True)
class ReplicasInfo(Body):
    """One broker set in GET_SYNC_STATE_DATA's answer: its master, epochs and replicas in and out of sync."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[ReplicaIdentity] = field(default_factory=list)
    not_in_sync_replicas: list[ReplicaIdentity] = field(default_factory=list)

    def to_obj(self) -> Bean:
        return Bean(masterBrokerId=self.master_broker_id, masterAddress=self.master_address,
                    masterEpoch=self.master_epoch, syncStateSetEpoch=self.sync_state_set_epoch,
                    inSyncReplicas=[r.to_obj() for r in self.in_sync_replicas],
                    notInSyncReplicas=[r.to_obj() for r in self.not_in_sync_replicas])

    @classmethod
    def from_obj(cls, o: Any, name: str) -> ReplicasInfo:
        o = _obj(o, name)
        return cls(_int(o, "masterBrokerId", None), _str(o, "masterAddress", None), _int(o, "masterEpoch", 0),
                   _int(o, "syncStateSetEpoch", 0), _list(o, "inSyncReplicas", ReplicaIdentity.from_obj),
                   _list(o, "notInSyncReplicas", ReplicaIdentity.from_obj))


@lazy_dataclass(frozen=True)
class BrokerReplicasInfo(Body):
    """GET_SYNC_STATE_DATA's response body (its request body is a JSON array of broker names)."""

    replicas_info_table: dict[str, ReplicasInfo] = field(default_factory=dict)

    def to_obj(self) -> Bean:
        return Bean(replicasInfoTable={k: v.to_obj() for k, v in self.replicas_info_table.items()})

    @classmethod
    def from_obj(cls, o: Any, name: str) -> BrokerReplicasInfo:
        table = _map(_obj(o, name), "replicasInfoTable")
        return cls({str(k): ReplicasInfo.from_obj(v, f"replicasInfoTable[{k}]") for k, v in table.items()})


def broker_names_body(data: bytes) -> list[str]:
    """GET_SYNC_STATE_DATA's request body: a JSON array of broker names, each checked against the naming rule."""
    names = loads(data, "broker names")
    try:
        return [_named(_item_str(n, "broker names"), "broker names", validate_broker_name)
                for n in _str_list(names, "broker names")]
    except _Bad as e:
        raise BodyError(f"GET_SYNC_STATE_DATA body: {e}") from None
