"""The replication controller's request handlers, leadership and decisions (RocketMQ's ControllerManager
and ControllerRequestProcessor), on a RemotingServer of its own or the NameServer's.

Served: BROKER_HEARTBEAT (904) and CONTROLLER_GET_METADATA_INFO (1005) by every controller; by the
leader only, CONTROLLER_REGISTER_BROKER (1003), CONTROLLER_ELECT_MASTER (1002),
CONTROLLER_ALTER_SYNC_STATE_SET (1001), CONTROLLER_GET_REPLICA_INFO (1004) and
CONTROLLER_GET_SYNC_STATE_DATA (1006). Another controller answers those CONTROLLER_NOT_LEADER with the
leader's address in the remark and in ``controllerLeaderAddress`` (GetMetaDataResponseHeader's field).

Leadership and state come from the ControllerStateStore: on election the leader loads every broker
set's record; each decision is written with compare-and-set on the version it was made from, before
it is answered or acted on, so a decision a client saw survives the leader's death, and a deposed
leader's write fails instead of overwriting its successor's. Decisions are serialised by one lock.

A set's master is re-elected when it is dead (see heartbeats.py) while another replica lives; right
after taking over, brokers the leader has not heard from yet are presumed alive for one heartbeat
timeout, so a controller restart does not depose live masters. A new leader checks every set as soon as
it has loaded the records (a master whose connection closed, a killed process, is replaced at once), and
again when the presumption ends: a master it merely does not hear is replaced only one master lease
after the takeover (``BrokerLiveTable.may_hold_lease``), as it may still acknowledge writes under a
lease the previous leader granted (``broker/replication/master_lease.py``). Each election that names a
master is pushed to the set's live brokers once persisted (``notifyBrokerRoleChanged``, see
role_notifier.py); only the leader decides, so only the leader notifies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from spark_mq.common.config import ControllerConfig
from spark_mq.controller.elect_policy import ElectPolicy
from spark_mq.controller.heartbeats import BrokerLiveTable
from spark_mq.controller.replicas_info import (
    CONTROLLER_TRIGGER,
    BrokerSetState,
    Election,
    Refusal,
    alter_sync_state_set,
    elect_master,
    needs_new_master,
    register_broker,
)
from spark_mq.controller.role_notifier import NOTIFY_TIMEOUT_S, RoleChangeNotifier
from spark_mq.controller.state_store import NO_RECORD, ControllerStateStore, StaleStateError, StateStoreError
from spark_mq.remoting.bodies import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    broker_names_body,
)
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection, Handler
from spark_mq.remoting.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)
from spark_mq.remoting.loop import every, stop_tasks
from spark_mq.remoting.peer_client import peer_client
from spark_mq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

T = TypeVar("T")
Rule = Callable[[BrokerSetState | None], tuple[BrokerSetState | None, T]]
TAKEOVER_RETRY_S = 1.0  # a new leader that cannot read the store tries again this often
RECHECK_MARGIN_S = 0.05  # the check after the presumption window runs just past its end


class ControllerManager:
    """Runs on one event loop; the store's leadership callbacks are moved onto it."""

    def __init__(self, config: ControllerConfig, store: ControllerStateStore,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.store = store
        self._clock = clock
        self.live = BrokerLiveTable(config.controller_heart_beat_timeout_mills, clock)
        self.policy = ElectPolicy(self.live.is_alive, self.live.progress)
        self.notifier = RoleChangeNotifier(self.live.is_alive, peer_client(config, NOTIFY_TIMEOUT_S))
        self._states: dict[str, tuple[BrokerSetState, int]] = {}  # broker name -> (state, store version)
        self._leading = False  # leadership held and every record loaded
        self._term = 0  # counts the store's leadership callbacks: a take-over outlived by a loss is void
        self._took_over_at = float("-inf")  # the clock's seconds
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._scan_task: asyncio.Task | None = None
        self._address = ""

    @property
    def is_leader(self) -> bool:
        return self._leading

    def register_on(self, server: RemotingServer) -> None:
        server.register(RequestCode.BROKER_HEARTBEAT, self._heartbeat)
        server.register(RequestCode.CONTROLLER_GET_METADATA_INFO, self._metadata)
        leader_only: dict[int, Handler] = {
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._sync_state_data,
        }
        for code, handler in leader_only.items():
            server.register(code, self._leader_only(handler))
        server.on_connect(lambda conn: conn.on_close(self._on_channel_closed))

    async def start(self, address: str) -> None:
        """Campaign for leadership as ``address`` and start the liveness scan."""
        loop = asyncio.get_running_loop()
        self._address = address
        self.store.campaign(address, lambda: loop.call_soon_threadsafe(self._elected),
                            lambda: loop.call_soon_threadsafe(self._step_down))
        self._scan_task = loop.create_task(self._scan_loop(), name="controller-scan")

    async def stop(self) -> None:
        await stop_tasks([t for t in (self._scan_task, *self._tasks) if t is not None])
        await self.notifier.close()
        await asyncio.to_thread(self.store.close)
        self._step_down()

    # --- leadership -----------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _elected(self) -> None:
        self._term += 1
        self._spawn(self._take_over(self._term))

    async def _take_over(self, term: int) -> None:
        while True:
            try:
                records = await asyncio.to_thread(self.store.load_all)
                break
            except StateStoreError as e:
                log.error("controller elected but cannot read its state store (retrying): %s", e)
                await asyncio.sleep(TAKEOVER_RETRY_S)
        async with self._lock:
            if term != self._term:
                return  # lost (or re-won) while loading: the newer callback decides
            self._states = {name: (BrokerSetState.from_bytes(value), version)
                            for name, (value, version) in records.items()}
            replicas = [(s.broker_name, i) for s, _ in self._states.values() for i in s.replicas]
            self.live.presume_alive(replicas)
            self._took_over_at = self._clock()
            self._leading = True
        log.info("controller is the leader: %d broker set(s) loaded", len(self._states))
        # at once: a master that died with the previous leader is replaced now, not at the next scan; again
        # once nothing is presumed alive and no silent master may hold a lease any more
        await self._reelect_dead_masters()
        window = max([self.live.default_timeout_s, *(self.live.lease_s(*r) for r in replicas)])
        await asyncio.sleep(window + RECHECK_MARGIN_S)
        if term == self._term:
            await self._reelect_dead_masters()

    def _step_down(self) -> None:
        self._term += 1
        if self._leading:
            log.warning("controller lost its leadership")
        self._leading = False
        self._states = {}

    async def _reload(self) -> None:
        records = await asyncio.to_thread(self.store.load_all)
        self._states = {name: (BrokerSetState.from_bytes(value), version) for name, (value, version) in records.items()}

    # --- decisions ------------------------------------------------------------------------------

    async def _decide(self, broker_name: str, rule: Rule[T]) -> tuple[BrokerSetState | None, T]:
        """Apply ``rule`` to the set's state and persist what it returns (compare-and-set on the version it
        was made from). A refused write while the store names another leader steps down (answered
        CONTROLLER_NOT_LEADER); else the state changed under us: re-read it and decide once more."""
        async with self._lock:
            for attempt in range(2):
                if not self._leading:
                    raise StaleStateError("this controller is not the leader")
                state, version = self._states.get(broker_name, (None, NO_RECORD))
                new, result = rule(state)
                if new is None or new == state:
                    return state, result
                try:
                    new_version = await asyncio.to_thread(self.store.compare_and_set, broker_name, new.to_bytes(),
                                                          version)
                except StaleStateError:
                    if await self._leader_address() != self._address:
                        self._step_down()  # the store has another leader: its callback may be on its way
                        raise
                    if attempt:
                        raise
                    await self._reload()
                    continue
                self._states[broker_name] = (new, new_version)
                return new, result
        raise AssertionError("unreachable")

    def _state(self, broker_name: str) -> BrokerSetState | None:
        found = self._states.get(broker_name)
        return found[0] if found is not None else None

    def _alive(self, broker_name: str) -> Callable[[int], bool]:
        return lambda broker_id: self.live.is_alive(broker_name, broker_id)

    # --- liveness -------------------------------------------------------------------------------

    async def _scan_loop(self) -> None:
        await every(self.config.scan_not_active_broker_interval / 1000, self._scan, "controller scan")

    async def _scan(self) -> None:
        self.live.expire()
        await self._reelect_dead_masters()

    def _on_channel_closed(self, conn: Connection) -> None:
        if self.live.on_channel_closed(conn):
            self._spawn(self._reelect_dead_masters())

    async def _reelect_dead_masters(self) -> None:
        for state, _ in list(self._states.values()):
            if not self._leading:
                return
            if needs_new_master(state, self._alive(state.broker_name)):
                if state.master_id is not None and self.live.may_hold_lease(state.broker_name, state.master_id,
                                                                             self._took_over_at):
                    continue  # silent, not gone: it may acknowledge writes until its lease ends
                log.warning("%s: master %s (%s) is dead; electing a new one", state.broker_name, state.master_id,
                            state.master_address)
                await self._trigger_elect(state.broker_name)

    async def _trigger_elect(self, broker_name: str) -> None:
        for attempt in range(1, self.config.elect_master_max_retry_count + 1):
            if not self._leading:
                return
            try:
                state, election = await self._decide(broker_name, self._elect_rule(CONTROLLER_TRIGGER, False))
                self._elected_master(state, election)
                return
            except StateStoreError as e:
                log.warning("%s: election attempt %d/%d failed: %s", broker_name, attempt,
                            self.config.elect_master_max_retry_count, e)

    def _elected_master(self, state: BrokerSetState | None, election: Election) -> None:
        """After a persisted election: push it to the set's live brokers unless it named no new master."""
        if election.refusal is None and state is not None and self.config.notify_broker_role_changed:
            self.notifier.notify(state)

    def _elect_rule(self, broker_id: int, designate: bool) -> Rule[Election]:
        def rule(state: BrokerSetState | None) -> tuple[BrokerSetState | None, Election]:
            election = elect_master(state, broker_id, designate, self.policy, self.config.enable_elect_unclean_master)
            return election.state, election

        return rule

    # --- request handlers -----------------------------------------------------------------------

    def _leader_only(self, handler: Handler) -> Handler:
        async def serve(cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
            if not self._leading:
                return await self._not_leader(cmd)
            try:
                return await handler(cmd, conn)
            except Refusal as r:
                log.warning("refused request %d from %s: %s", cmd.code, conn.peer, r.remark)
                return cmd.make_response(r.code, r.remark)
            except StaleStateError:
                return await self._not_leader(cmd)
            except StateStoreError as e:
                log.error("controller state store failed on request %d: %s", cmd.code, e)
                return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"controller state store: {e}")

        return serve

    async def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand:
        leader = await self._leader_address()
        return cmd.make_response(ResponseCode.CONTROLLER_NOT_LEADER,
                                 f"The controller is not in leader state; the leader is {leader or 'not elected yet'}",
                                 GetMetaDataResponseHeader(controller_leader_id=leader,
                                                           controller_leader_address=leader).to_ext_fields())

    async def _leader_address(self) -> str | None:
        try:
            return await asyncio.to_thread(self.store.leader_address)
        except StateStoreError as e:
            log.warning("cannot ask the state store for the leader: %s", e)
            return None

    async def _metadata(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        leader = await self._leader_address()
        return cmd.make_response(ResponseCode.SUCCESS, None, GetMetaDataResponseHeader(
            controller_leader_id=leader, controller_leader_address=leader, is_leader=self._leading).to_ext_fields())

    async def _heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.broker_id is None:
            return cmd.make_response(ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        self.live.on_heartbeat(h.cluster_name, h.broker_name, h.broker_id, h.broker_addr, conn, epoch=h.epoch,
                               max_offset=h.max_offset, timeout_ms=h.heartbeat_timeout_mills,
                               election_priority=h.election_priority, lease_ms=h.master_lease_mills)
        state = self._state(h.broker_name) if self._leading else None
        return cmd.make_response(ResponseCode.SUCCESS, "Heart beat success", BrokerHeartbeatResponseHeader(
            is_leader=self._leading, master_epoch=state.master_epoch if state else None).to_ext_fields())

    async def _register(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = RegisterBrokerToControllerRequestHeader.from_ext_fields(cmd.ext_fields)
        state, _ = await self._decide(h.broker_name, lambda s: (
            register_broker(s, h.cluster_name, h.broker_name, h.broker_id, h.broker_address), None))
        assert state is not None
        master = state.master_id is not None and self.live.is_alive(state.broker_name, state.master_id)
        header = RegisterBrokerToControllerResponseHeader(cluster_name=state.cluster_name,
                                                          broker_name=state.broker_name)
        if master:  # a live master to follow
            header = dataclasses.replace(header, master_broker_id=state.master_id, master_address=state.master_address,
                                         master_epoch=state.master_epoch,
                                         sync_state_set_epoch=state.sync_state_set_epoch)
        return cmd.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields(),
                                 SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).to_json())

    async def _elect(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = ElectMasterRequestHeader.from_ext_fields(cmd.ext_fields)
        state, election = await self._decide(h.broker_name, self._elect_rule(h.broker_id, h.designate_elect))
        assert state is not None
        self._elected_master(state, election)
        refusal = election.refusal
        if refusal is not None and refusal.code != ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
            return cmd.make_response(refusal.code, refusal.remark)
        header = ElectMasterResponseHeader(master_broker_id=state.master_id, master_address=state.master_address,
                                           master_epoch=state.master_epoch,
                                           sync_state_set_epoch=state.sync_state_set_epoch)
        body = ElectMasterResponseBody(BrokerMemberGroup(state.cluster_name, state.broker_name, dict(state.replicas)),
                                       state.sync_state_set)
        code, remark = (refusal.code, refusal.remark) if refusal is not None else (ResponseCode.SUCCESS, None)
        return cmd.make_response(code, remark, header.to_ext_fields(), body.to_json())

    async def _alter(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = AlterSyncStateSetRequestHeader.from_ext_fields(cmd.ext_fields)
        wanted = SyncStateSet.from_json(cmd.body)
        state, _ = await self._decide(h.broker_name, lambda s: (alter_sync_state_set(
            s, h.master_broker_id, h.master_epoch, wanted.sync_state_set, wanted.sync_state_set_epoch,
            self._alive(h.broker_name)), None))
        assert state is not None
        log.info("%s: SyncStateSet is now %s (epoch %d)", state.broker_name, sorted(state.sync_state_set),
                 state.sync_state_set_epoch)
        return cmd.make_response(ResponseCode.SUCCESS, None, AlterSyncStateSetResponseHeader(
            new_sync_state_set_epoch=state.sync_state_set_epoch).to_ext_fields(),
            SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).to_json())

    async def _replica_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = GetReplicaInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        state = self._state(h.broker_name)
        if state is None:
            return cmd.make_response(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                     "Broker metadata is not existed")
        header = GetReplicaInfoResponseHeader(master_broker_id=state.master_id, master_address=state.master_address,
                                              master_epoch=state.master_epoch)
        return cmd.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields(),
                                 SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).to_json())

    async def _sync_state_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names_body(cmd.body):
            state = self._state(name)
            if state is None:
                continue
            alive = self._alive(name)
            replicas = [ReplicaIdentity(name, i, addr, alive(i)) for i, addr in sorted(state.replicas.items())]
            table[name] = ReplicasInfo(state.master_id, state.master_address, state.master_epoch,
                                       state.sync_state_set_epoch,
                                       [r for r in replicas if r.broker_id in state.sync_state_set],
                                       [r for r in replicas if r.broker_id not in state.sync_state_set])
        return cmd.make_response(ResponseCode.SUCCESS, None, None, BrokerReplicasInfo(table).to_json())

