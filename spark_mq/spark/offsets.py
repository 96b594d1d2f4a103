"""Offsets of the ``spark_mq`` source: the JSON form, queue discovery, and where each queue's read
starts and ends.

As Spark's ``KafkaSourceOffset`` + ``KafkaOffsetReader``, kept apart from the provider and the
readers: the JSON codec (``{"<broker>:<queueId>": offset}``, ``-2`` earliest, ``-1`` latest), the
queues of a topic from the NameServer route (readable queues, broker name → master address), and
the resolution of starting/ending offsets against the brokers — earliest = GET_MIN_OFFSET,
latest = GET_MAX_OFFSET, committed = QUERY_CONSUMER_OFFSET of ``group`` (falling back to
``startingTimestamp``, else earliest, for queues without one), ``startingTimestamp`` =
SEARCH_OFFSET_BY_TIMESTAMP.

A requested start below the broker's minimum (retention deleted those messages) is data loss:
with ``failOnDataLoss`` (default) it raises :class:`DataLossError` naming the queue and offsets,
otherwise it logs a warning and starts at the minimum.

Thread-safety: pure functions, plus :class:`BrokerOffsets` whose calls block on one
``SyncMQClientAPI`` (safe from any thread).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from spark_mq.common.errors import ConfigError, MQClientError, RemotingError, SparkMQError
from spark_mq.remoting.bodies import TopicRouteData
from spark_mq.remoting.headers import PERM_READ

if TYPE_CHECKING:
    from spark_mq.client.sync_api import SyncMQClientAPI
    from spark_mq.spark.options import SourceOptions

log = logging.getLogger(__name__)

EARLIEST = "earliest"
LATEST = "latest"
COMMITTED = "committed"
EARLIEST_OFFSET = -2  # in offsets JSON, as Kafka's
LATEST_OFFSET = -1
MASTER_ID = 0

QueueKey = tuple[str, int]  # (broker name, queue id); the topic is the source's
OffsetSpec = Literal["earliest", "latest", "committed"] | dict[QueueKey, int]

_EXAMPLE = '{"broker-a:0": 42, "broker-a:1": -2}'


class DataLossError(SparkMQError):
    """Messages a read asked for are gone from the broker (below its min offset)."""


def queue_key_text(key: QueueKey) -> str:
    """A queue's key in offsets JSON: ``"<broker>:<queueId>"``."""
    return f"{key[0]}:{key[1]}"


def encode_offsets(offsets: Mapping[QueueKey, int]) -> str:
    """``{"<broker>:<queueId>": offset}``, keys sorted by broker then queue id."""
    return json.dumps({queue_key_text(k): int(o) for k, o in sorted(offsets.items())})


def decode_offsets(text: str, what: str = "offsets") -> dict[QueueKey, int]:
    """Parse offsets JSON; ConfigError naming ``what`` and showing the expected form otherwise."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{what} is not valid JSON ({e}): give JSON like {_EXAMPLE}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{what} must be a JSON object like {_EXAMPLE}, got {text!r}")
    out: dict[QueueKey, int] = {}
    for key, value in obj.items():
        broker, sep, queue = key.rpartition(":")
        if not sep or not broker or not queue.isdigit():
            raise ConfigError(f'{what}: key {key!r} is not "<broker>:<queueId>" (e.g. {_EXAMPLE})')
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST_OFFSET:
            raise ConfigError(f"{what}: the offset of {key!r} must be an integer >= 0, or -2 (earliest) or "
                              f"-1 (latest), got {value!r}")
        out[(broker, int(queue))] = value
    return out


@dataclass(frozen=True)
class TopicQueues:
    """The readable queues of a topic and the master address of each of their brokers."""

    topic: str
    brokers: dict[str, str]  # broker name -> master "ip:port"
    queues: tuple[QueueKey, ...]  # sorted

    def addr(self, key: QueueKey) -> str:
        return self.brokers[key[0]]


def route_with_masters(
    api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str
) -> tuple[TopicRouteData, dict[str, str]]:
    """The topic's route from the first NameServer that answers, with each broker's master
    address; ConfigError when none answers or none knows the topic (a clear error before a query
    plans or writes anything). Shared by the source and the sink."""
    last_error: Exception | None = None
    for namesrv in namesrv_addrs:
        try:
            route = api.get_route_info(namesrv, topic)
        except (RemotingError, MQClientError) as e:
            last_error = e
            continue
        if route is None:
            raise ConfigError(f"topic {topic!r} is not known to the NameServer at {namesrv}: check option 'topic' "
                              f"(`spark-mq admin topic list`) or create it (`spark-mq admin topic create`)")
        brokers = {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas
                   if MASTER_ID in b.broker_addrs}
        return route, brokers
    raise ConfigError(f"cannot reach any NameServer of option 'namesrv' ({';'.join(namesrv_addrs)}): {last_error}; "
                      f"check the address and that `spark-mq namesrv` runs there")


def discover_queues(api: SyncMQClientAPI, namesrv_addrs: list[str], topic: str) -> TopicQueues:
    """The topic's readable queues (see ``route_with_masters`` for the errors)."""
    route, brokers = route_with_masters(api, namesrv_addrs, topic)
    queues: list[QueueKey] = []
    for q in route.queue_datas:
        if not q.perm & PERM_READ:
            continue
        if q.broker_name not in brokers:
            log.warning("topic %s: broker %s has no master online; its queues are not read", topic, q.broker_name)
            continue
        queues.extend((q.broker_name, i) for i in range(q.read_queue_nums))
    return TopicQueues(topic, brokers, tuple(sorted(queues)))


class OffsetSource(Protocol):
    """What resolution asks the brokers (a fake in tests)."""

    def min_offset(self, key: QueueKey) -> int: ...
    def max_offset(self, key: QueueKey) -> int: ...
    def committed_offset(self, group: str, key: QueueKey) -> int | None: ...
    def offset_by_timestamp(self, key: QueueKey, timestamp_ms: int) -> int: ...


class BrokerOffsets:
    """:class:`OffsetSource` over a ``SyncMQClientAPI`` and a topic's queues."""

    def __init__(self, api: SyncMQClientAPI, queues: TopicQueues) -> None:
        self.api = api
        self.queues = queues

    def _required(self, what: str, key: QueueKey, value: int | None) -> int:
        if value is None or value < 0:
            raise SparkMQError(f"broker {self.queues.addr(key)} gave no {what} for queue "
                               f"{self.queues.topic}@{queue_key_text(key)}")
        return value

    def min_offset(self, key: QueueKey) -> int:
        return self._required("min offset", key, self.api.get_min_offset(self.queues.addr(key), self.queues.topic,
                                                                         key[1]))

    def max_offset(self, key: QueueKey) -> int:
        return self._required("max offset", key, self.api.get_max_offset(self.queues.addr(key), self.queues.topic,
                                                                         key[1]))

    def committed_offset(self, group: str, key: QueueKey) -> int | None:
        offset = self.api.query_consumer_offset(self.queues.addr(key), group, self.queues.topic, key[1])
        return offset if offset is not None and offset >= 0 else None

    def offset_by_timestamp(self, key: QueueKey, timestamp_ms: int) -> int:
        return self._required("offset by timestamp", key, self.api.search_offset_by_timestamp(
            self.queues.addr(key), self.queues.topic, key[1], timestamp_ms))


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


def _check_known(spec: OffsetSpec, queues: TopicQueues, option: str) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(queues.queues))
        if unknown:
            raise ConfigError(f"option {option!r} names queue(s) {', '.join(map(queue_key_text, unknown))} that "
                              f"topic {queues.topic!r} does not have; its readable queues are "
                              f"{', '.join(map(queue_key_text, queues.queues))}")


def resolve_starting(source: OffsetSource, queues: TopicQueues, opts: SourceOptions,
                     keys: Iterable[QueueKey] | None = None) -> dict[QueueKey, int]:
    """Where each queue (of ``keys``, default all) starts, checked against the broker's min (see
    :func:`check_start`)."""
    _check_known(opts.starting, queues, "startingOffsets")
    out: dict[QueueKey, int] = {}
    for key in queues.queues if keys is None else sorted(keys):
        broker_min = source.min_offset(key)
        spec = opts.starting
        if isinstance(spec, dict):
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


def resolve_ending(source: OffsetSource, queues: TopicQueues, opts: SourceOptions,
                   starting: Mapping[QueueKey, int]) -> dict[QueueKey, int]:
    """Where each queue's batch read ends (exclusive): the broker's max unless ``endingOffsets``
    says less; ConfigError when an end is past the max or before the start."""
    _check_known(opts.ending, queues, "endingOffsets")
    out: dict[QueueKey, int] = {}
    for key in queues.queues:
        broker_max = source.max_offset(key)
        requested = opts.ending.get(key, LATEST_OFFSET) if isinstance(opts.ending, dict) else LATEST_OFFSET
        if requested == LATEST_OFFSET:
            requested = broker_max
        name = f"{queues.topic}@{queue_key_text(key)}"
        if requested > broker_max:
            raise ConfigError(f"endingOffsets of queue {name} is {requested}, past its max offset {broker_max}: "
                              f"ask for at most {broker_max} (or -1 for latest)")
        start = starting[key]
        if requested < start:
            raise ConfigError(f"endingOffsets of queue {name} is {requested}, before its starting offset {start}")
        out[key] = requested
    return out
