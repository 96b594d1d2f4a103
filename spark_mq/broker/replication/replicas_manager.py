"""A broker's side of the replication controller (``enableControllerMode``; RocketMQ's ReplicasManager),
first part: registration, heartbeats and the controller's view of the broker's set.

The broker registers with the leading controller (REGISTER_BROKER_TO_CONTROLLER, following
CONTROLLER_NOT_LEADER to the leader it names); a broker configured as its set's master asks for the
set's first election with its own id (ELECT_MASTER), so the controller's records start from the
deployed roles. It heartbeats to every controller each ``brokerHeartbeatInterval`` ms with its
commitlog end and the master epoch it knows (each controller judges liveness on its own), and asks
for its set's master and epoch every ``syncBrokerMetadataPeriod`` ms (GET_REPLICA_INFO). A heartbeat
the leading controller answers SUCCESS renews the master lease from the moment it was sent
(``master_lease.py``).

The leading controller also pushes each election (NOTIFY_BROKER_ROLE_CHANGED, RocketMQ's code and
header, served here): the broker acts on it at once, as on a poll's answer, so a new master takes over
without waiting for the poll, which stays the fallback for a notify lost. Master epochs only move
forward: a notify or a poll answer naming an older epoch than the newest known (a late answer, a
notify overtaken by a newer election) is ignored, as RocketMQ's ``changeBrokerRole`` does; the newest
epoch outlives a role switch (``known_epoch``).

Every change of the set's master or epoch it learns goes to ``on_master`` (the broker changes role
on it: see ``role_change``), every SyncStateSet it learns to the broker's ``BrokerSyncStateSet``
(``store/ha/sync_state_set.py``, which owns it; its epoch goes with ALTER_SYNC_STATE_SET); a master
changes the set with ``alter_sync_state_set`` (see ``SyncStateKeeper``). The broker's id here is
its configured ``brokerId`` whatever its role (the NameServers see 0 while it is master).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from spark_mq.broker.replication.master_lease import MasterLease
from spark_mq.common.config import BrokerConfig, split_addresses
from spark_mq.common.errors import RemotingError
from spark_mq.remoting.bodies import SyncStateSet
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.connection import Connection
from spark_mq.remoting.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    ElectMasterRequestHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    Header,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from spark_mq.remoting.loop import wait_event
from spark_mq.remoting.server import RemotingServer
from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet

log = logging.getLogger(__name__)

CONTROLLER_TIMEOUT_S = 3.0


class ReplicasManager:
    """Runs on the broker's event loop; ``run`` until cancelled."""

    def __init__(self, config: BrokerConfig, client: RemotingClient, address: Callable[[], str],
                 max_offset: Callable[[], int], first_election: bool,
                 on_master: Callable[[int | None, str | None, int], None],
                 sync_state_set: BrokerSyncStateSet, lease: MasterLease, known_epoch: int = 0) -> None:
        """``first_election``: this broker was configured master, so it asks for its set's first election;
        ``lease``: renewed by the leader's heartbeat answers;
        ``known_epoch``: the newest master epoch this process learned (before a role switch)."""
        self.config = config
        self.first_election = first_election
        self.on_master = on_master
        self.sync_state_set = sync_state_set  # written here with what the controller has
        self.lease = lease
        self._sync_now = asyncio.Event()  # a heartbeat's answer named a newer master epoch
        self.client = client
        self.controllers = split_addresses(config.controller_addr)
        self._address = address
        self._max_offset = max_offset
        self._leader: str | None = None
        self.registered = False
        self.master_id: int | None = None  # the controller's view of this broker's set
        self.master_address: str | None = None
        self.master_epoch = known_epoch

    async def run(self) -> None:
        await asyncio.gather(self._sync_loop(), *(self._heartbeat_loop(addr) for addr in self.controllers))

    def register_on(self, server: RemotingServer) -> None:
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._notified)

    # -- heartbeats -------------------------------------------------------------------------------

    async def _heartbeat_loop(self, addr: str) -> None:
        """Heartbeats to one controller (one loop each: a controller that does not answer delays no other)."""
        while True:
            header = BrokerHeartbeatRequestHeader(
                cluster_name=self.config.broker_cluster_name, broker_addr=self._address(),
                broker_name=self.config.broker_name, broker_id=self.config.broker_id, epoch=self.master_epoch,
                max_offset=self._max_offset(), heartbeat_timeout_mills=self.config.controller_heart_beat_timeout_mills,
                master_lease_mills=self.lease.lease_ms)
            sent_at = self.lease.clock()
            try:
                answer = await self.client.invoke(addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                                                                header.to_ext_fields()),
                                                  CONTROLLER_TIMEOUT_S)
                if answer.code == ResponseCode.SUCCESS and self._renews(addr, answer, header.epoch or 0):
                    self.lease.grant(sent_at)
            except RemotingError as e:
                log.debug("heartbeat to controller %s failed: %s", addr, e)
            await asyncio.sleep(self.config.broker_heartbeat_interval / 1000)

    def _renews(self, addr: str, answer: RemotingCommand, reported_epoch: int) -> bool:
        """Whether a heartbeat's answer renews the master lease: it came from the leading controller (as it
        says, ``isLeader``; a RocketMQ controller says nothing: the one this broker last found leading), and
        names no master epoch newer than the heartbeat reported (else this broker was deposed: it asks the
        controller for the set's master now instead of at its next poll)."""
        h = BrokerHeartbeatResponseHeader.from_ext_fields(answer.ext_fields)
        if h.master_epoch is not None and h.master_epoch > reported_epoch:
            self._sync_now.set()
            return False
        return h.is_leader if h.is_leader is not None else addr == self._leader

    # -- the controller's view --------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        while True:
            try:
                await self.sync()
            except RemotingError as e:
                log.warning("controller unreachable (retrying in %d ms): %s", self.config.sync_broker_metadata_period,
                            e)
            await wait_event(self._sync_now, self.config.sync_broker_metadata_period / 1000)
            self._sync_now.clear()

    async def sync(self) -> None:
        """Register if not yet (and ask for the first election as the configured master), then learn the
        set's master from the leading controller."""
        c = self.config
        if not self.registered:
            register = RegisterBrokerToControllerRequestHeader(
                cluster_name=c.broker_cluster_name, broker_name=c.broker_name, broker_id=c.broker_id,
                broker_address=self._address())
            answer = await self._to_leader(RequestCode.CONTROLLER_REGISTER_BROKER, register)
            if answer.code != ResponseCode.SUCCESS:
                log.warning("controller refused registration: %s %s", answer.code, answer.remark)
                return
            self.registered = True
            log.info("registered with the controller at %s", self._leader)
            if "masterBrokerId" not in answer.ext_fields and self.first_election:
                elected = await self._to_leader(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
                    cluster_name=c.broker_cluster_name, broker_name=c.broker_name, broker_id=c.broker_id))
                if elected.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
                    log.warning("controller did not elect this broker: %s %s", elected.code, elected.remark)
        info = await self._to_leader(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                     GetReplicaInfoRequestHeader(broker_name=c.broker_name))
        if info.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            self.registered = False  # the controller lost or cleaned our set: register again
            return
        if info.code == ResponseCode.SUCCESS:
            self._learn(GetReplicaInfoResponseHeader.from_ext_fields(info.ext_fields))
            self._learn_sync_state_set(SyncStateSet.from_json(info.body or b"{}"))

    def _learn_sync_state_set(self, known: SyncStateSet) -> None:
        self.sync_state_set.learn(known.sync_state_set, known.sync_state_set_epoch)

    async def alter_sync_state_set(self, members: frozenset[int]) -> int:
        """As this set's master, ask the controller for a new SyncStateSet; returns the answer's code
        (SUCCESS: it took it, then known here). A refusal (a newer master or set epoch: this view is
        stale) is logged; the next sync learns the controller's view. Raises ``RemotingError`` when no
        controller answered (it may have taken the set all the same)."""
        c = self.config
        header = AlterSyncStateSetRequestHeader(broker_name=c.broker_name, master_broker_id=c.broker_id,
                                                master_epoch=self.master_epoch)
        body = SyncStateSet(members, self.sync_state_set.epoch).to_json()
        answer = await self._to_leader(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)
        if answer.code != ResponseCode.SUCCESS:
            log.warning("controller refused SyncStateSet %s: %s %s", sorted(members), answer.code, answer.remark)
            return answer.code
        epoch = AlterSyncStateSetResponseHeader.from_ext_fields(answer.ext_fields).new_sync_state_set_epoch
        log.info("SyncStateSet of %s now %s (epoch %d)", c.broker_name, sorted(members), epoch)
        self._learn_sync_state_set(SyncStateSet(members, epoch))
        return answer.code

    async def _notified(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """NOTIFY_BROKER_ROLE_CHANGED: the controller elected a master; learn it now (an older epoch than
        known is ignored). Answered SUCCESS either way, as RocketMQ does; the controller sends it oneway."""
        h = NotifyBrokerRoleChangedRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.master_epoch <= self.master_epoch:  # known already (by a poll), or overtaken by a newer election
            log.log(logging.DEBUG if h.master_epoch == self.master_epoch else logging.INFO,
                    "ignored the controller's notify from %s: master %d in epoch %d, this broker knows epoch %d",
                    conn.peer, h.master_broker_id, h.master_epoch, self.master_epoch)
        else:
            log.info("controller %s notified: master of %s is %d (%s) in epoch %d", conn.peer,
                     self.config.broker_name, h.master_broker_id, h.master_address, h.master_epoch)
            self._learn(GetReplicaInfoResponseHeader(master_broker_id=h.master_broker_id,
                                                     master_address=h.master_address, master_epoch=h.master_epoch))
            self._learn_sync_state_set(SyncStateSet.from_json(cmd.body or b"{}"))
        return cmd.make_response(ResponseCode.SUCCESS)

    def _learn(self, h: GetReplicaInfoResponseHeader) -> None:
        known = (h.master_broker_id, h.master_address, h.master_epoch or 0)
        if known == (self.master_id, self.master_address, self.master_epoch):
            return
        if known[2] < self.master_epoch:
            log.info("ignored the controller's view of %s in master epoch %d: this broker knows epoch %d",
                     self.config.broker_name, known[2], self.master_epoch)
            return
        self.master_id, self.master_address, self.master_epoch = known
        log.info("controller: master of %s is %s (%s), master epoch %d", self.config.broker_name, self.master_id,
                 self.master_address, self.master_epoch)
        self.on_master(self.master_id, self.master_address, self.master_epoch)

    async def _to_leader(self, code: int, header: Header, body: bytes = b"") -> RemotingCommand:
        """Send to the leading controller: the one last found, else each in turn, following a
        CONTROLLER_NOT_LEADER answer to the leader it names."""
        cmd_fields = header.to_ext_fields()
        candidates = [a for a in (self._leader, *self.controllers) if a]
        errors = []
        for addr in dict.fromkeys(candidates):
            for _ in range(2):  # the address asked, then the leader it names
                try:
                    answer = await self.client.invoke(addr, RemotingCommand.request(code, cmd_fields, body),
                                                      CONTROLLER_TIMEOUT_S)
                except RemotingError as e:
                    errors.append(f"{addr}: {e}")
                    break
                named = answer.ext_fields.get("controllerLeaderAddress")
                if answer.code != ResponseCode.CONTROLLER_NOT_LEADER:
                    self._leader = addr
                    return answer
                if not named or named == addr:
                    errors.append(f"{addr}: {answer.remark}")
                    break
                addr = named
        raise RemotingError(f"no leading controller answered ({'; '.join(errors)})")
