"""What every consumer shares about what it reads: tag expressions (``"a || b"``, ``"*"``), the
client-side tag filter, and where a group starts on a queue it has no committed offset for.

The broker filters a pull by tag *hash* only (the consume queue keeps ``tags.hashCode()``), so two
tags with one hash both come back; consumers keep the messages whose tag string matches, as
RocketMQ's ``PullAPIWrapper.processPullResult`` does.

Start offsets (RocketMQ's ``RebalancePushImpl.computePullFromWhere``): a committed offset of the
group always wins; without one, ``consume_from`` decides — ``"last"`` (CONSUME_FROM_LAST_OFFSET:
the queue's max offset, i.e. only new messages), ``"first"`` (CONSUME_FROM_FIRST_OFFSET: the
queue's min offset), or a timestamp in ms (CONSUME_FROM_TIMESTAMP: the first message stored at
or after it). Retry topics (``%RETRY%``) start at 0 for "last" and at the max offset for a
timestamp, as RocketMQ's. Thread-safety: pure functions, plus one async resolution on the loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from spark_mq.client.offset_store import OffsetStore, broker_addr_of
from spark_mq.common.errors import ClientError, ConfigError
from spark_mq.common.java_hash import java_hash
from spark_mq.common.names import RETRY_GROUP_TOPIC_PREFIX
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import (
    EXPRESSION_SQL92,
    EXPRESSION_TAG,
    SUB_ALL,
    CheckClientRequestBody,
    MessageQueue,
    SubscriptionData,
)

if TYPE_CHECKING:
    from spark_mq.client.instance import ClientInstance

ConsumeFrom = Literal["last", "first"] | int

_CONSUME_FROM_WHERE = {"last": "CONSUME_FROM_LAST_OFFSET", "first": "CONSUME_FROM_FIRST_OFFSET"}


def check_expression_type(expression_type: str) -> None:
    """Only TAG and SQL92 subscriptions exist (ConfigError otherwise): a typo'd type would be read
    by the broker as something else."""
    if expression_type not in (EXPRESSION_TAG, EXPRESSION_SQL92):
        raise ConfigError(f"expression_type must be {EXPRESSION_TAG!r} or {EXPRESSION_SQL92!r}, "
                          f"got {expression_type!r}")


def parse_tags(expression: str | None, expression_type: str = EXPRESSION_TAG) -> frozenset[str] | None:
    """The tags of ``"a || b"``; None (everything) for ``"*"``, empty or None, and for a SQL92
    expression (the broker filters those exactly: nothing is left to filter here)."""
    if expression_type == EXPRESSION_SQL92 or expression is None or expression.strip() in ("", SUB_ALL):
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return tags or None


def subscription_data(topic: str, expression: str = SUB_ALL, sub_version: int = 0,
                      expression_type: str = EXPRESSION_TAG) -> SubscriptionData:
    """The HEART_BEAT subscription of ``topic``: a tag expression (tags and their hash codes sorted)
    or a SQL92 one (sent as written)."""
    check_expression_type(expression_type)
    if expression_type == EXPRESSION_SQL92:
        if not expression or not expression.strip():
            raise ConfigError("a SQL92 subscription needs an expression, e.g. \"a > 5 AND TAGS IN ('x')\"")
        return SubscriptionData(topic, expression, sub_version=sub_version, expression_type=EXPRESSION_SQL92)
    tags = parse_tags(expression)
    if tags is None:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version, expression_type=EXPRESSION_TAG)
    ordered = sorted(tags)
    return SubscriptionData(topic, " || ".join(ordered), tags_set=ordered,
                            code_set=[java_hash(t) for t in ordered], sub_version=sub_version,
                            expression_type=EXPRESSION_TAG)


async def check_in_brokers(instance: ClientInstance, group: str, sub: SubscriptionData) -> None:
    """RocketMQ's ``checkClientInBroker``: a SQL92 subscription is checked with CHECK_CLIENT_CONFIG by
    every master of its topic, so a broker without ``enablePropertyFilter`` or an expression that
    does not parse fails the subscribe (MQClientError with the broker's reason and the error's
    position) instead of a consumer that silently never receives. Tag subscriptions need no check;
    a topic without a route yet is checked by its pulls."""
    if sub.expression_type != EXPRESSION_SQL92:
        return
    route = await instance.route(sub.topic, refresh=True)
    body = CheckClientRequestBody(instance.client_id, group, sub)
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name) if route else []:
        addr = instance.broker_addr(b.broker_name)
        if addr is not None:
            await instance.api.check_client_config(addr, body)


def filter_by_tags(messages: Iterable[StoredMessage], tags: frozenset[str] | None) -> list[StoredMessage]:
    """The messages whose TAGS property is one of ``tags`` (all of them when ``tags`` is None)."""
    if tags is None:
        return list(messages)
    return [m for m in messages if m.tags in tags]


def parse_consume_from(value: object) -> ConsumeFrom:
    """``"last"``, ``"first"`` or a timestamp in ms (an int, or digits); ConfigError otherwise."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if value in _CONSUME_FROM_WHERE or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value  # type: ignore[return-value]
    raise ConfigError(f"consume_from must be 'last', 'first' or a timestamp in ms, got {value!r}")


def consume_from_where(consume_from: ConsumeFrom) -> str:
    """RocketMQ's ConsumeFromWhere name (as heartbeats carry it)."""
    return _CONSUME_FROM_WHERE.get(consume_from, "CONSUME_FROM_TIMESTAMP")  # type: ignore[arg-type]


async def resolve_start_offset(instance: ClientInstance, store: OffsetStore, mq: MessageQueue,
                               consume_from: ConsumeFrom) -> int:
    """The offset a group member starts ``mq`` at: the group's committed offset (read from the
    store, which caches it) or, without one, the ``consume_from`` position."""
    committed = await store.read(mq, from_store=True)
    if committed >= 0:
        return committed
    retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    addr = await broker_addr_of(instance, mq)
    api = instance.api
    if consume_from == "first":
        offset = await api.get_min_offset(addr, mq.topic, mq.queue_id)
    elif consume_from == "last":
        offset = 0 if retry else await api.get_max_offset(addr, mq.topic, mq.queue_id)
    elif retry:
        offset = await api.get_max_offset(addr, mq.topic, mq.queue_id)
    else:
        offset = await api.search_offset_by_timestamp(addr, mq.topic, mq.queue_id, int(consume_from))
    if offset is None or offset < 0:
        raise ClientError(f"broker {addr} gave no {consume_from!r} offset for {mq.topic}:{mq.queue_id}")
    return offset
