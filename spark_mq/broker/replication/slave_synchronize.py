"""A slave's copy of its master's metadata (RocketMQ's ``broker/slave/SlaveSynchronize``).

Replication copies the commitlog, not the tables beside it, so a slave asks its master for them:
topic configs (GET_ALL_TOPIC_CONFIG), subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
consumer offsets (GET_ALL_CONSUMER_OFFSET) and delay offsets (GET_ALL_DELAY_OFFSET; here the pending
redeliveries), every ``slaveSynchronizeInterval`` ms and once as soon as it learns its master's
address. Topic configs and groups are replaced whole when the master's data version differs (then
the slave re-registers, so its route lists the master's topics); consumer offsets of the master
replace the slave's per ``topic@group``, as RocketMQ's ``putAll`` does. Everything taken is persisted.

Two more, spark_mq's own: the master's tiered-storage watermarks (GET_ALL_TIERED_OFFSET) replace the
slave's, so the slave's retention waits for the same archive; and the master's commitlog min offset
(``commitLogMinOffset`` of GET_BROKER_RUNTIME_INFO, which a RocketMQ master answers too) becomes
``master_min_offset``, the floor of the slave's retention: it deletes only files its master deleted
(see ``spark_mq.store.retention``). The floor is learned here rather than from the HA stream, whose
RocketMQ layout has no field for it; a floor up to one round old is only lower than the master's
(a master's min offset never goes back), so the slave errs on keeping. 0 until first learned. And the
master's timer progress (GET_TIMER_CHECK_POINT, our JSON body) is kept in ``timercheck.json``, marked
``synced``, for a promotion (``timer_service.py``).

Before it takes the master's offsets it offers the master those clients committed on this slave
(they commit here only while they cannot reach the master: ``ConsumerOffsetManager.for_master``),
OFFER_CONSUMER_OFFSETS, and the master takes each where it is ahead of its own; so a consumer that
committed here during an outage restarts at its progress, and every other offset is the master's
(an admin's reset on the master stays). A master that does not know the request (RocketMQ's) is
told once per offer in a WARNING line, and its offsets win as in RocketMQ.

A table that cannot be decoded is logged (a WARNING line) and retried next round; the others are
still taken. An unreachable master ends the round with one WARNING line.

Thread-safety: runs on the broker's event loop, like the managers it fills.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.processors.retry import RetryScheduler
from spark_mq.broker.scheduled.delay_service import ScheduleService
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.tiered_offsets import TieredOffsetManager, decode_table
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.common.errors import BodyError, RemotingError
from spark_mq.common.json_file import JsonConfigFile
from spark_mq.remoting.bodies import (
    ConsumerOffsetSerializeWrapper,
    DelayOffsetSerializeWrapper,
    KVTable,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.loop import wait_event

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3.0


class SlaveSynchronize:
    def __init__(self, client: RemotingClient, master_addr: Callable[[], str], topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, retry: RetryScheduler,
                 schedule: ScheduleService, tiered: TieredOffsetManager, interval_s: float,
                 on_topics_changed: Callable[[], None], timer_file: JsonConfigFile | None = None) -> None:
        """``timer_file``: where the master's timer progress is kept (timercheck.json), for a promotion."""
        self.client = client
        self.master_addr = master_addr
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.retry = retry
        self.schedule = schedule
        self.tiered = tiered
        self.interval_s = interval_s
        # the master's commitlog min offset as last learned (read by the store's retention thread)
        self.master_min_offset = 0
        self.on_topics_changed = on_topics_changed
        self.timer_file = timer_file
        self._now = asyncio.Event()

    def master_learned(self) -> None:
        """Sync at once (the master's address is new)."""
        self._now.set()

    async def run(self) -> None:
        while True:
            await wait_event(self._now, self.interval_s)
            self._now.clear()
            addr = self.master_addr()
            if addr:
                await self.sync_all(addr)

    async def sync_all(self, addr: str) -> None:
        steps: tuple[tuple[str, Callable[[str], Awaitable[None]]], ...] = (
            ("topic config", self.sync_topics), ("subscription groups", self.sync_groups),
            ("consumer offsets", self.sync_offsets), ("delay offsets", self.sync_delay_offsets),
            ("tiered offsets", self.sync_tiered_offsets), ("commitlog min offset", self.sync_master_min_offset),
            ("timer checkpoint", self.sync_timer_checkpoint),
        )
        for what, step in steps:
            try:
                await step(addr)
            except (BodyError, KeyError, ValueError, TypeError, AttributeError, OSError) as e:
                log.warning("slave sync: cannot copy %s from master %s (retrying in %g s): %s", what, addr,
                            self.interval_s, e)
            except RemotingError as e:  # the master is unreachable: one line per round, not one per table
                log.warning("slave sync: master %s unreachable (retrying in %g s): %s", addr, self.interval_s, e)
                return

    async def _fetch(self, addr: str, code: int) -> bytes:
        resp = await self.client.invoke(addr, RemotingCommand.request(code), REQUEST_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"answered {resp.code}: {resp.remark}")
        return resp.body or b""

    async def sync_topics(self, addr: str) -> None:
        wrapper = TopicConfigSerializeWrapper.from_json(await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        if self.topics.replace(wrapper):
            log.info("slave sync: took %d topic configs from master %s", len(wrapper.topic_config_table), addr)
            self.on_topics_changed()

    async def sync_groups(self, addr: str) -> None:
        body = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        wrapper = SubscriptionGroupWrapper.from_json(body)
        if self.groups.replace(wrapper):
            log.info("slave sync: took %d subscription groups from master %s",
                     len(wrapper.subscription_group_table), addr)

    async def sync_offsets(self, addr: str) -> None:
        await self._offer_offsets(addr)
        body = await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        self.offsets.take(ConsumerOffsetSerializeWrapper.from_json(body).offset_table)
        self.offsets.persist()

    async def _offer_offsets(self, addr: str) -> None:
        """Offer the master the offsets clients committed here since the last offer."""
        assert self.offsets.for_master is not None
        offer = {key: dict(offsets) for key, offsets in self.offsets.for_master.items()}
        if not offer:
            return
        body = ConsumerOffsetSerializeWrapper(offer).to_json()
        resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.OFFER_CONSUMER_OFFSETS, body=body),
                                        REQUEST_TIMEOUT_S)
        count = sum(len(v) for v in offer.values())
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            log.warning("slave sync: master %s does not take consumer offsets back (not a spark_mq broker): the %d "
                        "offsets clients committed here give way to its own", addr, count)
        elif resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"offering {count} offsets committed here answered {resp.code}: {resp.remark}")
        else:
            log.info("slave sync: offered master %s the %d consumer offsets clients committed here; it took %s "
                     "(those ahead of its own)", addr, count, resp.ext_fields.get("taken", "?"))
        self.offsets.offered(offer)
        self.offsets.persist()

    async def sync_delay_offsets(self, addr: str) -> None:
        body = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        wrapper = DelayOffsetSerializeWrapper.from_json(body)
        self.retry.replace(wrapper.pending_retries)
        if wrapper.offset_table != self.schedule.offsets:
            self.schedule.replace(wrapper.offset_table)

    async def sync_tiered_offsets(self, addr: str) -> None:
        table = decode_table(json.loads(await self._fetch(addr, RequestCode.GET_ALL_TIERED_OFFSET)))
        if self.tiered.replace(table):
            log.info("slave sync: took the tiered offsets of %d topics from master %s", len(table), addr)

    async def sync_timer_checkpoint(self, addr: str) -> None:
        """Keep the master's timer progress, marked ``synced``: promoted, this broker rebuilds its timer log
        from the timer topic from there (``timer_service.py``). Nothing while the master has no timers."""
        if self.timer_file is None:
            return
        resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.GET_TIMER_CHECK_POINT),
                                        REQUEST_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:  # timerWheelEnable=false, or not a spark_mq broker
            return
        progress = {**json.loads(resp.body or b"{}"), "synced": 1}
        if progress.get("readTimeMs") is not None and progress != self.timer_file.load({}):
            self.timer_file.persist(progress)

    async def sync_master_min_offset(self, addr: str) -> None:
        info = KVTable.from_json(await self._fetch(addr, RequestCode.GET_BROKER_RUNTIME_INFO)).table
        self.master_min_offset = int(info["commitLogMinOffset"])
