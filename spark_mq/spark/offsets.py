"""Offsets of the ``spark_mq`` source in their JSON form (as Spark's ``KafkaSourceOffset``): the
starting/ending keywords, and the codec of the offsets options and checkpoints.

The JSON is keyed by topic, as Kafka's: ``{"<topic>": {"<broker>:<queueId>": offset}}`` (``-2``
earliest, ``-1`` latest; by-timestamp JSON has ms timestamps in the same places). The older
single-topic form ``{"<broker>:<queueId>": offset}`` still loads for a read of one topic
(:func:`decode_topic_offsets`), so options and checkpoints written before several topics keep working.

Where each queue's read starts and ends is worked out against the brokers by
:mod:`spark_mq.spark.offset_reader`; this module is below :mod:`spark_mq.spark.options`, which
parses its keywords and JSON.

Thread-safety: pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from spark_mq.arrow.queues import QueueKey, queue_key_text
from spark_mq.common.errors import ConfigError

EARLIEST = "earliest"
LATEST = "latest"
COMMITTED = "committed"
EARLIEST_OFFSET = -2  # in offsets JSON, as Kafka's
LATEST_OFFSET = -1
QueueOffsets = dict[QueueKey, int]
TopicOffsets = dict[str, QueueOffsets]  # topic -> its queues' offsets (or timestamps)
OffsetSpec = Literal["earliest", "latest", "committed"] | TopicOffsets

_EXAMPLE = '{"broker-a:0": 42, "broker-a:1": -2}'
_TOPIC_EXAMPLE = '{"orders": {"broker-a:0": 42, "broker-a:1": -2}}'


def encode_offsets(offsets: Mapping[QueueKey, int]) -> str:
    """``{"<broker>:<queueId>": offset}``, keys sorted by broker then queue id."""
    return json.dumps({queue_key_text(k): int(o) for k, o in sorted(offsets.items())})


def decode_offsets(text: str, what: str = "offsets") -> QueueOffsets:
    """Parse one topic's offsets JSON; ConfigError naming ``what`` and showing the expected form otherwise."""
    obj = _json_object(text, what, _EXAMPLE)
    return _queue_offsets(obj, what, EARLIEST_OFFSET)


def decode_topic_offsets(text: str, what: str, single_topic: str | None, *,
                         minimum: int = EARLIEST_OFFSET) -> TopicOffsets:
    """Parse offsets (or, with ``minimum=0``, timestamps) JSON keyed by topic; the single-topic form
    ``{"<broker>:<queueId>": n}`` is ``single_topic``'s (ConfigError when the read has several topics
    or a pattern, so the JSON cannot say which topic it means)."""
    obj = _json_object(text, what, _TOPIC_EXAMPLE)
    if not obj:
        return {}  # no queue in either form (a group member that holds none)
    nested = [isinstance(v, dict) for v in obj.values()]
    if all(nested):
        out: TopicOffsets = {}
        for topic, queues in obj.items():
            if not topic:
                raise ConfigError(f"{what}: a topic name is empty (give JSON like {_TOPIC_EXAMPLE})")
            out[topic] = _queue_offsets(queues, f"{what}, topic {topic!r}", minimum)
        return out
    if any(nested):
        raise ConfigError(f"{what} mixes topics and queues at its top level: give JSON like {_TOPIC_EXAMPLE}")
    if single_topic is None:
        raise ConfigError(f"{what} names no topic, and this read has several topics (or topicPattern): key it by "
                          f"topic, like {_TOPIC_EXAMPLE}")
    return {single_topic: _queue_offsets(obj, what, minimum)}


def topic_offsets_obj(offsets: Mapping[str, Mapping[QueueKey, int]]) -> dict[str, dict[str, int]]:
    """``{"<topic>": {"<broker>:<queueId>": n}}`` as a JSON-ready dict, topics and queues sorted (Spark
    compares journaled offsets as text, so one set of offsets always has one form)."""
    return {topic: {queue_key_text(k): int(v) for k, v in sorted(queues.items())}
            for topic, queues in sorted(offsets.items())}


def _json_object(text: str, what: str, example: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{what} is not valid JSON ({e}): give JSON like {example}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{what} must be a JSON object like {example}, got {text!r}")
    return obj


def _queue_offsets(obj: Mapping[str, object], what: str, minimum: int) -> QueueOffsets:
    out: QueueOffsets = {}
    for key, value in obj.items():
        broker, sep, queue = key.rpartition(":")
        if not sep or not broker or not queue.isdigit():
            raise ConfigError(f'{what}: key {key!r} is not "<broker>:<queueId>" (e.g. {_EXAMPLE})')
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            allowed = ("an integer >= 0, or -2 (earliest) or -1 (latest)" if minimum == EARLIEST_OFFSET
                       else "a timestamp in ms since the epoch (an integer >= 0)")
            raise ConfigError(f"{what}: the value of {key!r} must be {allowed}, got {value!r}")
        out[(broker, int(queue))] = value
    return out
