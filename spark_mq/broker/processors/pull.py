"""PULL_MESSAGE with long polling (RocketMQ's PullMessageProcessor + PullRequestHoldService).

The store's statuses map to response codes as RocketMQ maps them; the response header always
carries nextBeginOffset, minOffset, maxOffset and suggestWhichBrokerId (clients read a missing
one as 0). A pull that finds nothing new and carries the suspend flag is held until a message
arrives on its queue or the suspend timeout passes, then answered from a second look; a pull woken by
a put that begins at its offset answers with the units that put wrote instead (``from_put``), when it
filters nothing and no readable end bounds it, without the store's read (and the consume queue
dispatch that read does first) between the message's arrival and its delivery.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.processors.long_polling import ANSWERED, Held, PullHoldService, Woken
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.config import MASTER_ID
from spark_mq.common.java_hash import java_hash
from spark_mq.common.lazy_numpy import np
from spark_mq.common.perm import PERM_READ
from spark_mq.common.unit.encode import units_total
from spark_mq.remoting.bodies import SUB_ALL
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import PullMessageRequestHeader
from spark_mq.store.message_store import MessageStore
from spark_mq.store.queue_reader import DEFAULT_MAX_GET_BYTES
from spark_mq.store.results import GetResult, GetStatus, PutResult

MAX_SUSPEND_S = 30.0  # never hold a pull longer than this, whatever the client asks

_STATUS_CODE = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def tag_codes(subscription: str | None) -> set[int] | None:
    """Tag hash codes of ``"a || b"``; None (no filter) for ``*`` or nothing."""
    if not subscription or subscription.strip() == SUB_ALL:
        return None
    tags = {t.strip() for t in subscription.split("||") if t.strip()}
    return {java_hash(t) for t in tags} or None


def response_code(result: GetResult, offset: int) -> ResponseCode:
    if result.status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS_CODE[result.status]


class PullProcessor:
    """Serves PULL_MESSAGE with the collaborators it is given; runs on the broker's event loop."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, clients: ClientRegistry,
                 offsets: ConsumerOffsetManager, groups: SubscriptionGroupManager, hold: PullHoldService,
                 metrics: BrokerMetrics, filters: Sql92Filters, *, slave_read_enable: bool = False,
                 in_memory_read_bytes: int = 0, readable_end: Callable[[], int | None] = lambda: None,
                 read_refusal: Callable[[], str | None] = lambda: None,
                 mode_refusal: Callable[[str, str, int], str | None] = lambda group, topic, queue_id: None) -> None:
        """``readable_end()``: the commitlog offset no served unit may end past (a controller-mode
        master's confirmed offset), None for no bound; ``read_refusal()``: why this broker serves no
        pulls (answered SERVICE_NOT_AVAILABLE), else None; ``mode_refusal(group, topic, queue_id)``: why
        the group may not pull that queue (it pops it: ``pop/mode_guard.py``), else None."""
        self.store = store
        self.topics = topics
        self.clients = clients
        self.offsets = offsets
        self.groups = groups
        self.hold = hold
        self.metrics = metrics
        self.filters = filters
        self.slave_read_enable = slave_read_enable
        self.in_memory_read_bytes = in_memory_read_bytes
        self.readable_end = readable_end
        self.read_refusal = read_refusal
        self.mode_refusal = mode_refusal

    def suggest_broker_id(self, result: GetResult, group: str) -> int:
        """RocketMQ's rule (master and slave alike): with slaveReadEnable, a reader further behind than
        memory holds goes to its group's ``whichBrokerWhenConsumeSlowly`` (1, the slave, by default), one
        within it to its group's ``brokerId`` (0, the master, by default: a group set to 1 reads the slave
        throughout); without slaveReadEnable, always the master."""
        if not self.slave_read_enable:
            return MASTER_ID
        config = self.groups.find(group)
        if result.behind_bytes > self.in_memory_read_bytes:
            return config.which_broker_when_consume_slowly
        return config.broker_id

    def from_put(self, put: PutResult, max_count: int, min_offset: int) -> GetResult | None:
        """What a pull held at ``put.queue_offset`` gets: the units the put just wrote (as it wrote them, else
        read back from the commitlog as they lie: one contiguous run), with ``min_offset`` from the pull's look
        before its hold (only retention moves it). None when the put is more than the pull takes: read the store."""
        sizes = put.sizes
        if not 0 < put.count <= max_count or units_total(sizes) > DEFAULT_MAX_GET_BYTES:
            return None
        try:
            data = bytes(put.units) if put.units is not None else self.store.commitlog.read_units(
                put.physical_offsets, sizes)
        except LookupError:  # retention removed the file under us: the store's read says what is left
            return None
        end = put.queue_offset + put.count
        return GetResult(GetStatus.FOUND, end, min_offset, end, data, np.arange(put.queue_offset, end), sizes,
                         self.store.commitlog.max_offset() - put.physical_offsets.item(-1))

    def register_on(self, server) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.pull)

    async def pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        refusal = self.read_refusal()
        if refusal is not None:
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, refusal)
        h = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        topic = self.topics.get(h.topic)
        if topic is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"topic[{h.topic}] not exist, apply first please!")
        if not topic.perm & PERM_READ:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling is forbidden")
        if not 0 <= h.queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                f"[{topic.read_queue_nums}]")
        mixed = self.mode_refusal(h.consumer_group, h.topic, h.queue_id)
        if mixed is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, mixed)
        if h.has_subscription:
            expression, expression_type = h.subscription, h.expression_type
        else:
            sub = self.clients.subscription(h.consumer_group, h.topic)
            expression, expression_type = (sub.sub_string, sub.expression_type) if sub else (None, None)
        sql = self.filters.resolve(cmd, h.consumer_group, h.topic, expression_type, expression, conn.peer)
        if isinstance(sql, RemotingCommand):
            return sql
        codes = tag_codes(expression) if sql is None else None
        unit_filter = sql.match_units if sql is not None else None
        if h.has_commit_offset and h.commit_offset >= 0:
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

        readable_end = self.readable_end()
        # a pull at the queue's end (a consumer's next pull) is answered or held without a read of the store
        result = (self.store.at_queue_end(h.topic, h.queue_id, h.queue_offset) if readable_end is None else None) \
            or self.store.get_messages(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes,
                                       unit_filter=unit_filter, readable_end=readable_end)
        code = response_code(result, h.queue_offset)
        if code == ResponseCode.PULL_NOT_FOUND and h.has_suspend and h.suspend_timeout_millis > 0 \
                and self._held(cmd, conn, h, codes, unit_filter, result.min_offset):
            return None
        if code == ResponseCode.SUCCESS:
            self._delivered(h, result)
        return self._response(cmd, h, result, code)

    def _held(self, cmd: RemotingCommand, conn: Connection, h: PullMessageRequestHeader, codes: set[int] | None,
              unit_filter: Callable | None, min_offset: int) -> bool:
        """Hold the pull (True; the handler returns None and it is answered when woken or timed out), giving
        its connection's in-flight slot back; False past the connection's maximum of held pulls: answer now.
        Held by a callback (``PullHoldService.hold``), not a coroutine: no Task, no loop turn to resume it."""
        unfiltered = codes is None and unit_filter is None
        held = self.hold.hold(h.topic, h.queue_id, h.queue_offset, min(h.suspend_timeout_millis / 1000, MAX_SUSPEND_S),
                              functools.partial(self._answer_woken, cmd, conn, h, min_offset) if unfiltered else None,
                              functools.partial(self._woken, cmd, conn, h, codes, unit_filter, min_offset))
        if not conn.detach(cmd, functools.partial(self._dropped, held)):
            held.cancel()
            return False
        self.metrics.long_poll_waiters.inc()
        return True

    def _dropped(self, held: Held) -> None:
        """The held pull's connection closed: it is never answered."""
        if held.cancel():
            self.metrics.long_poll_waiters.dec()

    def _woken(self, cmd: RemotingCommand, conn: Connection, h: PullMessageRequestHeader, codes: set[int] | None,
               unit_filter: Callable | None, min_offset: int, woken: Woken) -> None:
        """The held pull's wait is over: answered already inside the ``notify`` that woke it (its slot goes back
        once the answer is sent), else answered by ``_rest`` as a request."""
        self.metrics.long_poll_waiters.dec()
        conn.end_detached(cmd, None if woken is ANSWERED else
                          functools.partial(self._rest, h, codes, unit_filter, min_offset, woken))

    async def _rest(self, h: PullMessageRequestHeader, codes: set[int] | None, unit_filter: Callable | None,
                    min_offset: int, woken: Woken, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The answer of a pull woken (``woken``: what ``PullHoldService.wait`` returns) and not answered inside
        ``notify``: from the put that woke it when it begins at the pull's offset, else from a second look."""
        direct = None
        if isinstance(woken, PutResult) and codes is None and unit_filter is None and self.readable_end() is None:
            direct = self.from_put(woken, h.max_msg_nums, min_offset)
        result = direct or self.store.get_messages(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes,
                                                   unit_filter=unit_filter, readable_end=self.readable_end())
        code = response_code(result, h.queue_offset)
        if code == ResponseCode.SUCCESS:
            self._delivered(h, result)
        return self._response(cmd, h, result, code)

    def _answer_woken(self, cmd: RemotingCommand, conn: Connection, h: PullMessageRequestHeader, min_offset: int,
                      woken: bool | PutResult) -> bool:
        """Inside the ``notify`` of the send that woke the held pull ``cmd``: answer it now from the units the
        put wrote (True), when it can (``from_put``, and a slot free for the answer), before the send is
        answered and with no loop turn between; else False: the pull's coroutine answers as usual."""
        if not isinstance(woken, PutResult) or self.readable_end() is not None:
            return False
        result = self.from_put(woken, h.max_msg_nums, min_offset)
        if result is None:
            return False
        response = self._response(cmd, h, result, ResponseCode.SUCCESS)
        if not conn.end_hold_now():
            return False
        conn.respond(cmd, response)
        self._delivered(h, result)
        return True

    def _delivered(self, h: PullMessageRequestHeader, result: GetResult) -> None:
        self.metrics.delivered(h.topic, h.consumer_group, result.count, len(result.data), time.monotonic())

    def _response(self, cmd: RemotingCommand, h: PullMessageRequestHeader, result: GetResult,
                  code: ResponseCode) -> RemotingCommand:
        return cmd.make_response(code, wire_fields={
            "suggestWhichBrokerId": str(self.suggest_broker_id(result, h.consumer_group)),
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }, body=result.data if code == ResponseCode.SUCCESS else b"")
