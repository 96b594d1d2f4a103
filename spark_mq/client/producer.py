"""``Producer``: sends messages to a topic's queues over RocketMQ's protocol (DefaultMQProducer).

- ``send`` (one message, or a list as one batch request), ``send_batch`` (a list split into
  requests of at most ``max_message_size`` encoded bytes), ``send_oneway``, ``send_orderly``
  (a key hashed over the topic's queues), ``send_callback``; ``SyncProducer`` is the blocking
  facade with the same method names.
- Every message gets a UNIQ_KEY (kept if it has one), ``WAIT=true``, its TAGS and KEYS; a body of
  at least ``compress_threshold`` bytes is zlib-deflated (level 5) and sent with sysFlag
  COMPRESSED_FLAG, as RocketMQ's producer does (never in a batch: RocketMQ does not compress
  batches). Consumers get the original body back (``unit.decode.decompress_bodies``).
- Queue selection is round robin over the topic's writable queues; a failed attempt is retried
  (``retry_times`` more) on another broker, and brokers that failed or were slow are avoided for
  a while (:mod:`spark_mq.client.latency_fault`). Every failure refreshes the topic's route from
  the NameServer; the client instance refreshes all routes every ``poll_name_server_interval_s``.
  A master that cannot be reached while the route lists its slaves and no other master (a
  controller electing one of them) is a failover under way: the retry waits for the route to name
  the new master, within the send timeout, rather than failing at once (RocketMQ's producer fails).
  ``send_timeout_s`` bounds a whole send, retries included. Ordered sends are never retried on
  another queue (that would break the order), as RocketMQ.
- A topic the NameServer does not know is sent through the default topic TBW102's route, and the
  broker creates it (when its ``autoCreateTopicEnable`` is on).

Expected failures: a message that can never be stored raises ``MessageValidationError`` before
anything is sent; a broker's refusal that retrying cannot fix raises its ``MQClientError``; a
send whose attempts all failed raises ``SendFailedError`` (``__cause__``: the last failure). A
send that timed out may still have been stored (at-least-once, as RocketMQ).

Thread-safety: a ``Producer``'s coroutines run on one event loop and may interleave freely (any
number of concurrent sends); use ``SyncProducer`` from threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_mq.client.api import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    SEND_BORN_TIMESTAMP,
    SEND_FLAG,
    SEND_PROPERTIES,
    SEND_QUEUE_ID,
    SEND_SYS_FLAG,
    send_fields,
)
from spark_mq.client.config import ClientConfig
from spark_mq.client.instance import MASTER_ID, ClientInstance
from spark_mq.client.latency_fault import FaultStrategy
from spark_mq.client.outgoing import Prepared, PreparedBatch, prepare, prepare_batch
from spark_mq.client.results import SendResult
from spark_mq.common.errors import (
    ClientError,
    ConfigError,
    MessageValidationError,
    MQClientError,
    RemotingConnectError,
    RemotingError,
    SendFailedError,
)
from spark_mq.common.java_hash import java_hash
from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE, Message
from spark_mq.common.names import AUTO_CREATE_TOPIC
from spark_mq.common.perm import PERM_WRITE
from spark_mq.remoting.blocking import BlockingFacade
from spark_mq.remoting.bodies import MessageQueue, TopicRouteData
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

T = TypeVar("T")

NO_BUYER_ID = 204
NOT_IN_CURRENT_UNIT = 205
# broker answers another broker may not give (DefaultMQProducer.retryResponseCodes, plus SYSTEM_BUSY)
# between route polls while a failed master's set has no other master yet (_refresh_through_election)
ELECTION_POLL_S = 0.1
RETRY_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
                         ResponseCode.SYSTEM_BUSY, ResponseCode.NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT})

MessageSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
SuccessCallback = Callable[[SendResult], "Awaitable[None] | None"]
ErrorCallback = Callable[[BaseException], "Awaitable[None] | None"]


def key_hash(key: Any) -> int:
    """Java's ``hashCode`` of an ordering key: ``String`` for str, ``Integer``/``Long`` for int."""
    if isinstance(key, str):
        return java_hash(key)
    if isinstance(key, int) and not isinstance(key, bool):
        if -(1 << 31) <= key < 1 << 31:
            return key
        v = key & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h
    raise TypeError(f"an ordering key must be a str or an int, not {type(key).__name__}")


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, key: Any) -> MessageQueue:
    """RocketMQ's ``SelectMessageQueueByHash``: ``abs(key.hashCode() % len(queues))``.

    Stable: the same key picks the same queue as long as the topic's queue list is unchanged.
    """
    return queues[abs(key_hash(key)) % len(queues)]


@dataclass
class _PublishInfo:
    route: TopicRouteData
    queues: list[MessageQueue]
    expires: float  # clock seconds; for routes borrowed from TBW102 only


class Producer:
    """Sends messages for producer group ``group``; ``async with Producer(...) as p: await p.send(msg)``.

    ``instance``: a ``ClientInstance`` shared with consumers of this process (started and closed
    by its owner); by default the producer makes, starts and closes its own. ``clock`` (monotonic
    seconds) drives the send timeout and fault avoidance; tests inject one.
    """

    def __init__(self, group: str, config: ClientConfig, *, send_timeout_s: float = 3.0, retry_times: int = 2,
                 compress_threshold: int = 4096, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 fault_avoidance: bool = True, selector: MessageSelector | None = None,
                 instance: ClientInstance | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if not group:
            raise ConfigError("producer group is empty: give the producer a group name")
        if send_timeout_s <= 0:
            raise ConfigError(f"send_timeout_s must be positive, not {send_timeout_s}")
        if retry_times < 0:
            raise ConfigError(f"retry_times must be >= 0, not {retry_times}")
        if max_message_size <= 0:
            raise ConfigError(f"max_message_size must be positive, not {max_message_size}")
        self.group = group
        self.config = config
        self.send_timeout_s = send_timeout_s
        self.retry_times = retry_times
        self.compress_threshold = compress_threshold
        self.max_message_size = max_message_size
        self.selector: MessageSelector = selector or select_by_hash
        self.fault = FaultStrategy(fault_avoidance, clock)
        self._clock = clock
        self._owns_instance = instance is None
        self.instance = instance or ClientInstance(config)
        self._publish: dict[str, _PublishInfo] = {}
        self._heartbeated: set[str] = set()
        self._pending: set[asyncio.Task] = set()  # callback sends
        self._background: set[asyncio.Task] = set()  # heartbeats
        self._started = False
        self._closed = False

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> Producer:
        """Register the group (heartbeats carry it) and, for an own client instance, start it."""
        if self._closed:
            raise ClientError(f"producer {self.group} was shut down; make a new one")
        if self._started:
            return self
        if self._owns_instance:
            await self.instance.start()
        self.instance.register_producer(self.group)
        self._started = True
        await self.instance.heartbeat_all()
        return self

    async def shutdown(self) -> None:
        """Finish callback sends in flight, unregister the group from the brokers, close (idempotent)."""
        if not self._started or self._closed:
            self._closed = True
            return
        self._closed = True
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
        self.instance.unregister_producer(self.group)
        await self.instance.unregister_everywhere(self.group, None)
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _check_started(self) -> None:
        if self._closed:
            raise ClientError(f"producer {self.group} is shut down")
        if not self._started:
            raise ClientError(f"producer {self.group} is not started: await start() first")

    # -- sends ---------------------------------------------------------------------------------

    async def send(self, msg: Message | Sequence[Message]) -> SendResult:
        """Send one message, or a list of one topic as one SEND_BATCH_MESSAGE (which must fit
        ``max_message_size`` encoded: ``send_batch`` splits larger lists); retried on failure."""
        self._check_started()
        if isinstance(msg, Message):
            prepared = self._prepare(msg)
            return await self._send_retrying(prepared.topic, lambda mq, addr, left: self._send_one(
                prepared, mq, addr, left))
        batch = prepare_batch(msg, self.max_message_size)
        size = batch.size
        if size > self.max_message_size:
            raise MessageValidationError(
                f"a batch of {len(batch)} messages is {size} bytes encoded, over max_message_size "
                f"{self.max_message_size}: send it with send_batch, which splits it")
        return await self._send_batch_request(batch)

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Send messages of one topic as batch requests of at most ``max_message_size`` encoded
        bytes each (in order, each to one queue); one result per request. If a request fails for
        good, ``SendFailedError.results`` holds the results of the requests stored before it."""
        self._check_started()
        prepared = prepare_batch(messages, self.max_message_size)
        results: list[SendResult] = []
        for group in prepared.split(self.max_message_size):
            try:
                results.append(await self._send_batch_request(group))
            except SendFailedError as e:
                e.results = results
                raise
        return results

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for the broker's answer (one attempt: no retry, no result)."""
        self._check_started()
        prepared = self._prepare(msg)
        await self._send_retrying(prepared.topic, lambda mq, addr, left: self._send_one(
            prepared, mq, addr, left, oneway=True), attempts=1)

    async def send_orderly(self, msg: Message, key: Any) -> SendResult:
        """Send to the queue ``selector(queues, msg, key)`` picks (by default the key's hash over the
        topic's queues: the same key always lands on the same queue). One attempt, as RocketMQ:
        a retry on another queue would break the order."""
        self._check_started()
        prepared = self._prepare(msg)

        def pick(queues: Sequence[MessageQueue], _last: str | None) -> MessageQueue:
            return self.selector(queues, msg, key)

        return await self._send_retrying(prepared.topic, lambda mq, addr, left: self._send_one(
            prepared, mq, addr, left), attempts=1, pick=pick)

    def send_callback(self, msg: Message, on_success: SuccessCallback, on_error: ErrorCallback) -> asyncio.Task:
        """Start a send and return at once; ``on_success(result)`` or ``on_error(exc)`` (plain or
        async) runs on the event loop when it ends. Validation errors raise here, before any send.
        ``shutdown`` waits for callback sends in flight."""
        self._check_started()
        prepared = self._prepare(msg)
        task = asyncio.get_running_loop().create_task(self._callback_send(prepared, on_success, on_error))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _callback_send(self, prepared: Prepared, on_success: SuccessCallback,
                             on_error: ErrorCallback) -> None:
        try:
            result = await self._send_retrying(prepared.topic, lambda mq, addr, left: self._send_one(
                prepared, mq, addr, left))
        except Exception as e:
            await _call(on_error, e)
        else:
            await _call(on_success, result)

    def _prepare(self, msg: Message) -> Prepared:
        return prepare(msg, self.max_message_size, self.compress_threshold)

    # -- routes --------------------------------------------------------------------------------

    async def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """The topic's writable queues on brokers with a master, ordered by broker then queue id.

        An unknown topic borrows TBW102's route (at most 4 queues per broker) and is asked for
        again after ``poll_name_server_interval_s`` or a failure. Raises SendFailedError if there
        is no route at all, and RemotingError if no NameServer answers.
        """
        inst = self.instance
        now = self._clock()
        route = None if refresh else inst.routes.get(topic)
        if route is None:
            info = self._publish.get(topic)
            if not refresh and info is not None and now < info.expires:
                return info.queues
            route = await inst.route(topic, refresh=True)
        borrowed = route is None
        if route is None:
            route = await inst.route(AUTO_CREATE_TOPIC, refresh=refresh)
            if route is None:
                raise SendFailedError(f"no route for topic {topic} and no default topic {AUTO_CREATE_TOPIC} to create "
                                      f"it through: create the topic (spark-mq admin) or enable autoCreateTopicEnable")
        info = self._publish.get(topic)
        if info is None or info.route is not route:
            expires = now + self.config.poll_name_server_interval_s if borrowed else float("inf")
            info = _PublishInfo(route, _writable_queues(topic, route, borrowed), expires)
            self._publish[topic] = info
            self._heartbeat_new_brokers()
        return info.queues

    def _heartbeat_new_brokers(self) -> None:
        """Brokers first seen in a route hear of this group at once (not only at the next periodic
        heartbeat), in the background so that a slow broker does not hold the send up."""
        addrs = set(self.instance.all_broker_addrs())
        if not addrs <= self._heartbeated:
            self._heartbeated |= addrs
            task = asyncio.get_running_loop().create_task(self.instance.heartbeat_all(), name="producer-heartbeat")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _refresh_after_failure(self, topic: str) -> list[MessageQueue] | None:
        try:
            return await self.publish_queues(topic, refresh=True)
        except (RemotingError, MQClientError, SendFailedError) as e:
            log.debug("route refresh of %s after a failed send failed: %s", topic, e)
            return None

    async def _refresh_through_election(self, topic: str, broker_name: str, failed_addr: str,
                                        deadline: float) -> list[MessageQueue] | None:
        """The topic's queues from a fresh route after ``failed_addr`` (``broker_name``'s master) could not
        be reached. While the route lists that broker set's slaves with no master, or with that same dead
        master, and no other broker set to send to, the set is between masters (in controller mode an
        election is under way; the elected slave registers as id 0 within a second or so): the route is
        asked again every :data:`ELECTION_POLL_S`, until the send's deadline, so that the retry goes to the
        new master instead of failing."""
        while True:
            queues = await self._refresh_after_failure(topic)
            members = self.instance.broker_sets.get(broker_name, {})
            electing = (any(i != MASTER_ID for i in members) and members.get(MASTER_ID) in (None, failed_addr)
                        and all(q.broker_name == broker_name for q in queues or ()))
            if not electing or self._clock() + ELECTION_POLL_S >= deadline:
                return queues
            await asyncio.sleep(ELECTION_POLL_S)

    # -- attempts ------------------------------------------------------------------------------

    async def _send_retrying(self, topic: str, attempt: Callable[[MessageQueue, str, float], Awaitable[T]],
                             attempts: int | None = None,
                             pick: Callable[[Sequence[MessageQueue], str | None], MessageQueue] | None = None) -> T:
        """Run ``attempt(queue, broker_addr, seconds_left)`` on queues ``pick`` (default: the fault
        strategy) chooses until one succeeds, the attempts are used up or the send timeout ends."""
        attempts = 1 + self.retry_times if attempts is None else attempts
        begin = self._clock()
        deadline = begin + self.send_timeout_s
        try:
            queues = await self.publish_queues(topic)
            if not queues:  # as RocketMQ's tryToFindTopicPublishInfo: a route without queues is asked for again
                queues = await self.publish_queues(topic, refresh=True)
        except RemotingError as e:
            raise SendFailedError(f"send to topic {topic} failed: no route from the NameServers: {e}") from e
        if not queues:
            raise SendFailedError(f"topic {topic} has no writable queue on a broker with a master "
                                  f"(check its perm and its brokers with get_route_info)")
        last_broker: str | None = None
        last_error: Exception | None = None
        tried = 0
        while tried < attempts:
            left = deadline - self._clock()
            if left <= 0:
                break
            mq = pick(queues, last_broker) if pick else self.fault.select(topic, queues, last_broker)
            addr = self.instance.broker_addr(mq.broker_name)
            tried += 1
            started = self._clock()
            try:
                if addr is None:
                    raise RemotingConnectError(f"no master address known for broker {mq.broker_name}")
                result = await attempt(mq, addr, left)
            except MQClientError as e:
                latency = (self._clock() - started) * 1000
                if e.code not in RETRY_CODES:
                    self.fault.update(mq.broker_name, latency)
                    raise
                self.fault.update(mq.broker_name, latency, failed=True)
                last_error = e
            except RemotingError as e:
                self.fault.update(mq.broker_name, (self._clock() - started) * 1000, failed=True)
                last_error = e
            else:
                self.fault.update(mq.broker_name, (self._clock() - started) * 1000)
                return result
            log.info("send to %s (%s) failed (attempt %d of %d): %s", mq, addr, tried, attempts, last_error)
            last_broker = mq.broker_name
            if isinstance(last_error, RemotingConnectError) and addr is not None and tried < attempts:
                refreshed = await self._refresh_through_election(topic, mq.broker_name, addr, deadline)
            else:
                refreshed = await self._refresh_after_failure(topic)
            queues = refreshed or queues
        elapsed = (self._clock() - begin) * 1000
        why = f": {last_error}" if last_error else ""
        raise SendFailedError(f"send to topic {topic} failed after {tried} attempt(s) in {elapsed:.0f} ms "
                              f"(send timeout {self.send_timeout_s:g}s){why}") from last_error

    async def _send_one(self, p: Prepared, mq: MessageQueue, addr: str, left: float,
                        oneway: bool = False) -> SendResult | None:
        api = self.instance.api
        # the header's wire fields from the topic's template: a send is a few microseconds
        ext = {**send_fields(self.group, p.topic, mq.broker_name, False), SEND_QUEUE_ID: str(mq.queue_id),
               SEND_SYS_FLAG: str(p.sys_flag), SEND_BORN_TIMESTAMP: str(int(time.time() * 1000)),
               SEND_FLAG: str(p.flag), SEND_PROPERTIES: p.properties.decode()}
        if oneway:
            await api.remoting.invoke_oneway(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, p.body,
                                                                           oneway=True), left)
            return None
        return await api.send_message_v2_fields(addr, ext, p.body, p.topic, mq.broker_name, p.uniq_key, timeout=left)

    async def _send_batch_request(self, prepared: PreparedBatch) -> SendResult:
        async def attempt(mq: MessageQueue, addr: str, left: float) -> SendResult:
            api = self.instance.api
            if prepared.body is not None:  # a small batch, encoded as it was prepared
                return await api.send_batch_body(addr, prepared.topic, mq.queue_id, prepared.body, self.group,
                                                 broker_name=mq.broker_name, timeout=left, msg_id=prepared.msg_id)
            batch = prepared.to_message_batch(mq.queue_id)
            return await api.send_batch(addr, batch, self.group, broker_name=mq.broker_name, timeout=left,
                                        msg_id=prepared.msg_id)

        return await self._send_retrying(prepared.topic, attempt)


def _writable_queues(topic: str, route: TopicRouteData, borrowed: bool) -> list[MessageQueue]:
    """RocketMQ's ``topicRouteData2TopicPublishInfo``: writable queues of brokers with a master."""
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    queues = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in masters:
            n = min(qd.write_queue_nums, DEFAULT_TOPIC_QUEUE_NUMS) if borrowed else qd.write_queue_nums
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(n))
    return queues


async def _call(callback: Callable[[Any], Any], arg: Any) -> None:
    try:
        outcome = callback(arg)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        log.exception("send callback %r failed", callback)


class SyncProducer(BlockingFacade[Producer]):
    """A blocking ``Producer``: ``with SyncProducer(group, config) as p: p.send(msg)``.

    The producer runs on a private loop thread. Thread-safe: any number of threads may send
    concurrently (their sends interleave on the loop thread). Send callbacks run on that loop
    thread: they must not call back into this object.
    """

    _closing = "shutdown"

    def __init__(self, group: str, config: ClientConfig, **options: Any) -> None:
        super().__init__(lambda: Producer(group, config, **options), f"spark-mq-producer-{group}")

    @property
    def producer(self) -> Producer:
        return self._target

    def start(self) -> SyncProducer:
        """Blocking :meth:`Producer.start`; returns this facade."""
        self._run(self._target.start())
        return self

    def __enter__(self) -> SyncProducer:
        return self.start()

    def send_callback(self, msg: Message, on_success: SuccessCallback,
                      on_error: ErrorCallback) -> concurrent.futures.Future:
        """As ``Producer.send_callback``; the callbacks run on the loop thread. The returned future
        is done once the send and its callback are."""
        return self._run(self._submit(msg, on_success, on_error))

    async def _submit(self, msg: Message, on_success: SuccessCallback,
                      on_error: ErrorCallback) -> concurrent.futures.Future:
        done: concurrent.futures.Future = concurrent.futures.Future()
        task = self._target.send_callback(msg, on_success, on_error)

        def finished(t: asyncio.Task) -> None:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if t.cancelled():
                    done.cancel()
                else:
                    done.set_result(None)

        task.add_done_callback(finished)
        return done

    # -- blocking twins: generated by scripts/gen_blocking_facades.py, do not edit --
    def shutdown(self) -> None:
        """Blocking :meth:`Producer.shutdown`."""
        self._close_with(self._target.shutdown)

    def send(self, msg: Message | Sequence[Message]) -> SendResult:
        """Blocking :meth:`Producer.send`."""
        return self._run(self._target.send(msg=msg))

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Blocking :meth:`Producer.send_batch`."""
        return self._run(self._target.send_batch(messages=messages))

    def send_oneway(self, msg: Message) -> None:
        """Blocking :meth:`Producer.send_oneway`."""
        return self._run(self._target.send_oneway(msg=msg))

    def send_orderly(self, msg: Message, key: Any) -> SendResult:
        """Blocking :meth:`Producer.send_orderly`."""
        return self._run(self._target.send_orderly(msg=msg, key=key))

    def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Blocking :meth:`Producer.publish_queues`."""
        return self._run(self._target.publish_queues(topic=topic, refresh=refresh))
    # -- end of generated blocking twins --
