"""Where each queue of a ``spark_mq`` read starts and ends, asked of the brokers (as Spark's
``KafkaOffsetReader``): earliest = GET_MIN_OFFSET, latest = GET_MAX_OFFSET, committed =
QUERY_CONSUMER_OFFSET of ``group`` (falling back to ``startingTimestamp``, else earliest, for queues
without one; asked with ``setZeroIfNotFound=false``, since the broker's 0 for a group without an offset
on a queue starting at 0 would read as one), ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``endingOffsetsByTimestamp`` and ``endingTimestamp`` = SEARCH_OFFSET_BY_TIMESTAMP (the first offset
stored at or after the time).

Resolution runs per topic: each function below takes one topic's :class:`TopicQueues` and looks up
that topic's part of a JSON spec (:func:`topic_spec`; the JSON forms are
:mod:`spark_mq.spark.offsets`'s).

A requested start below the broker's minimum (retention deleted those messages) is data loss:
with ``failOnDataLoss`` (default) it raises :class:`DataLossError` naming the queue and offsets,
otherwise it logs a warning and starts at the minimum. So is a broker max offset below what a stream
has read (:func:`check_max`: the topic was re-created or its log truncated, and the offsets read now
hold other messages), which restarts the queue at the minimum.

A queue a stream first sees after it started starts by the rule as of the start
(:func:`resolve_late`; the stream reader's module doc says why).

The queues of a topic and their offsets at the brokers are :mod:`spark_mq.arrow.queues`'s; with
``tieredStoreRoot`` the archive answers below the brokers (:mod:`spark_mq.tiered.tiers`).

Thread-safety: pure functions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from spark_mq.arrow.queues import BrokerOffsets, DataLossError, QueueKey, TopicQueues, queue_key_text
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ConfigError
from spark_mq.spark.offsets import COMMITTED, EARLIEST_OFFSET, LATEST, LATEST_OFFSET, OffsetSpec, QueueOffsets
from spark_mq.spark.options import SourceOptions
from spark_mq.tiered.tiers import TieredOffsets

log = logging.getLogger(__name__)

NEW_QUEUE_START = 0  # the earliest offset of a queue created after the query started (below it is data loss)


def topic_spec(spec: OffsetSpec, topic: str) -> Literal["earliest", "latest", "committed"] | QueueOffsets:
    """One topic's part of an offsets spec: the keyword itself, or its queues' JSON offsets ({} when the
    JSON leaves the topic out: all its queues take the default)."""
    return spec if isinstance(spec, str) else spec.get(topic, {})


class OffsetSource(Protocol):
    """What resolution asks the brokers (a fake in tests)."""

    def min_offset(self, key: QueueKey) -> int: ...
    def max_offset(self, key: QueueKey) -> int: ...
    def committed_offset(self, group: str, key: QueueKey) -> int | None: ...
    def offset_by_timestamp(self, key: QueueKey, timestamp_ms: int) -> int: ...


def offset_source(api: SyncMQClientAPI, queues: TopicQueues, opts: SourceOptions) -> OffsetSource:
    """The brokers' offsets, with the archive below them when ``tieredStoreRoot`` is set."""
    hot = BrokerOffsets(api, queues)
    return TieredOffsets(hot, opts.tiered_store_root) if opts.tiered_store_root else hot


def check_start(topic: str, key: QueueKey, requested: int, broker_min: int, fail_on_data_loss: bool) -> int:
    """``requested``, or the broker's min when ``requested`` is below it and not ``fail_on_data_loss``."""
    if requested >= broker_min:
        return requested
    message = (f"queue {topic}@{queue_key_text(key)}: requested offset {requested} is below the broker's min offset "
               f"{broker_min}; messages [{requested}, {broker_min}) are gone (retention)")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to skip ahead to {broker_min}")
    log.warning("%s; skipping ahead (failOnDataLoss=false)", message)
    return broker_min


def check_max(topic: str, key: QueueKey, read_to: int, broker_max: int, broker_min: int,
              fail_on_data_loss: bool) -> int:
    """Where a queue read up to ``read_to`` goes on when its broker's max went below that (the topic was
    deleted and re-created, or its log truncated): the offsets read are being reused by other messages,
    so an empty backlog would skip them. DataLossError with ``fail_on_data_loss``, else a warning and
    the broker's min."""
    message = (f"queue {topic}@{queue_key_text(key)}: the broker's max offset {broker_max} is below offset "
               f"{read_to} this query has read up to (topic re-created or log truncated); the messages now at "
               f"[{broker_min}, {broker_max}) are not the ones read")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to restart the queue at {broker_min}")
    log.warning("%s; restarting the queue at %d (failOnDataLoss=false)", message, broker_min)
    return broker_min


def _check_known(spec: str | QueueOffsets, queues: TopicQueues, option: str) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(queues.queues))
        if unknown:
            raise ConfigError(f"option {option!r} names queue(s) {', '.join(map(queue_key_text, unknown))} that "
                              f"topic {queues.topic!r} does not have; its readable queues are "
                              f"{', '.join(map(queue_key_text, queues.queues))}")


def resolve_starting(source: OffsetSource, queues: TopicQueues, opts: SourceOptions,
                     keys: Iterable[QueueKey] | None = None) -> dict[QueueKey, int]:
    """Where each queue of ``queues.topic`` (of ``keys``, default all) starts, checked against the
    broker's min (see :func:`check_start`). ``startingOffsetsByTimestamp`` decides for the queues it
    names, ``startingOffsets`` for the others."""
    spec = topic_spec(opts.starting, queues.topic)
    by_time = topic_spec(opts.starting_by_timestamp or {}, queues.topic)
    _check_known(spec, queues, "startingOffsets")
    _check_known(by_time, queues, "startingOffsetsByTimestamp")
    out: dict[QueueKey, int] = {}
    for key in queues.queues if keys is None else sorted(keys):
        broker_min = source.min_offset(key)
        if isinstance(by_time, dict) and key in by_time:
            requested = source.offset_by_timestamp(key, by_time[key])
        elif isinstance(spec, dict):
            requested = spec.get(key, EARLIEST_OFFSET)
            if requested == EARLIEST_OFFSET:
                requested = broker_min
            elif requested == LATEST_OFFSET:
                requested = source.max_offset(key)
        elif spec == COMMITTED:
            assert opts.group is not None  # options validation
            committed = source.committed_offset(opts.group, key)
            if committed is not None:
                requested = committed
            elif opts.starting_timestamp is not None:
                requested = source.offset_by_timestamp(key, opts.starting_timestamp)
            else:
                requested = broker_min
        elif opts.starting_timestamp is not None:
            requested = source.offset_by_timestamp(key, opts.starting_timestamp)
        elif spec == LATEST:
            requested = source.max_offset(key)
        else:
            requested = broker_min
        out[key] = check_start(queues.topic, key, requested, broker_min, opts.fail_on_data_loss)
    return out


def resolve_late(source: OffsetSource, queues: TopicQueues, opts: SourceOptions, key: QueueKey,
                 started_ms: int | None) -> int:
    """Where a queue first seen after the query started (at ``started_ms``; None when unknown, after a
    restart from the checkpoint) starts: the starting rule as of the query's start (module doc, "Queues
    seen late"). ``latest`` is the first message stored since the start; ``earliest`` and JSON offsets
    that leave such a queue out are its earliest, checked as data loss when it is not 0; a queue the JSON
    (or ``startingOffsetsByTimestamp``) names — a topic a pattern matched late — starts where it says."""
    named = (topic_spec(opts.starting, queues.topic), topic_spec(opts.starting_by_timestamp or {}, queues.topic))
    if opts.starting == COMMITTED or any(isinstance(spec, dict) and key in spec for spec in named):
        return resolve_starting(source, queues, opts, [key])[key]
    if opts.starting_timestamp is not None:
        return source.offset_by_timestamp(key, opts.starting_timestamp)
    if opts.starting == LATEST and started_ms is not None:
        return source.offset_by_timestamp(key, started_ms)
    return check_start(queues.topic, key, NEW_QUEUE_START, source.min_offset(key), opts.fail_on_data_loss)


def resolve_ending(source: OffsetSource, queues: TopicQueues, opts: SourceOptions,
                   starting: Mapping[QueueKey, int]) -> dict[QueueKey, int]:
    """Where each queue of ``queues.topic``'s batch read ends (exclusive): the broker's max unless
    ``endingOffsets``, ``endingOffsetsByTimestamp`` or ``endingTimestamp`` (the first offset stored at
    or after it) says less; ConfigError when an end is past the max or before the start."""
    spec = topic_spec(opts.ending, queues.topic)
    by_time = topic_spec(opts.ending_by_timestamp or {}, queues.topic)
    _check_known(spec, queues, "endingOffsets")
    _check_known(by_time, queues, "endingOffsetsByTimestamp")
    out: dict[QueueKey, int] = {}
    for key in queues.queues:
        broker_max = source.max_offset(key)
        option = "endingOffsets"
        if isinstance(by_time, dict) and key in by_time:
            requested, option = source.offset_by_timestamp(key, by_time[key]), "endingOffsetsByTimestamp"
        elif opts.ending_timestamp is not None:
            requested, option = source.offset_by_timestamp(key, opts.ending_timestamp), "endingTimestamp"
        else:
            requested = spec.get(key, LATEST_OFFSET) if isinstance(spec, dict) else LATEST_OFFSET
        if requested == LATEST_OFFSET:
            requested = broker_max
        name = f"{queues.topic}@{queue_key_text(key)}"
        if requested > broker_max:
            raise ConfigError(f"{option} of queue {name} is {requested}, past its max offset {broker_max}: "
                              f"ask for at most {broker_max} (or -1 for latest)")
        start = starting[key]
        if requested < start:
            raise ConfigError(f"{option} of queue {name} is {requested}, before its starting offset {start}")
        out[key] = requested
    return out
