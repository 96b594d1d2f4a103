"""extFields headers: round trips, what real clients send, and typed errors naming the field."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.common import perm
from spark_mq.common.errors import HeaderError, SparkMQError
from spark_mq.remoting import headers as h
from spark_mq.remoting.codes import RequestCode

ALL_HEADERS = [c for c in vars(h).values() if isinstance(c, type) and issubclass(c, h.Header) and c is not h.Header]

_VALUES = {
    "str": st.text(max_size=20),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(),
}
NAMES = st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True)  # what a name field (Topic, Group...) takes


@st.composite
def header_instances(draw):
    cls = draw(st.sampled_from(ALL_HEADERS))
    kwargs = {}
    for s in cls.specs():
        if s.required or draw(st.booleans()):  # an optional field left out keeps its default
            kwargs[s.attr] = draw(NAMES if s.rule else _VALUES[s.kind])
    return cls(**kwargs)


@given(header_instances())
def test_every_header_round_trips_through_string_ext_fields(header):
    ext = header.to_ext_fields()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items())
    parsed = type(header).from_ext_fields(ext)
    assert parsed == header and hash(parsed) == hash(header) and repr(parsed) == repr(header)


def test_every_request_name_is_a_request_code():
    for cls in ALL_HEADERS:
        name = cls.REQUEST.removeprefix("response to ")
        assert name in RequestCode.__members__, cls


def test_wire_names_are_rocketmq_field_names():
    assert [s.wire for s in h.PullMessageRequestHeader.specs()] == [
        "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
        "suspendTimeoutMillis", "subVersion", "subscription", "expressionType",
    ]  # fmt: skip
    assert [s.wire for s in h.UnregisterClientRequestHeader.specs()] == ["clientID", "producerGroup", "consumerGroup"]
    assert [s.wire for s in h.QueryMessageResponseHeader.specs()] == [
        "indexLastUpdateTimestamp",
        "indexLastUpdatePhyoffset",
    ]
    assert [s.wire for s in h.RegisterBrokerRequestHeader.specs()] == [
        "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId", "compressed", "bodyCrc32",
    ]  # fmt: skip
    assert "".join(s.wire for s in h.SendMessageRequestHeaderV2.specs()) == "abcdefghijklmn"


def test_pull_response_fields_are_all_present_as_decimal_strings():
    # the C++ client reads each with isString() and str2ll(): a missing or numeric one reads as 0
    ext = h.PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=32, min_offset=0, max_offset=-1 + 2**40
    ).to_ext_fields()
    assert ext == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "32",
        "minOffset": "0",
        "maxOffset": str(2**40 - 1),
    }


def test_send_response_and_booleans_are_written_like_java():
    ext = h.SendMessageResponseHeader(msg_id="7F00000100002A9F0000000000000000", queue_id=3, queue_offset=9)
    assert ext.to_ext_fields() == {"msgId": "7F00000100002A9F0000000000000000", "queueId": "3", "queueOffset": "9"}
    reg = h.RegisterBrokerRequestHeader(
        broker_name="b", broker_addr="127.0.0.1:10911", cluster_name="c", ha_server_addr="127.0.0.1:10912", broker_id=0
    )
    assert reg.to_ext_fields()["compressed"] == "false"
    assert reg.to_ext_fields()["bodyCrc32"] == "0"


def test_cpp_client_pull_request_with_numeric_values_parses():
    # what C++ client 1.0.1's push consumer sends (CommandHeader.cpp Encode: ints as JSON numbers)
    ext = {
        "consumerGroup": "g", "topic": "t", "queueId": 3, "queueOffset": "128", "maxMsgNums": 32, "sysFlag": 7,
        "commitOffset": "120", "subVersion": "1700000000000", "suspendTimeoutMillis": "15000",
        "subscription": "*", "Signature": "", "AccessKey": "", "OnsChannel": "",
    }  # fmt: skip
    req = h.PullMessageRequestHeader.from_ext_fields(ext)
    assert (req.queue_id, req.queue_offset, req.max_msg_nums, req.commit_offset) == (3, 128, 32, 120)
    assert req.has_commit_offset and req.has_suspend and req.has_subscription and not req.has_class_filter
    assert req.expression_type is None


def test_pull_sys_flags():
    assert h.build_pull_sys_flag(commit_offset=True, suspend=True, subscription=True) == 7
    assert h.build_pull_sys_flag(suspend=True, subscription=True) == 6
    assert h.build_pull_sys_flag(class_filter=True) == h.FLAG_CLASS_FILTER == 8
    assert h.clear_commit_offset_flag(7) == 6
    assert (perm.PERM_READ, perm.PERM_WRITE, perm.PERM_INHERIT, perm.PERM_READ_WRITE) == (4, 2, 1, 6)


def _send_v1() -> h.SendMessageRequestHeader:
    return h.SendMessageRequestHeader(
        producer_group="pg", topic="t", default_topic="TBW102", default_topic_queue_nums=4, queue_id=2, sys_flag=0,
        born_timestamp=1700000000123, flag=0, properties="TAGS\x01a\x02", reconsume_times=0, max_reconsume_times=16,
    )  # fmt: skip


def test_send_v2_uses_single_letters_and_converts_both_ways():
    v1 = _send_v1()
    v2 = v1.to_v2()
    assert v2.to_ext_fields() == {
        "a": "pg", "b": "t", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1700000000123", "h": "0",
        "i": "TAGS\x01a\x02", "j": "0", "k": "false", "l": "16", "m": "false",
    }  # fmt: skip
    assert v2.to_v1() == v1
    assert h.parse_send_request_header(RequestCode.SEND_MESSAGE_V2, v2.to_ext_fields()) == v1
    assert h.parse_send_request_header(RequestCode.SEND_MESSAGE, v1.to_ext_fields()) == v1
    assert h.parse_send_request_header(RequestCode.SEND_BATCH_MESSAGE, v2.to_ext_fields()).batch is True
    with pytest.raises(ValueError):
        h.parse_send_request_header(RequestCode.PULL_MESSAGE, {})


def test_cpp_2_0_batch_flag_one_is_true():
    ext = _send_v1().to_v2().to_ext_fields() | {"k": "0", "m": "1", "d": 4, "e": 2}
    v1 = h.parse_send_request_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert v1.batch is True and v1.unit_mode is False and v1.queue_id == 2


def test_cpp_1_0_send_without_optional_fields():
    ext = {
        "producerGroup": "pg", "topic": "t", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 0,
        "sysFlag": 0, "bornTimestamp": "1700000000000", "flag": 0, "properties": "",
    }  # fmt: skip
    req = h.SendMessageRequestHeader.from_ext_fields(ext)
    assert req.reconsume_times is None and req.batch is False and req.properties == ""


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_missing_required_field_names_field_and_request(cls):
    full = {s.wire: {"str": "x", "int32": "1", "int64": "1", "bool": "true"}[s.kind] for s in cls.specs()}
    for s in cls.specs():
        if not s.required:
            continue
        ext = dict(full)
        del ext[s.wire]
        with pytest.raises(HeaderError) as e:
            cls.from_ext_fields(ext)
        assert e.value.field == s.wire
        assert repr(s.wire) in str(e.value) and cls.REQUEST in str(e.value) and "missing" in str(e.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("queueId", "1a"), ("queueId", " 1"), ("queueId", "1_000"), ("queueId", "2147483648"), ("queueId", ""),
        ("queueId", 1.5), ("queueId", True), ("queueId", None), ("queueOffset", "9223372036854775808"),
        ("queueOffset", "0x10"), ("topic", ["t"]), ("topic", {"a": 1}), ("sysFlag", "١"),
        ("queueOffset", "9" * 5000), ("queueId", "99999999999999999999"),
    ],
)  # fmt: skip
def test_invalid_values_raise_header_error(field, value):
    ext = {
        "consumerGroup": "g", "topic": "t", "queueId": "1", "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0",
        "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
    }  # fmt: skip
    ext[field] = value
    with pytest.raises(HeaderError) as e:
        h.PullMessageRequestHeader.from_ext_fields(ext)
    assert e.value.field == field
    assert isinstance(e.value, SparkMQError)


NAME_FIELDS = [(cls, s) for cls in ALL_HEADERS for s in cls.specs() if s.rule is not None]


@pytest.mark.parametrize(("cls", "spec"), NAME_FIELDS, ids=lambda x: getattr(x, "__name__", getattr(x, "wire", "")))
@pytest.mark.parametrize("name", ["g/../../../x", "..", "/abs", "a\\b", "a\x00b", "abc\n", "主题", "a.b", "T" * 256])
def test_every_name_field_refuses_a_name_that_breaks_the_rule(cls, spec, name):
    ext = {s.wire: {"str": "x", "int32": "1", "int64": "1", "bool": "true"}[s.kind] for s in cls.specs()}
    ext[spec.wire] = name
    with pytest.raises(HeaderError) as e:
        cls.from_ext_fields(ext)
    assert e.value.field == spec.wire and "naming rule" in str(e.value)


def test_name_fields_are_the_names_that_become_topics_paths_or_keys():
    names = {(cls.REQUEST, s.wire) for cls, s in NAME_FIELDS}
    for request in ("PULL_MESSAGE", "QUERY_CONSUMER_OFFSET", "UPDATE_CONSUMER_OFFSET", "GET_CONSUME_STATS"):
        assert {(request, "topic"), (request, "consumerGroup")} <= names
    assert {("CONSUMER_SEND_MSG_BACK", "group"), ("UPDATE_AND_CREATE_TOPIC", "topic"),
            ("DELETE_TOPIC_IN_BROKER", "topic"), ("UPDATE_TIERED_OFFSET", "topic"), ("REGISTER_BROKER", "brokerName"),
            ("REGISTER_BROKER", "clusterName"), ("PUT_KV_CONFIG", "namespace"), ("PUT_KV_CONFIG", "key")} <= names
    # an optional name sent empty is absent (the C++ client unregisters with consumerGroup "")
    req = h.UnregisterClientRequestHeader.from_ext_fields({"clientID": "c", "producerGroup": "p", "consumerGroup": ""})
    assert (req.producer_group, req.consumer_group) == ("p", None)


def test_bad_boolean_and_v2_error_mentions_meaning():
    ext = _send_v1().to_v2().to_ext_fields() | {"m": "yes"}
    with pytest.raises(HeaderError, match=r"'m' \(batch\)"):
        h.SendMessageRequestHeaderV2.from_ext_fields(ext)
    del ext["e"]
    with pytest.raises(HeaderError, match=r"SEND_MESSAGE_V2.*'e' \(queueId\) is missing"):
        h.SendMessageRequestHeaderV2.from_ext_fields(ext)


def test_java_integer_forms_accepted():
    req = h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": "+7"})
    assert req.queue_id == 7
    assert h.GetMaxOffsetResponseHeader.from_ext_fields({"offset": "-1"}).offset == -1


def test_headers_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _send_v1().topic = "x"  # type: ignore[misc]
    parsed = h.parse_send_request_header(310, _send_v1().to_v2().to_ext_fields())  # built without __init__
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.topic = "x"  # type: ignore[misc]


def test_a_header_field_with_a_default_factory_is_refused():
    """``of_fields`` copies plain defaults into a parsed header: a factory's value would be missing from it."""

    @h.header("TEST_FACTORY")
    class FactoryHeader(h.Header):
        topic: str
        extra: str = dataclasses.field(default_factory=str)

    with pytest.raises(TypeError, match="default_factory: \\['extra'\\]"):
        FactoryHeader.from_ext_fields({"topic": "t"})


@pytest.mark.parametrize("text", ["0", "7", "1023", "1024", "4095", "007", "+5", "-0", "-3", "2147483647"])
def test_small_decimals_read_as_any_decimal(text):
    """A decimal a lookup reads (0-1023 as written canonically) and one the full check reads give the same int."""
    req = h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": text})
    assert req.queue_id == int(text) and type(req.queue_id) is int
