"""Typed custom headers of RocketMQ remoting commands: what travels in ``extFields``.

One frozen dataclass per RocketMQ ``*RequestHeader`` / ``*ResponseHeader`` class we serve or
send (``common/.../protocol/header/*.java``, ``header/namesrv/*.java``). Attribute names are
Python's; the wire name of every field is RocketMQ's Java field name (camelCase, derived
automatically; ``clientID`` and the single letters of ``SendMessageRequestHeaderV2`` are
given explicitly). Values on the wire are strings, as Java's ``RemotingCommand`` writes them:
ints and longs in decimal, booleans ``"true"``/``"false"``; ``None`` fields are left out.

Decoding (``from_ext_fields``) checks that every field Java marks ``@CFNotNull`` is present
and that every value parses as its Java type (``Integer.parseInt`` rules: optional sign,
ASCII digits, no blanks, in range), and raises :class:`HeaderError` naming the header, its
request and the field. Unknown fields are ignored: clients add their own (the C++ client
always sends ``Signature``, ``AccessKey`` and ``OnsChannel``; Java 4.9 sends ``bname``...).

A field typed ``Topic``, ``Group``, ``BrokerName`` or ``KVName`` is a name that becomes a topic,
a store path or a key: decoding checks it against the naming rule (``common/names.py``), so no
request handler ever sees a name like ``g/../../x``, and the refusal (``HeaderError``, answered
SYSTEM_ERROR as RocketMQ answers an illegal topic) says which rule was broken. An optional name
sent empty reads as absent (the C++ client's UNREGISTER_CLIENT has ``consumerGroup: ""``). A send's
topic is a plain string here: the send processor answers an illegal one MESSAGE_ILLEGAL.

Leniencies, each for a client we must accept (verified in apache/rocketmq-client-cpp):

- C++ client 1.0.1 (the ``librocketmq.so`` inside PyPI ``rocketmq==0.4.4``) and 2.0.x build
  ``extFields`` with jsoncpp and put ints as JSON *numbers* (``"queueId": 3``, ``"sysFlag": 6``,
  ``"maxMsgNums": 32``) next to longs as strings (``src/protocol/CommandHeader.cpp`` ``Encode``).
  Java's fastjson turns them into strings on parse; we accept ``int`` values as well.
- C++ 2.0.x writes booleans with ``ostringstream << bool``, i.e. ``"1"``/``"0"`` (``unitMode``,
  ``batch``; the V2 ``k`` and ``m``). Java's ``Boolean.parseBoolean("1")`` is ``false`` (so a
  Java broker stores a C++ 2.0 batch as one message); we read ``"1"``/``"0"`` as true/false.
- ``CreateTopicRequestHeader.order`` is ``@CFNotNull`` in Java but no C++ client sends it:
  it defaults to false here.

Thread-safety: instances are immutable; every function here is pure.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, TypeVar

from spark_mq.common.errors import HeaderError, InvalidNameError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass, realize
from spark_mq.common.names import validate_broker_name, validate_group, validate_kv_name, validate_topic

Int32 = Annotated[int, "int32"]  # Java Integer / int
Int64 = Annotated[int, "int64"]  # Java Long / long
Topic = Annotated[str, validate_topic]
Group = Annotated[str, validate_group]  # a producer or consumer group
BrokerName = Annotated[str, validate_broker_name]  # a broker or cluster name
KVName = Annotated[str, validate_kv_name]  # a NameServer KV namespace or key
NameRule = Callable[[str], None]

_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")
_MAX_FAST_DIGITS = 19  # a decimal this short is read by int() at once; a longer one by the full check
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0", ""})
# the decimals most fields carry (queue ids and counts, flags, reconsume times...), canonical (no sign, no leading
# zero), by their text: a lookup where a value's checks take four calls (len, isascii, isdigit, int)
_SMALL_NUMBERS = {str(i): i for i in range(1024)}
_TEXT, _NUMBER, _FLAG, _NAMED = range(4)  # Header.fields_of's inline paths: a value of each kind as usually sent

H = TypeVar("H", bound="Header")


# --- flags shared by the headers ----------------------------------------------------------

# PullSysFlag (common/.../sysflag/PullSysFlag.java; C++ src/common/PullSysFlag.cpp)
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x1 << 1
FLAG_SUBSCRIPTION = 0x1 << 2
FLAG_CLASS_FILTER = 0x1 << 3
FLAG_LITE_PULL_MESSAGE = 0x1 << 4  # 4.9 Java lite pull consumer; carries no meaning for the broker


def build_pull_sys_flag(
    commit_offset: bool = False, suspend: bool = False, subscription: bool = False, class_filter: bool = False
) -> int:
    return (
        (FLAG_COMMIT_OFFSET if commit_offset else 0)
        | (FLAG_SUSPEND if suspend else 0)
        | (FLAG_SUBSCRIPTION if subscription else 0)
        | (FLAG_CLASS_FILTER if class_filter else 0)
    )


def clear_commit_offset_flag(sys_flag: int) -> int:
    """What a client does when it pulls from a slave."""
    return sys_flag & ~FLAG_COMMIT_OFFSET


# MessageSysFlag (common/.../sysflag/MessageSysFlag.java): the SEND header's sysFlag
SYS_FLAG_COMPRESSED = 0x1
SYS_FLAG_MULTI_TAGS = 0x1 << 1
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
SYS_FLAG_BORNHOST_V6 = 0x1 << 4
SYS_FLAG_STOREHOST_V6 = 0x1 << 5


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_ROLLBACK_TYPE


# --- the machinery --------------------------------------------------------------------------


def wire(name: str, **kwargs: Any) -> Any:
    """A dataclass field whose wire name is not the camelCase of its attribute name."""
    return field(metadata={"wire": name}, **kwargs)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


@dataclass(frozen=True)
class _Spec:
    """One header field as the wire names and checks it."""

    attr: str
    wire: str
    kind: str  # "str", "int32", "int64" or "bool"
    rule: NameRule | None  # a name field's check (kind "str"), else None
    required: bool


def _fast_kind(s: _Spec) -> int:
    """Which of ``Header.fields_of``'s inline paths a field's usual value takes."""
    if s.kind == "str":
        return _TEXT if s.rule is None else _NAMED
    return _FLAG if s.kind == "bool" else _NUMBER


def _kind(hint: Any) -> tuple[str, NameRule | None]:
    """(kind, name rule) of a field's type hint."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is Annotated:
        meta = hint.__metadata__[0]
        return ("str", meta) if callable(meta) else (meta, None)
    return {str: "str", bool: "bool", int: "int64"}[hint], None


# names a rule accepted, per rule: a request's group or topic is checked once, not on every request (a regular
# expression's fixed cost); bounded against a client inventing names
_ACCEPTED: dict[NameRule, set[str]] = {}
_ACCEPTED_KEPT = 65_536


def _accepted(rule: NameRule, name: str) -> None:
    """``rule(name)``, remembered when it passes."""
    rule(name)
    known = _ACCEPTED.setdefault(rule, set())
    if len(known) < _ACCEPTED_KEPT:
        known.add(name)


def _reader(cls: type[Header]) -> Callable[[typing.Mapping[str, Any] | None], dict[str, Any]]:
    """``cls.fields_of`` as straight-line code, one block per field (made once per class): a loop over the fields
    with a branch on each one's kind costs a send's 14 fields ~5 us on every request the broker parses."""
    env: dict[str, Any] = {"cls": cls, "InvalidNameError": InvalidNameError, "HeaderError": HeaderError,
                           "_accepted": _accepted, "SMALL": _SMALL_NUMBERS}
    lines = ["def fields_of(ext):", "    get = (ext or {}).get", "    kwargs = {}"]
    for i, (s, attr, wire_name, kind, hi) in enumerate(cls._plan()[0]):
        env[f"s{i}"] = s
        lines += [f"    raw = get({wire_name!r})", "    if raw is None:"]
        lines.append(f"        raise HeaderError(cls.label(), {wire_name!r}, cls._alias(s{i}) + 'is missing')"
                     if s.required else "        pass")
        if kind == _NUMBER:  # str.isdigit alone would take other scripts' digits: Java's parseInt takes ASCII only
            lines += ["    elif type(raw) is str and (value := SMALL.get(raw)) is not None:",  # a lookup
                      f"        kwargs[{attr!r}] = value",
                      f"    elif (type(raw) is str and len(raw) < {_MAX_FAST_DIGITS} and raw.isascii()"
                      f" and raw.isdigit() and (value := int(raw)) <= {hi}):", f"        kwargs[{attr!r}] = value"]
        elif kind == _TEXT:
            lines += ["    elif type(raw) is str:", f"        kwargs[{attr!r}] = raw"]
        elif kind == _FLAG:
            lines += ["    elif raw == 'true' or raw == 'false':", f"        kwargs[{attr!r}] = raw == 'true'"]
        else:  # _NAMED: a name its rule accepted before, or accepts now
            env[f"known{i}"] = _ACCEPTED.setdefault(s.rule, set())  # type: ignore[arg-type]
            env[f"rule{i}"] = s.rule
            lines += [f"    elif type(raw) is str and raw in known{i}:", f"        kwargs[{attr!r}] = raw",
                      "    elif type(raw) is str and raw:", "        try:", f"            _accepted(rule{i}, raw)",
                      "        except InvalidNameError:",  # _parse says why, as a HeaderError
                      f"            kwargs[{attr!r}] = cls._parse(s{i}, raw)", "        else:",
                      f"            kwargs[{attr!r}] = raw"]
        lines += ["    else:", f"        kwargs[{attr!r}] = cls._parse(s{i}, raw)"]
    lines.append("    return kwargs")
    exec("\n".join(lines), env)  # code made from the class's own field specs, nothing received
    return env["fields_of"]


class Header(LazyDataclass):
    """Base of every header: ``to_ext_fields`` / ``from_ext_fields`` driven by the fields.

    ``REQUEST`` names the request the header belongs to, for error messages.
    """

    REQUEST: ClassVar[str] = ""
    _specs: ClassVar[tuple[_Spec, ...]]
    _reader_made: ClassVar[Callable[[typing.Mapping[str, Any] | None], dict[str, Any]]]
    _plan_made: ClassVar[tuple[tuple[tuple[_Spec, str, str, int, int], ...], dict[str, Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._specs = ()  # filled lazily: the dataclass decorator runs after this hook

    @classmethod
    def specs(cls) -> tuple[_Spec, ...]:
        if not cls.__dict__.get("_specs"):
            hints = typing.get_type_hints(cls, include_extras=True)
            fields = dataclasses.fields(realize(cls))  # type: ignore[arg-type]
            if factories := [f.name for f in fields if f.default_factory is not dataclasses.MISSING]:
                raise TypeError(f"{cls.__name__}: header fields take plain defaults (of_fields copies them), "
                                f"not default_factory: {factories}")
            cls._specs = tuple(
                _Spec(f.name, f.metadata.get("wire", _camel(f.name)), *_kind(hints[f.name]),
                      required=f.default is dataclasses.MISSING)
                for f in fields
            )
        return cls._specs

    @classmethod
    def label(cls) -> str:
        return f"{cls.__name__} ({cls.REQUEST})" if cls.REQUEST else cls.__name__

    def to_ext_fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        values = self.__dict__
        for _, attr, wire, kind, _ in self._plan()[0]:
            value = values[attr]
            if value is None:
                continue
            if kind == _FLAG:
                out[wire] = "true" if value else "false"
            else:
                out[wire] = value if type(value) is str else str(value)
        return out

    @classmethod
    def from_ext_fields(cls: type[H], ext: typing.Mapping[str, Any] | None) -> H:
        return cls.of_fields(cls.fields_of(ext))

    @classmethod
    def of_fields(cls: type[H], fields: dict[str, Any]) -> H:
        """The header of ``fields`` as ``fields_of`` gives them (checked, every required one there): what
        ``cls(**fields)`` makes, without the frozen ``__init__``'s ``object.__setattr__`` per field (~4 µs for a
        send's 14 fields, on every request the broker parses)."""
        made = object.__new__(cls)
        state = made.__dict__
        state.update(cls._plan()[1])
        state.update(fields)
        return made

    @classmethod
    def fields_of(cls, ext: typing.Mapping[str, Any] | None) -> dict[str, Any]:
        """The checked field values of ``ext`` by attribute name (what ``from_ext_fields`` builds the header of).
        The usual value (a plain string, a short non-negative decimal, "true"/"false", a name its rule accepted
        before) is taken inline; anything else goes through ``_parse``, which checks it fully and says what is
        wrong. The class's own reader, made once from its fields (``_reader``)."""
        reader = cls.__dict__.get("_reader_made")
        if reader is None:
            reader = cls._reader_made = _reader(cls)
        return reader(ext)

    @classmethod
    def _plan(cls) -> tuple[tuple[tuple[_Spec, str, str, int, int], ...], dict[str, Any]]:
        """Made once per class: each field's (spec, attribute, wire name, fast-path kind, upper bound of a number)
        for ``fields_of``, and the defaults of the optional fields for ``of_fields``."""
        plan = cls.__dict__.get("_plan_made")
        if plan is None:
            fields = tuple((s, s.attr, s.wire, _fast_kind(s), _RANGES[s.kind][1] if s.kind in _RANGES else 0)
                           for s in cls.specs())
            defaults = {f.name: f.default for f in dataclasses.fields(realize(cls))  # type: ignore[arg-type]
                        if f.default is not dataclasses.MISSING}
            plan = cls._plan_made = (fields, defaults)
        return plan

    @classmethod
    def _alias(cls, s: _Spec) -> str:
        return f"({_camel(s.attr)}) " if s.wire != _camel(s.attr) and len(s.wire) == 1 else ""

    @classmethod
    def _parse(cls, s: _Spec, raw: Any) -> Any:
        def bad(why: str) -> HeaderError:
            return HeaderError(cls.label(), s.wire, f"{cls._alias(s)}{why}, got {raw!r}")

        if s.kind == "str":
            if isinstance(raw, bool):
                text = "true" if raw else "false"
            elif isinstance(raw, (str, int)):
                text = str(raw)
            else:
                raise bad("must be a string")
            if s.rule is not None:
                if not text and not s.required:
                    return None  # an optional name sent empty (the C++ client's UNREGISTER_CLIENT group)
                try:
                    s.rule(text)
                except InvalidNameError as e:
                    raise HeaderError(cls.label(), s.wire, f"{cls._alias(s)}breaks the naming rule: {e}") from None
            return text
        if s.kind == "bool":
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, int) and raw in (0, 1):
                return bool(raw)
            if isinstance(raw, str):
                low = raw.lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
            raise bad('must be "true" or "false"')
        lo, hi = _RANGES[s.kind]
        if isinstance(raw, bool):
            raise bad(f"must be an {s.kind}")
        if isinstance(raw, str):
            if not _JAVA_INT.match(raw):
                raise bad(f"must be a decimal {s.kind}")
            try:
                value = int(raw)
            except ValueError:  # past Python's limit on the digits of an int read from text
                raise bad(f"is out of {s.kind} range") from None
        elif isinstance(raw, int):
            value = raw
        else:
            raise bad(f"must be a decimal {s.kind}")
        if not lo <= value <= hi:
            raise bad(f"is out of {s.kind} range")
        return value


def header(request: str) -> Any:
    """Class decorator: a frozen, keyword-only dataclass header belonging to ``request``, made at its
    first instance (``common/lazy_dataclass.py``: most of the 75 headers are never built by a process)."""

    def wrap(cls: type[H]) -> type[H]:
        cls.REQUEST = request
        return lazy_dataclass(frozen=True, kw_only=True)(cls)

    return wrap


# --- producer -------------------------------------------------------------------------------


@header("SEND_MESSAGE")
class SendMessageRequestHeader(Header):
    producer_group: Group
    topic: str
    default_topic: str
    default_topic_queue_nums: Int32
    queue_id: Int32
    sys_flag: Int32
    born_timestamp: Int64
    flag: Int32
    properties: str | None = None
    reconsume_times: Int32 | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int32 | None = None
    bname: str | None = None  # 4.9.7+ RpcRequestHeader: the broker name the client targeted

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(**{s.attr: getattr(self, s.attr) for s in self.specs()})


@header("SEND_MESSAGE_V2")
class SendMessageRequestHeaderV2(Header):
    """SendMessageRequestHeader with one-letter wire names (faster for fastjson), same fields."""

    producer_group: Group = wire("a")
    topic: str = wire("b")
    default_topic: str = wire("c")
    default_topic_queue_nums: Int32 = wire("d")
    queue_id: Int32 = wire("e")
    sys_flag: Int32 = wire("f")
    born_timestamp: Int64 = wire("g")
    flag: Int32 = wire("h")
    properties: str | None = wire("i", default=None)
    reconsume_times: Int32 | None = wire("j", default=None)
    unit_mode: bool = wire("k", default=False)
    max_reconsume_times: Int32 | None = wire("l", default=None)
    batch: bool = wire("m", default=False)
    bname: str | None = wire("n", default=None)

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(**{s.attr: getattr(self, s.attr) for s in self.specs()})


def parse_send_request_header(code: int, ext: typing.Mapping[str, Any] | None) -> SendMessageRequestHeader:
    """The V1 header of any send request, as ``AbstractSendMessageProcessor.parseRequestHeader``:
    SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry V2 names, SEND_MESSAGE (10) V1 names.
    A SEND_BATCH_MESSAGE is a batch whatever its ``batch`` field says."""
    if code == 10:
        return SendMessageRequestHeader.from_ext_fields(ext)
    if code not in (310, 320):
        raise ValueError(f"request code {code} is not a send request")
    fields = SendMessageRequestHeaderV2.fields_of(ext)  # V1 and V2 share their attribute names
    if code == 320:
        fields["batch"] = True
    return SendMessageRequestHeader.of_fields(fields)


@header("response to SEND_MESSAGE")
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: Int32
    queue_offset: Int64
    transaction_id: str | None = None


@header("CONSUMER_SEND_MSG_BACK")
class ConsumerSendMsgBackRequestHeader(Header):
    offset: Int64
    group: Group
    delay_level: Int32
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int32 | None = None


@header("END_TRANSACTION")
class EndTransactionRequestHeader(Header):
    """A producer's decision on a half message (RocketMQ's EndTransactionRequestHeader):
    ``commit_or_rollback`` is a TRANSACTION_*_TYPE; the half message is found by its commitlog
    offset and checked against its queue offset (``tran_state_table_offset``)."""

    producer_group: Group
    tran_state_table_offset: Int64
    commit_log_offset: Int64
    commit_or_rollback: Int32
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str | None = None


@header("CHECK_TRANSACTION_STATE")
class CheckTransactionStateRequestHeader(Header):
    """The broker asks a producer for a half message's outcome; the half message is the body."""

    tran_state_table_offset: Int64
    commit_log_offset: Int64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None
    broker_name: str | None = None


# --- consumer -------------------------------------------------------------------------------


@header("PULL_MESSAGE")
class PullMessageRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    queue_offset: Int64
    max_msg_nums: Int32
    sys_flag: Int32
    commit_offset: Int64
    suspend_timeout_millis: Int64
    sub_version: Int64
    subscription: str | None = None
    expression_type: str | None = None  # None means TAG (C++ clients never send it)

    @property
    def has_commit_offset(self) -> bool:
        return bool(self.sys_flag & FLAG_COMMIT_OFFSET)

    @property
    def has_suspend(self) -> bool:
        return bool(self.sys_flag & FLAG_SUSPEND)

    @property
    def has_subscription(self) -> bool:
        return bool(self.sys_flag & FLAG_SUBSCRIPTION)

    @property
    def has_class_filter(self) -> bool:
        return bool(self.sys_flag & FLAG_CLASS_FILTER)


@header("response to PULL_MESSAGE")
class PullMessageResponseHeader(Header):
    """All four are required by the C++ client, as strings: a missing one reads as 0."""

    suggest_which_broker_id: Int64
    next_begin_offset: Int64
    min_offset: Int64
    max_offset: Int64


# --- pop consumption (RocketMQ 5) ----------------------------------------------------------


@header("POP_MESSAGE")
class PopMessageRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32  # -1: any queue of the topic
    max_msg_nums: Int32
    invisible_time: Int64
    poll_time: Int64
    born_time: Int64
    init_mode: Int32  # ConsumeInitMode: 0 MIN, 1 MAX
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@header("response to POP_MESSAGE")  # PEEK_MESSAGE answers with it too
class PopMessageResponseHeader(Header):
    pop_time: Int64
    invisible_time: Int64
    revive_qid: Int32
    rest_num: Int64
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@header("PEEK_MESSAGE")
class PeekMessageRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    max_msg_nums: Int32


@header("ACK_MESSAGE")
class AckMessageRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    extra_info: str
    offset: Int64


@header("CHANGE_MESSAGE_INVISIBLETIME")
class ChangeInvisibleTimeRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    extra_info: str
    offset: Int64
    invisible_time: Int64


@header("response to CHANGE_MESSAGE_INVISIBLETIME")
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: Int64
    invisible_time: Int64
    revive_qid: Int32


@header("NOTIFICATION")
class NotificationRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    poll_time: Int64
    born_time: Int64
    order: bool = False
    attempt_id: str | None = None


@header("response to NOTIFICATION")
class NotificationResponseHeader(Header):
    has_msg: bool


@header("POLLING_INFO")
class PollingInfoRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32


@header("response to POLLING_INFO")
class PollingInfoResponseHeader(Header):
    polling_num: Int32


@header("QUERY_CONSUMER_OFFSET")
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32


@header("response to QUERY_CONSUMER_OFFSET")
class QueryConsumerOffsetResponseHeader(Header):
    offset: Int64


@header("UPDATE_CONSUMER_OFFSET")
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: Group
    topic: Topic
    queue_id: Int32
    commit_offset: Int64


@header("response to UPDATE_CONSUMER_OFFSET")
class UpdateConsumerOffsetResponseHeader(Header):
    pass


@header("INVOKE_BROKER_TO_RESET_OFFSET")
class ResetOffsetRequestHeader(Header):
    """``timestamp`` in ms since the epoch (-1: each queue's max offset); ``is_force`` false moves an
    offset only backwards (RocketMQ's Broker2Client.resetOffset). RESET_CONSUMER_CLIENT_OFFSET, the
    broker's word to the group's members, carries the same header."""

    topic: Topic
    group: Group
    timestamp: Int64
    is_force: bool = False


@header("GET_CONSUMER_LIST_BY_GROUP")
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: Group


@header("NOTIFY_CONSUMER_IDS_CHANGED")
class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: Group


@header("UNREGISTER_CLIENT")
class UnregisterClientRequestHeader(Header):
    client_id: str = wire("clientID")
    producer_group: Group | None = None
    consumer_group: Group | None = None


# --- offsets and lookups --------------------------------------------------------------------


@header("GET_MAX_OFFSET")
class GetMaxOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@header("response to GET_MAX_OFFSET")
class GetMaxOffsetResponseHeader(Header):
    offset: Int64


@header("GET_MIN_OFFSET")
class GetMinOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@header("response to GET_MIN_OFFSET")
class GetMinOffsetResponseHeader(Header):
    offset: Int64


@header("SEARCH_OFFSET_BY_TIMESTAMP")
class SearchOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32
    timestamp: Int64


@header("response to SEARCH_OFFSET_BY_TIMESTAMP")
class SearchOffsetResponseHeader(Header):
    offset: Int64


@header("GET_EARLIEST_MSG_STORETIME")
class GetEarliestMsgStoretimeRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@header("response to GET_EARLIEST_MSG_STORETIME")
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: Int64


@header("QUERY_MESSAGE")
class QueryMessageRequestHeader(Header):
    topic: Topic
    key: str
    max_num: Int32
    begin_timestamp: Int64
    end_timestamp: Int64


@header("response to QUERY_MESSAGE")
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: Int64
    index_last_update_phyoffset: Int64


@header("VIEW_MESSAGE_BY_ID")
class ViewMessageRequestHeader(Header):
    offset: Int64  # commitlog offset, from the message id


# --- admin ----------------------------------------------------------------------------------


@header("GET_TOPIC_STATS_INFO")
class GetTopicStatsInfoRequestHeader(Header):
    topic: Topic


@header("GET_CONSUME_STATS")
class GetConsumeStatsRequestHeader(Header):
    consumer_group: Group
    topic: Topic | None = None


@header("GET_CONSUMER_CONNECTION_LIST")
class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: Group


@header("GET_PRODUCER_CONNECTION_LIST")
class GetProducerConnectionListRequestHeader(Header):
    producer_group: Group


@header("UPDATE_AND_CREATE_TOPIC")
class CreateTopicRequestHeader(Header):
    topic: Topic
    default_topic: str
    read_queue_nums: Int32
    write_queue_nums: Int32
    perm: Int32
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: Int32 | None = None
    order: bool = False


@header("DELETE_TOPIC_IN_BROKER")
class DeleteTopicRequestHeader(Header):
    topic: Topic


@header("DELETE_SUBSCRIPTIONGROUP")
class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: Group
    clean_offset: bool = False  # also forget the group's committed offsets on this broker


# --- tiered storage (spark_mq extensions, no RocketMQ counterpart) -------------------------------


@header("UPDATE_TIERED_OFFSET")
class UpdateTieredOffsetRequestHeader(Header):
    """Queue offsets [0, offset) of ``topic``:``queueId`` are archived (exclusive watermark)."""

    topic: Topic
    queue_id: Int32
    offset: Int64


@header("QUERY_TIERED_OFFSET")
class QueryTieredOffsetRequestHeader(Header):
    topic: Topic
    queue_id: Int32


@header("response to QUERY_TIERED_OFFSET")
class QueryTieredOffsetResponseHeader(Header):
    """``offset``: archived up to (0: nothing yet); ``coldOffset``: first queue offset in the active
    commitlog file (all below lie in full files); the queue's hot ``minOffset`` and ``maxOffset``."""

    offset: Int64
    cold_offset: Int64
    min_offset: Int64
    max_offset: Int64


# --- name server ----------------------------------------------------------------------------


@header("GET_ROUTEINFO_BY_TOPIC")
class GetRouteInfoRequestHeader(Header):
    topic: Topic
    accept_standard_json_only: bool | None = None  # 4.9.4+: ask for quoted map keys


@header("REGISTER_BROKER")
class RegisterBrokerRequestHeader(Header):
    broker_name: BrokerName
    broker_addr: str
    cluster_name: BrokerName
    ha_server_addr: str
    broker_id: Int64
    compressed: bool = False
    body_crc32: Int32 = 0  # crc32(body) & 0x7FFFFFFF; 0 means "not checked"


@header("response to REGISTER_BROKER")
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@header("UNREGISTER_BROKER")
class UnRegisterBrokerRequestHeader(Header):
    broker_name: BrokerName
    broker_addr: str
    cluster_name: BrokerName
    broker_id: Int64


@header("QUERY_DATA_VERSION")
class QueryDataVersionRequestHeader(Header):
    broker_name: BrokerName
    broker_addr: str
    cluster_name: BrokerName
    broker_id: Int64


@header("response to QUERY_DATA_VERSION")
class QueryDataVersionResponseHeader(Header):
    changed: bool


@header("DELETE_TOPIC_IN_NAMESRV")
class DeleteTopicFromNamesrvRequestHeader(Header):
    topic: Topic
    cluster_name: BrokerName | None = None


@header("WIPE_WRITE_PERM_OF_BROKER")
class WipeWritePermOfBrokerRequestHeader(Header):
    broker_name: BrokerName


@header("response to WIPE_WRITE_PERM_OF_BROKER")
class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: Int32


@header("GET_TOPICS_BY_CLUSTER")
class GetTopicsByClusterRequestHeader(Header):
    cluster: BrokerName


@header("PUT_KV_CONFIG")
class PutKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName
    value: str


@header("GET_KV_CONFIG")
class GetKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName


@header("response to GET_KV_CONFIG")
class GetKVConfigResponseHeader(Header):
    value: str | None = None


@header("DELETE_KV_CONFIG")
class DeleteKVConfigRequestHeader(Header):
    namespace: KVName
    key: KVName


@header("GET_KVLIST_BY_NAMESPACE")
class GetKVListByNamespaceRequestHeader(Header):
    namespace: KVName


# --- replication controller (RocketMQ 5: header/controller/*.java, header/namesrv/BrokerHeartbeatRequestHeader) ----


@header("BROKER_HEARTBEAT")
class BrokerHeartbeatRequestHeader(Header):
    cluster_name: BrokerName
    broker_addr: str
    broker_name: BrokerName
    broker_id: Int64 | None = None
    epoch: Int32 | None = None  # the broker's last master epoch (its epoch file's newest entry)
    max_offset: Int64 | None = None  # its commitlog's end
    confirm_offset: Int64 | None = None
    heartbeat_timeout_mills: Int64 | None = None  # silence after which it counts as dead (controller default if absent)
    election_priority: Int32 | None = None  # lower is preferred among equally up-to-date replicas
    master_lease_mills: Int64 | None = None  # ours: the lease it holds as master; a new leader waits it out


@header("response to BROKER_HEARTBEAT")
class BrokerHeartbeatResponseHeader(Header):
    """Ours (a RocketMQ controller answers without them): only the leader's answer renews a master's lease, and
    only for a broker that knows its set's newest master epoch (a deposed master learns it is deposed)."""

    is_leader: bool | None = None
    master_epoch: Int32 | None = None  # the leader's: the set's master epoch


@header("CONTROLLER_REGISTER_BROKER")
class RegisterBrokerToControllerRequestHeader(Header):
    cluster_name: BrokerName
    broker_name: BrokerName
    broker_id: Int64
    broker_address: str
    invoke_time: Int64 = 0


@header("response to CONTROLLER_REGISTER_BROKER")
class RegisterBrokerToControllerResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@header("CONTROLLER_ELECT_MASTER")
class ElectMasterRequestHeader(Header):
    cluster_name: str = ""
    broker_name: BrokerName
    broker_id: Int64 = -1  # -1: the controller's own trigger (its master died)
    designate_elect: bool = False  # elect broker_id if it may be elected (the admin's preferred replica)
    invoke_time: Int64 = 0


@header("response to CONTROLLER_ELECT_MASTER")
class ElectMasterResponseHeader(Header):
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@header("NOTIFY_BROKER_ROLE_CHANGED")
class NotifyBrokerRoleChangedRequestHeader(Header):
    """The controller's push of a new master to the set's live brokers; the body is the SyncStateSet."""

    master_address: str | None = None
    master_epoch: Int32
    sync_state_set_epoch: Int32
    master_broker_id: Int64


@header("CONTROLLER_ALTER_SYNC_STATE_SET")
class AlterSyncStateSetRequestHeader(Header):
    broker_name: BrokerName
    master_broker_id: Int64
    master_epoch: Int32
    invoke_time: Int64 = 0


@header("response to CONTROLLER_ALTER_SYNC_STATE_SET")
class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: Int32


@header("CONTROLLER_GET_REPLICA_INFO")
class GetReplicaInfoRequestHeader(Header):
    broker_name: BrokerName


@header("response to CONTROLLER_GET_REPLICA_INFO")
class GetReplicaInfoResponseHeader(Header):
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None


@header("response to CONTROLLER_GET_METADATA_INFO")
class GetMetaDataResponseHeader(Header):
    """Also the extFields of a CONTROLLER_NOT_LEADER answer, so a broker knows where to go."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None
