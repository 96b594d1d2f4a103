"""The broker's metadata tables served whole, as RocketMQ's AdminBrokerProcessor serves them to a
slave's SlaveSynchronize and to admin tools: GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET,
GET_ALL_DELAY_OFFSET, GET_TIMER_CHECK_POINT (GET_ALL_TOPIC_CONFIG is the AdminProcessor's),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and DELETE_SUBSCRIPTIONGROUP, which fill and empty the first; and,
spark_mq's own, OFFER_CONSUMER_OFFSETS: a slave's offsets committed by clients while they could not reach
this master, each taken where ahead.
"""

from __future__ import annotations

import json
import logging

from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.processors.retry import RetryScheduler
from spark_mq.broker.scheduled.delay_service import ScheduleService
from spark_mq.broker.scheduled.timer_service import TimerMessageService
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.remoting.bodies import (
    ConsumerOffsetSerializeWrapper,
    DelayOffsetSerializeWrapper,
    SubscriptionGroupConfig,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import DeleteSubscriptionGroupRequestHeader
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


class MetadataProcessor:
    def __init__(self, groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager,
                 retry: RetryScheduler, schedule: ScheduleService, timer: TimerMessageService | None = None) -> None:
        """``timer``: a master's timer service (None on a slave, or with timerWheelEnable=false)."""
        self.groups = groups
        self.offsets = offsets
        self.retry = retry
        self.schedule = schedule
        self.timer = timer

    def register_on(self, server: RemotingServer) -> None:
        for code, handler in {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.create_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
            RequestCode.OFFER_CONSUMER_OFFSETS: self.offered_offsets,
            RequestCode.GET_TIMER_CHECK_POINT: self.timer_checkpoint,
        }.items():
            server.register(code, handler)

    async def create_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.groups.upsert(SubscriptionGroupConfig.from_json(cmd.body or b"{}"))
        return cmd.make_response(ResponseCode.SUCCESS)

    async def delete_group(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The group's config goes, and with ``cleanOffset`` its committed offsets (RocketMQ deletes the
        config only; its offsets then expire with their topics)."""
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        had_config = self.groups.delete(h.group_name)
        topics = self.offsets.drop_group(h.group_name) if h.clean_offset else 0
        log.info("subscription group %s deleted (config %s, offsets of %d topic(s) forgotten) by %s", h.group_name,
                 "removed" if had_config else "absent", topics, conn.peer)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def all_groups(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.make_response(ResponseCode.SUCCESS, body=self.groups.wrapper().to_json())

    async def all_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = ConsumerOffsetSerializeWrapper(self.offsets.table).to_json()
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    async def all_delay_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = DelayOffsetSerializeWrapper(self.schedule.offset_table(), self.retry.pending_objs()).to_json()
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    async def timer_checkpoint(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The timer progress last written (what its flushed copies back), for a slave to take over from."""
        if self.timer is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "this broker delivers no timer messages (a slave, "
                                                                 "or timerWheelEnable=false)")
        return cmd.make_response(ResponseCode.SUCCESS, body=json.dumps(self.timer.checkpoint()).encode())

    async def offered_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        offered = ConsumerOffsetSerializeWrapper.from_json(cmd.body or b"{}").offset_table
        taken = self.offsets.advance(offered)
        log.info("took %d of the %d consumer offsets slave %s had from clients (those ahead of this broker's)",
                 taken, sum(len(v) for v in offered.values()), conn.peer)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"taken": taken})
