"""One pull of a queue as a consumer sees it: the PULL_MESSAGE header carrying the subscription
(:func:`pull_header`), and the response decoded and filtered by tag string — as messages
(:func:`pull_queue`) or as columns (:func:`pull_queue_batch`). Every pull consumer and the Arrow
range reader pull through here.

Thread-safety: coroutines of the client instance's event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import broker_addr_of
from spark_mq.client.results import PullResult, PullStatus
from spark_mq.client.subscription import filter_by_tags, parse_tags, subscription_data
from spark_mq.common.errors import ConfigError
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.common.unit.decode import StoredMessage
from spark_mq.remoting.bodies import EXPRESSION_TAG, SUB_ALL, MessageQueue
from spark_mq.remoting.headers import PullMessageRequestHeader, build_pull_sys_flag

_QUEUE_OFFSET = "queueOffset"  # PullMessageRequestHeader's wire name of queue_offset


@dataclass(frozen=True)
class ConsumerPullResult:
    """A pull as a consumer sees it: the broker's status and offsets, the messages decoded and
    filtered by tag string (``raw`` keeps the undecoded response)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage]
    raw: PullResult


@dataclass(frozen=True)
class ConsumerPullBatch:
    """:class:`ConsumerPullResult` with the messages as columns (``batch``, filtered by tag string):
    what ``PullConsumer.pull_batch`` returns, to consume thousands of messages per pull without
    an object per message."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    batch: StoredBatch
    raw: PullResult


def pull_header(group: str, mq: MessageQueue, offset: int, max_nums: int, expression: str,
                suspend_s: float = 0.0, commit_offset: int | None = None,
                expression_type: str = EXPRESSION_TAG) -> PullMessageRequestHeader:
    """PULL_MESSAGE header carrying the subscription (the broker filters by tag hash, or exactly by
    a SQL92 expression)."""
    fields, _ = _pull_template(group, mq, max_nums, expression, suspend_s, commit_offset is not None,
                               expression_type)
    return PullMessageRequestHeader.of_fields({**fields, "queue_offset": offset,
                                               "commit_offset": commit_offset if commit_offset is not None else 0})


@functools.lru_cache(maxsize=1024)
def _pull_template(group: str, mq: MessageQueue, max_nums: int, expression: str, suspend_s: float, commit: bool,
                   expression_type: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields and the wire fields of a queue's pull headers at offset 0 (commit offset 0), made once per
    pulling queue (the subscription parsed, the flags built): a long-polling consumer sends a header per
    answer, a few each millisecond. Callers copy them."""
    sub = subscription_data(mq.topic, expression, expression_type=expression_type)
    header = PullMessageRequestHeader(
        consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=0, max_msg_nums=max_nums,
        sys_flag=build_pull_sys_flag(commit_offset=commit, suspend=suspend_s > 0, subscription=True),
        commit_offset=0, suspend_timeout_millis=int(suspend_s * 1000), sub_version=sub.sub_version,
        subscription=sub.sub_string, expression_type=sub.expression_type)
    return vars(header), header.to_ext_fields()


async def pull_queue(instance: ClientInstance, group: str, mq: MessageQueue, offset: int, max_nums: int,
                     expression: str = SUB_ALL, *, suspend_s: float = 0.0,
                     timeout: float | None = None, expression_type: str = EXPRESSION_TAG,
                     on_answer: Callable[[ConsumerPullResult], None] | None = None) -> ConsumerPullResult:
    """One PULL_MESSAGE of ``mq`` at ``offset``, decoded and filtered by tag string as the connection
    reads the answer; ``on_answer`` gets the result there, before this coroutine resumes (a long-polling
    consumer hands the messages to a waiting ``poll`` a loop turn sooner)."""
    tags = parse_tags(expression, expression_type)

    def result(raw: PullResult) -> ConsumerPullResult:
        messages = filter_by_tags(raw.messages(), tags) if raw.status == PullStatus.FOUND else []
        pulled = ConsumerPullResult(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, messages, raw)
        if on_answer is not None:
            on_answer(pulled)
        return pulled

    return await _pull_raw(instance, group, mq, offset, max_nums, expression, suspend_s, timeout, expression_type,
                           result)


async def pull_queue_batch(instance: ClientInstance, group: str, mq: MessageQueue, offset: int, max_nums: int,
                           expression: str = SUB_ALL, *, suspend_s: float = 0.0,
                           timeout: float | None = None, expression_type: str = EXPRESSION_TAG) -> ConsumerPullBatch:
    """``pull_queue`` with the messages as columns."""
    raw = await _pull_raw(instance, group, mq, offset, max_nums, expression, suspend_s, timeout, expression_type)
    batch = raw.batch().with_tags(parse_tags(expression, expression_type))
    return ConsumerPullBatch(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, batch, raw)


async def _pull_raw(instance: ClientInstance, group: str, mq: MessageQueue, offset: int, max_nums: int,
                    expression: str, suspend_s: float, timeout: float | None,
                    expression_type: str = EXPRESSION_TAG,
                    answered: Callable[[PullResult], Any] | None = None) -> Any:
    """The pull's ``PullResult``, or what ``answered`` makes of it as the answer is read."""
    if max_nums <= 0:
        raise ConfigError(f"max_nums must be positive, got {max_nums}")
    await broker_addr_of(instance, mq)  # the route, fetched once if unknown
    fields, ext = _pull_template(group, mq, max_nums, expression, suspend_s, False, expression_type)
    header = PullMessageRequestHeader.of_fields({**fields, "queue_offset": offset})
    return await instance.pull_message(mq, header, timeout, answered, {**ext, _QUEUE_OFFSET: str(offset)})
