"""The naming rule: RocketMQ's TopicValidator pattern matched as a whole, with a length limit per
kind of name; the retry and DLQ topics of a valid group are valid topics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.common.errors import InvalidNameError, MessageValidationError
from spark_mq.common.names import (
    GROUP_MAX_LENGTH,
    KV_NAME_MAX_LENGTH,
    NAME_RULE,
    TOPIC_MAX_LENGTH,
    dlq_topic,
    retry_topic,
    validate_broker_name,
    validate_group,
    validate_kv_name,
    validate_topic,
)

RULES = [validate_topic, validate_group, validate_broker_name, validate_kv_name]
HOSTILE = [
    "", ".", "..", "../x", "g/../../../victim", "/etc", "/", "a/b", "a\\b", "a\x00b", "a\nb", "abc\n", "\nabc",
    " a", "a ", "a.b", "a@b", "a:b", "~", "主题", "é", "a\u200bb", "%RETRY%../x",
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("name", HOSTILE)
def test_names_that_are_paths_or_not_ascii_are_refused_naming_the_rule(rule, name):
    with pytest.raises(InvalidNameError) as e:
        rule(name)
    assert NAME_RULE in str(e.value)


@pytest.mark.parametrize(("rule", "limit"), [(validate_topic, TOPIC_MAX_LENGTH), (validate_group, GROUP_MAX_LENGTH),
                                             (validate_broker_name, TOPIC_MAX_LENGTH),
                                             (validate_kv_name, KV_NAME_MAX_LENGTH)])
def test_length_limits(rule, limit):
    rule("x" * limit)
    with pytest.raises(InvalidNameError, match=f"{limit + 1} bytes, over the {limit} limit"):
        rule("x" * (limit + 1))


@given(st.from_regex(r"[%|a-zA-Z0-9_-]{1,120}", fullmatch=True))
def test_every_valid_group_names_valid_retry_and_dlq_topics(group):
    validate_group(group)
    assert retry_topic(group) == f"%RETRY%{group}"
    assert dlq_topic(group) == f"%DLQ%{group}"
    validate_topic(retry_topic(group))


def test_derived_topics_are_checked_as_a_whole():
    with pytest.raises(InvalidNameError):
        retry_topic("g/../../../victim")
    with pytest.raises(InvalidNameError):
        dlq_topic("x" * 123)  # %DLQ% + 123 = 128
    assert GROUP_MAX_LENGTH == TOPIC_MAX_LENGTH - len("%RETRY%")


def test_a_bad_topic_is_a_message_validation_error():
    """So a send to it is refused as an illegal message, as before."""
    assert issubclass(InvalidNameError, MessageValidationError)
    for good in ("TopicA", "Topic_B-2", "%RETRY%group|x", "TBW102"):
        validate_topic(good)
