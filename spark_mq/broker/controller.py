"""The broker process, wired in one place: a ``MessageStore`` behind a RemotingServer, the tables
and services around it, and the background duties (registration with the NameServers, offset
persistence, expiry of silent clients, metrics). ``BrokerController.start`` reads as the list of
the parts it starts, in order; each part is given the collaborators it uses.

Replication (``brokerRole``): a master serves its slaves on haListenPort (``HAService``); a slave
learns its master's addresses from its registration (``registration.py``), copies the master's
commitlog (``HAClient``) and its metadata (``SlaveSynchronize``), and refuses sends, naming the master.

With ``enableControllerMode`` it also registers and heartbeats with the replication controllers
(``ReplicasManager``), and takes the role they decide (``replication/role_change.py``: ``run``
replaces the running ``BrokerController`` with one of the new role). A slave in controller mode
replicates only from the master the controller names.

``serve`` runs one until SIGTERM/SIGINT and shuts down cleanly: unregister from the
NameServers, release held pulls, persist offsets and topics, flush and checkpoint the store,
remove the abort file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.grpc.peers import GRPC_PORT_KEY
from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.offset_log import OffsetLog
from spark_mq.broker.pop.revive import ReviveService
from spark_mq.broker.pop.service import PopService
from spark_mq.broker.processors.admin import AdminProcessor
from spark_mq.broker.processors.client import ClientProcessor
from spark_mq.broker.processors.epoch import EpochProcessor
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.processors.metadata import MetadataProcessor
from spark_mq.broker.processors.pop import PopProcessor
from spark_mq.broker.processors.pull import PullProcessor
from spark_mq.broker.processors.retry import RetryScheduler, SendBackProcessor
from spark_mq.broker.processors.send import SendProcessor
from spark_mq.broker.processors.tiered import TieredOffsetProcessor
from spark_mq.broker.processors.unserved_features import UnservedFeatures
from spark_mq.broker.queue_locks import QueueLockManager
from spark_mq.broker.registration import NameServerRegistration
from spark_mq.broker.replication.master_lease import LeaseGate
from spark_mq.broker.replication.role_change import (
    ControllerSeat,
    RoleChange,
    RoleWatch,
    controller_start,
    epochs_for_role,
    run_roles,
)
from spark_mq.broker.scheduled.delay_service import ScheduleService
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.scheduled.timer_service import TimerMessageService
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.tiered_offsets import TieredOffsetManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.broker.transaction.check_back import CheckBackSender, RemotingCheckBack
from spark_mq.broker.transaction.end_transaction import EndTransactionProcessor
from spark_mq.broker.transaction.service import TransactionalMessageService, TransactionConfig
from spark_mq.common.config import SYNC_MASTER, BrokerConfig
from spark_mq.common.json_file import JsonSectionsFile
from spark_mq.common.port_in_use import naming_the_port
from spark_mq.common.serve_until_signal import serve_until_signal
from spark_mq.common.tls import peer_context, server_context
from spark_mq.remoting.loop import every, stop_tasks
from spark_mq.remoting.peer_client import peer_client
from spark_mq.remoting.server import RemotingServer
from spark_mq.store.config_file import (
    CONSUMER_OFFSETS,
    DELAY_OFFSETS,
    SUBSCRIPTION_GROUPS,
    TIERED_OFFSETS,
    TIMER_CHECKPOINT,
    TOPICS,
    config_file,
)
from spark_mq.store.ha.epoch_file import EpochFile
from spark_mq.store.ha.ha_auth import cluster_account
from spark_mq.store.ha.ha_service import HAService
from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import PutStatus
from spark_mq.store.retention import no_floor
from spark_mq.store.store_paths import TIMER_LOG_DIR, TIMER_WHEEL_FILE, store_path
from spark_mq.store.timer_log import TimerLog
from spark_mq.store.timer_wheel import TimerWheel, wheel_slots

if TYPE_CHECKING:
    from spark_mq.acl.gate import AclGate
    from spark_mq.broker.grpc.server import GrpcEndpoint
    from spark_mq.broker.replication.replicas_manager import ReplicasManager
    from spark_mq.broker.replication.slave_synchronize import SlaveSynchronize
    from spark_mq.store.ha.ha_client import HAClient

log = logging.getLogger(__name__)

PERSIST_INTERVAL_S = 5.0
CLIENT_SCAN_INTERVAL_S = 10.0


class Processor(Protocol):
    """A request processor: it registers its handlers for its request codes on the server."""

    def register_on(self, server: RemotingServer) -> None: ...


class BrokerController:
    """Owns the broker's parts; ``start``/``stop`` and every handler run on one event loop."""

    def __init__(self, config: BrokerConfig, *, metrics: BrokerMetrics | None = None,
                 seat: ControllerSeat | None = None, gate: AclGate | None = None) -> None:
        """``metrics``, ``seat`` (controller mode) and ``gate`` (aclEnable) come from the broker this one replaces
        on a role change."""
        self.config = config
        self.seat = seat
        self.metrics = metrics or BrokerMetrics(config.root)
        if gate is None and config.acl_enable:
            # lazy import: the ACL's modules (~10 ms of every start) only for a broker with aclEnable
            from spark_mq.acl.gate import AclGate

            gate = AclGate.of(config, self.metrics.acl_refused, self.metrics.acl_admin)
        self.gate = gate
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="broker", gate=self.gate,
                                     ssl_context=server_context(config), tls_mode=config.tls_server_mode)
        self.clients = ClientRegistry()
        self.hold = PullHoldService()
        self.locks = QueueLockManager(expiry_s=config.rebalance_lock_max_live_time / 1000)
        self.unserved = UnservedFeatures(config.broker_name, self.metrics.refused)
        self.sql92_filters = Sql92Filters(config.enable_property_filter, self.unserved)
        self.store: MessageStore
        self.topics: TopicConfigManager
        self.groups: SubscriptionGroupManager
        self.offsets: ConsumerOffsetManager
        self.tiered: TieredOffsetManager
        self.registration: NameServerRegistration
        self.retry: RetryScheduler
        self.schedule: ScheduleService
        self.transactions: TransactionalMessageService
        self.pops: PopService
        self.revive: ReviveService
        self.offset_log: OffsetLog | None = None  # a master's with replicas (offset_log.py)
        self.timer: TimerMessageService | None = None  # a master's, with timerWheelEnable
        self.ha_service: HAService | None = None  # a master's
        self.ha_client: HAClient | None = None  # a slave's
        self.slave_sync: SlaveSynchronize | None = None  # a slave's
        self.master_client = peer_client(config)  # a slave's requests to its master (signed: admin reads)
        self.replicas: ReplicasManager | None = None  # controller mode
        # controller mode: this broker's SyncStateSet and the confirmed offset, learned by ``replicas``,
        # kept by a master's ``SyncStateKeeper``, acknowledged through ``ha_service``
        self.sync_state_set = None if seat is None else BrokerSyncStateSet(
            config.broker_id, config.all_ack_in_sync_state_set, config.min_in_sync_replicas)
        self.role_watch: RoleWatch | None = None  # controller mode: the controller's elections, acted on
        self.epochs: EpochFile | None = None  # controller mode: which master epoch wrote which part of the commitlog
        self.lease_gate: LeaseGate | None = None  # controller mode, a master: acknowledges only under its lease
        self.ha_port = config.ha_port  # a master's, once it listens
        self.sender: SendProcessor
        self.grpc: GrpcEndpoint | None = None  # enableGrpcEndpoint: RocketMQ 5's clients
        self._tasks: list[asyncio.Task] = []

    @property
    def address(self) -> str:
        return f"{self.config.broker_ip1}:{self.server.port}"

    async def start(self) -> int:
        """Bind, open (and recover) the store, serve, register with the NameServers; returns the port.

        Connections are accepted only once every request handler is registered: a client that
        still has this broker's route must not get REQUEST_CODE_NOT_SUPPORTED while it recovers.
        """
        port = await self.server.start(serve=False)
        listen_port_given = self.config.listen_port != 0
        # message ids carry the store host, so the store learns the port actually bound
        self.config = dataclasses.replace(self.config, listen_port=port)
        async with contextlib.AsyncExitStack() as undo:  # a step that fails stops what the earlier ones started
            undo.push_async_callback(self.server.stop)
            await self._open_store()
            undo.callback(self.store.shutdown)
            await self._open_replication(listen_port_given)
            undo.pop_all()
        self._open_metadata()
        if self.seat is not None and not self.config.is_slave:
            self.lease_gate = LeaseGate(self.seat.lease, self.config.broker_name, self.config.broker_id,
                                        self.registration.request)
        await self._open_delivery()
        if self.seat is not None:  # before serving: it answers the controller's notifies
            self._join_controller(self.seat)
        for processor in self._processors():
            processor.register_on(self.server)
        await self.server.start_serving()
        await self._serve_grpc()
        self.metrics.track_store(self.store)
        if self.config.is_slave:
            self.ha_client, self.slave_sync = self._replicate_master()
        self._tasks = [asyncio.get_running_loop().create_task(duty, name=f"broker-{name}")
                       for name, duty in self._duties().items()]
        self.metrics.track_ha(self.ha_service, self.ha_client)
        self.metrics.track_lease(self.lease_gate)
        # register as soon as requests can be served: clients find the broker through the route
        await self.registration.register_all()
        await self._serve_metrics()
        log.info("broker %s (%s) serving at %s", self.config.broker_name, self.config.broker_cluster_name,
                 self.address)
        return port

    async def _open_store(self) -> None:
        """The store (opened and recovered on a worker thread), after the tables its retention reads:
        it must never run without the watermarks and the consumer offsets (it keeps what groups have
        not consumed)."""
        self.tiered = TieredOffsetManager(config_file(self.config.root, TIERED_OFFSETS))
        self.tiered.load()
        self.offsets = ConsumerOffsetManager(config_file(self.config.root, CONSUMER_OFFSETS),
                                             slave=self.config.is_slave)
        self.offsets.load()
        self.store = MessageStore(self.config, archived_offset=self.tiered.get,
                                  consumed_offsets=self.offsets.committed,
                                  replica_floor=self._replica_floor if self.config.is_slave else no_floor)
        await asyncio.get_running_loop().run_in_executor(None, self.store.start)

    async def _open_replication(self, listen_port_given: bool) -> None:
        """Controller mode: the epoch file (a master's epoch recorded); a master: the HA service."""
        if self.seat is not None:
            self.epochs = epochs_for_role(self.store, self.config, self.seat)
        if not self.config.is_slave:
            await self._start_ha_service(listen_port_given)

    def _open_metadata(self) -> None:
        """Topics and subscription groups, and the registration that publishes the topics."""
        self.topics = TopicConfigManager(self.config, self.store.config_file(TOPICS))
        self.topics.load()
        self.groups = SubscriptionGroupManager(self.store.config_file(SUBSCRIPTION_GROUPS))
        self.groups.load()
        self.registration = NameServerRegistration(self.config, self.address, self.ha_port, self.topics,
                                                   self._master_found, controller_mode=self.seat is not None,
                                                   acknowledging=self._acknowledging)

    async def _open_delivery(self) -> None:
        """Retries, delay levels, transactions and (a master's, with timerWheelEnable) timer messages."""
        delay_offsets = JsonSectionsFile(self.store.config_file(DELAY_OFFSETS).path)  # shared: see schedule.py
        self.retry = RetryScheduler(self.store, self.topics, delay_offsets,
                                    delay_levels=self.config.message_delay_level, on_stored=self.hold.notify,
                                    on_topic_created=self.registration.request)
        self.retry.load()
        self.schedule = ScheduleService(self.store, delay_offsets, self.config.flush_delay_offset_interval / 1000,
                                        on_stored=self.hold.notify)
        self.schedule.load()
        self.metrics.track_schedule(self.schedule)
        self.transactions = TransactionalMessageService(
            self.store, self._producers, self.metrics, self.config.broker_name,
            TransactionConfig(self.config.transaction_time_out, self.config.transaction_check_interval,
                              self.config.transaction_check_max), on_stored=self.hold.notify,
            ensure_topic=self._ensure_system_topic)
        if not self.config.is_slave:
            await asyncio.get_running_loop().run_in_executor(None, self.transactions.load)
            if self.config.timer_wheel_enable:
                self.timer = self._open_timer()
                await asyncio.get_running_loop().run_in_executor(None, self.timer.load)
        self.metrics.track_timer(self.timer)
        self.pops = PopService(self.store, self.topics, self.groups, self.offsets, self.hold, self.sql92_filters,
                               broker_name=self.config.broker_name, cluster=self.config.broker_cluster_name,
                               switch_ms=self.config.pop_mode_switch_millis, readable_end=self._readable_end,
                               refusal=self._pop_refusal, on_topic_created=self.registration.request,
                               replicated=self._replicated)
        self.revive = ReviveService(self.pops, self.retry)
        if not self.config.is_slave:  # a slave promoted to master is a new broker: it replays at its start
            await self._open_offset_log()
            await asyncio.get_running_loop().run_in_executor(None, self.revive.replay)

    async def _open_offset_log(self) -> None:
        """A master with replicas to fail over to (controller mode, SYNC_MASTER) logs its offset changes in the
        commitlog, and first replays what its offset table is behind of (offset_log.py)."""
        if self.seat is None and self.config.broker_role != SYNC_MASTER:
            return
        self.offset_log = OffsetLog(self.store, self.topics, self.offsets, self.config.broker_name,
                                    self.registration.request, self._replicated)
        await asyncio.get_running_loop().run_in_executor(None, self.offset_log.replay)
        self.offset_log.enable()

    def _join_controller(self, seat: ControllerSeat) -> None:
        """Controller mode: the replicas manager, its elections acted on by the role watch."""
        # lazy import: controller mode's only (a broker's restart time is mostly imports)
        from spark_mq.broker.replication.replicas_manager import ReplicasManager

        self.role_watch = RoleWatch(self.config, seat, self._follow)
        self.replicas = ReplicasManager(self.config, seat.client, lambda: self.address,
                                        self.store.commitlog.max_offset, seat.first_election,
                                        self.role_watch.on_master, self.sync_state_set, seat.lease,
                                        seat.known_epoch)

    def _duties(self) -> dict[str, Coroutine[Any, Any, None]]:
        """The background duties, by task name: a slave copies its master's commitlog and metadata (delayed
        messages are delivered by the master, and replicated); a master delivers what waits."""
        duties: dict[str, Coroutine[Any, Any, None]] = {
            "register": self.registration.run(),
            "persist": every(PERSIST_INTERVAL_S, self.offsets.persist, "broker duty persist"),
            "clients": every(CLIENT_SCAN_INTERVAL_S, self.clients.expire_silent, "broker duty expire_silent"),
        }
        if self.gate is not None:
            duties["acl"] = self.gate.run()
        if self.ha_client is not None and self.slave_sync is not None:
            duties.update({"ha-client": self.ha_client.run(), "slave-sync": self.slave_sync.run()})
        else:
            duties.update({"retry": self.retry.run(), "schedule": self.schedule.run(),
                           "transaction-check": self.transactions.run(), "revive": self.revive.run()})
            if self.offset_log is not None:
                duties["offset-log"] = self.offset_log.run()
            if self.timer is not None:
                duties["timer"] = self.timer.run()
        if self.lease_gate is not None:
            duties["master-lease"] = self.lease_gate.run()
        if self.replicas is not None:
            duties["replicas"] = self.replicas.run()
            if self.ha_service is not None and self.sync_state_set is not None:
                # lazy import: controller mode's only (a broker's restart time is mostly imports)
                from spark_mq.broker.replication.sync_state_keeper import SyncStateKeeper

                keeper = SyncStateKeeper(self.ha_service, self.sync_state_set, self.replicas,
                                         self.config.ha_max_time_slave_not_catchup / 1000)
                duties["sync-state-set"] = keeper.run()
        return duties

    def _replicate_master(self) -> tuple[HAClient, SlaveSynchronize]:
        """A slave's copy of its master's commitlog and of its metadata, from the master it registered to."""
        # lazy import: a slave's only (a broker's restart time is mostly imports)
        from spark_mq.broker.replication.master_commitlog import MasterCommitLog
        from spark_mq.broker.replication.slave_synchronize import SlaveSynchronize
        from spark_mq.store.ha.ha_client import HAClient

        master = self.registration
        fixed = self.config.ha_master_address  # RocketMQ's haMasterAddress: the NameServer's answer is not used
        ha_client = HAClient(self.store, lambda: fixed or master.master_ha_addr,
                             self.config.ha_send_heartbeat_interval / 1000, self.config.ha_housekeeping_interval / 1000,
                             master.request, lambda: self.hold.recheck(self.store.get_max_offset),
                             MasterCommitLog(self.master_client, lambda: master.master_addr), self._master_found,
                             epochs=self.epochs, replica_id=None if self.seat is None else self.config.broker_id,
                             ssl_context=peer_context(self.config), account=cluster_account(self.config))
        slave_sync = SlaveSynchronize(self.master_client, lambda: master.master_addr, self.topics, self.groups,
                                      self.offsets, self.retry, self.schedule, self.tiered,
                                      self.config.slave_synchronize_interval / 1000, master.request,
                                      timer_file=self.store.config_file(TIMER_CHECKPOINT))
        return ha_client, slave_sync

    async def _serve_grpc(self) -> None:
        """RocketMQ 5's gRPC endpoint on grpcListenPort, with enableGrpcEndpoint."""
        c = self.config
        if not c.enable_grpc_endpoint:
            return
        # lazy import: grpcio, protobuf and the stubs cost ~0.2 s of every broker's start; only the endpoint needs them
        from spark_mq.broker.grpc.server import GrpcEndpoint
        from spark_mq.broker.grpc.service import BrokerParts

        parts = BrokerParts(c.broker_name, c.broker_ip1, self.store, self.topics, self.offsets, self.sender,
                            self.transactions, self.gate, self.slave_refusal, self.pops, self.revive)
        endpoint = GrpcEndpoint(c, parts, self.groups, self.clients)
        try:
            await endpoint.start()
        except BaseException:
            await self.stop()
            raise
        self.grpc = endpoint

    async def _serve_metrics(self) -> None:
        """The metrics endpoint (it imports prometheus_client), on a worker thread so that the first requests
        are served meanwhile; not again by a broker that replaced one that served it."""
        c = self.config
        if c.metrics_port <= 0 or self.metrics.registry is not None:
            return
        try:
            with naming_the_port("metricsPort", c.listen_address, c.metrics_port):
                await asyncio.get_running_loop().run_in_executor(None, self.metrics.serve, c.listen_address,
                                                                 c.metrics_port, c)
        except BaseException:
            await self.stop()
            raise

    def _open_timer(self) -> TimerMessageService:
        """The timer wheel and log under the store root, and the service that runs them (a master's)."""
        c = self.config
        wheel = TimerWheel(store_path(c.root, TIMER_WHEEL_FILE),
                           wheel_slots(c.timer_max_delay_sec * 1000, c.timer_precision_ms), c.timer_precision_ms)
        timer_log = TimerLog(store_path(c.root, TIMER_LOG_DIR), c.mapped_file_size_timer_log)
        return TimerMessageService(self.store, timer_log, wheel, self.store.config_file(TIMER_CHECKPOINT),
                                   c.timer_flush_interval_ms / 1000, on_stored=self.hold.notify)

    async def _start_ha_service(self, listen_port_given: bool) -> None:
        """Serve slaves on haListenPort; when that is 0, on listenPort + 1 (RocketMQ's 10912), or on any
        free port when listenPort was 0 too or listenPort + 1 is taken: slaves learn the HA address from
        the NameServer, so it need not be known in advance."""
        self.ha_service = HAService(self.config, self.store.commitlog, self.sync_state_set,
                                    on_confirmed=lambda: self.hold.recheck(self.store.get_max_offset))
        if self.config.ha_listen_port or not listen_port_given:
            with naming_the_port("haListenPort", self.config.listen_address, self.config.ha_listen_port):
                self.ha_port = await self.ha_service.start(self.config.ha_listen_port)
            return
        try:
            self.ha_port = await self.ha_service.start(self.config.ha_port)
        except OSError as e:
            log.warning("HA: cannot listen on listenPort + 1 (%d): %s; serving slaves on a free port instead "
                        "(set haListenPort to choose one)", self.config.ha_port, e.strerror)
            self.ha_port = await self.ha_service.start(0)

    def _confirmed_reads(self) -> bool:
        """Whether consumers read only what the replicas a put waits for all have: in controller mode,
        when puts wait for replicas (the set's members can then be elected, their history kept)."""
        return self.seat is not None and self._waits_for_replicas()

    def _readable_end(self) -> int | None:
        """What consumers may read: with confirmed reads, on the master, up to what the replicas a put
        waits for all have (``BrokerSyncStateSet.confirmed_offset``); else everything."""
        if self.ha_service is None or self.sync_state_set is None or not self._confirmed_reads():
            return None
        return self.sync_state_set.confirmed_offset()

    def _read_refusal(self) -> str | None:
        """Why a controller-mode slave of a set whose puts wait for replicas serves no pulls: its log may
        run past what the set has (a restarted old master's tail, before it truncates it), and a message
        read there and dropped by the new history would move a consumer's offset past acknowledged ones."""
        if not self.config.is_slave or not self._confirmed_reads():
            return None
        return (f"broker {self.config.broker_name} at {self.address} is a slave (brokerId {self.config.broker_id}) "
                f"of a set whose puts wait for replicas (controller mode): pull from its master, "
                f"{self.registration.master}")

    def _pop_refusal(self) -> str | None:
        """Why this broker serves no pops: a slave (pops write checkpoints; RocketMQ pops on masters only)."""
        if not self.config.is_slave:
            return None
        return (f"broker {self.config.broker_name} at {self.address} is a slave (brokerId {self.config.broker_id}): "
                f"pop from its master, {self.registration.master}")

    async def _replicated(self, end: int) -> bool:
        """Whether the replicas a put waits for (``_waits_for_replicas``) have the commitlog below ``end`` within
        syncFlushTimeout; True at once when puts wait for none."""
        if not self._waits_for_replicas() or self.ha_service is None:
            return True
        status = await self.ha_service.replicated(end, self.config.sync_flush_timeout / 1000)
        return status == PutStatus.PUT_OK

    def _waits_for_replicas(self) -> bool:
        """Whether a put's answer waits for replicas: a SYNC_MASTER's, and in controller mode one that asks
        for more than the master (allAckInSyncStateSet, minInSyncReplicas)."""
        c = self.config
        return c.broker_role == SYNC_MASTER or (self.seat is not None and (c.all_ack_in_sync_state_set
                                                                           or c.min_in_sync_replicas > 1))

    def _processors(self) -> tuple[Processor, ...]:
        """Every request processor, each given the parts it uses (built by ``start``)."""
        c = self.config
        controller_mode = () if self.epochs is None or self.replicas is None else (
            EpochProcessor(self.store, self.epochs), self.replicas)
        self.sender = SendProcessor(self.store, self.topics, self.hold, self.metrics, self.transactions,
                                    c.sync_flush_timeout, self.registration.request, self.ha_service,
                                    self._waits_for_replicas(), self.slave_refusal,
                                    reject_transaction_message=c.reject_transaction_message, timer=TimerLimits.of(c),
                                    ack_refusal=self._lease_refusal)
        return (
            *controller_mode,
            self.sender,
            EndTransactionProcessor(self.transactions, self.slave_refusal),
            PullProcessor(self.store, self.topics, self.clients, self.offsets, self.groups, self.hold, self.metrics,
                          self.sql92_filters, slave_read_enable=c.slave_read_enable and not self._confirmed_reads(),
                          in_memory_read_bytes=c.in_memory_read_bytes, readable_end=self._readable_end,
                          read_refusal=self._read_refusal,
                          mode_refusal=lambda g, t, q: self.pops.guard.pull_refusal(g, t, q, self.pops.now_ms())),
            PopProcessor(self.pops, self.metrics),
            ClientProcessor(self.store, self.topics, self.clients, self.offsets, self.locks, self.sql92_filters,
                            self.registration.request, self.clients.notify_group_changes),
            AdminProcessor(c, self.store, self.topics, self.clients, self.offsets, self.tiered, self.hold,
                           self.metrics, self.registration.request, self.runtime_extras),
            SendBackProcessor(self.retry),
            TieredOffsetProcessor(self.store, self.topics, self.tiered, self.slave_refusal),
            MetadataProcessor(self.groups, self.offsets, self.retry, self.schedule, self.timer),
            self.sql92_filters,
        )

    async def stop(self) -> None:
        if self.lease_gate is not None:  # first: no put is acknowledged once the master role ends
            self.lease_gate.close()
        self.registration.stop()
        await stop_tasks(self._tasks)
        await self.registration.unregister_all()
        if self.ha_service is not None:
            await self.ha_service.stop()
        self.hold.wake_all()
        if self.grpc is not None:
            await self.grpc.stop()
        await self.server.stop()
        await self.master_client.close()
        for table in (self.offsets, self.topics, self.schedule, *([self.timer] if self.timer else [])):
            try:
                table.persist()
            except OSError as e:  # a full disk: the store must still shut down cleanly
                log.error("could not save %s at shutdown: %s", table.file.path, e)
        if self.timer is not None:
            self.timer.close()
        self.store.shutdown()
        log.info("broker %s stopped cleanly", self.config.broker_name)

    # -- duties -----------------------------------------------------------------------------
    def _producers(self, group: str) -> list[CheckBackSender]:
        """Where a transaction check of ``group`` can go: its producers' remoting connections, and with the gRPC
        endpoint its 5.x producers' Telemetry streams."""
        remoting: list[CheckBackSender] = [RemotingCheckBack(conn) for conn in self.clients.producer_connections(group)]
        return remoting if self.grpc is None else [*remoting, *self.grpc.producers(group)]

    def _ensure_system_topic(self, name: str) -> None:
        if self.topics.ensure_system_topic(name):
            self.registration.request()

    def runtime_extras(self) -> dict[str, str]:
        """What GET_BROKER_RUNTIME_INFO adds to the store's figures: the replication figures, and with the gRPC
        endpoint its port (the other brokers name it in their routes: ``grpc/peers.py``); the messages held back."""
        grpc = {} if self.grpc is None else {GRPC_PORT_KEY: str(self.grpc.port)}
        return {**self.held_info(), **self.replication_info(), **grpc}

    def held_info(self) -> dict[str, str]:
        """Messages held back for later, for GET_BROKER_RUNTIME_INFO: delayed ones not yet delivered
        (``scheduleMessagePending``), timer ones in the wheel (``timerPending``, where the wheel runs), undecided
        half messages (``transactionHalfUndecided``: the live table, not what the half topic stores) and popped
        messages not acknowledged yet (``popInFlight``: JSON ``[[group, topic, queueId, count], ...]``)."""
        in_flight = sorted(self.pops.checkpoints.in_flight_queues().items())
        info = {"scheduleMessagePending": str(sum(self.schedule.pending().values())),
                "transactionHalfUndecided": str(len(self.transactions.live)),
                "popInFlight": json.dumps([[*key, n] for key, n in in_flight], separators=(",", ":"))}
        if self.timer is not None:
            info["timerPending"] = str(self.timer.pending)
        return info

    def replication_info(self) -> dict[str, str]:
        """The role and replication figures GET_BROKER_RUNTIME_INFO answers."""
        info = {"brokerRole": self.config.broker_role}
        if self.ha_service is not None:
            info.update(self.ha_service.runtime_info(time.monotonic()))
        if self.ha_client is not None:
            info.update(self.ha_client.runtime_info())
        if self.lease_gate is not None:
            info.update(self.lease_gate.runtime_info())
        if self.epochs is not None:  # controller mode: the replica's id there and its last recorded epoch
            last = self.epochs.entries[-1] if self.epochs.entries else None
            info.update(replicaId=str(self.config.broker_id), masterEpoch=str(last.epoch if last else 0),
                        masterEpochStartOffset=str(last.start_offset if last else 0))
        return info

    def _replica_floor(self) -> int:
        """A slave's retention floor: its master's commitlog min offset as last learned (0 until then,
        or while its synchronisation is not running yet: every file is kept)."""
        return self.slave_sync.master_min_offset if self.slave_sync is not None else 0

    def _follow(self, master_address: str) -> None:
        """Controller mode, a slave: replicate from the master the controller names, leaving the one it replaced."""
        self.registration.follow(master_address)
        if self.ha_client is not None:
            self.ha_client.master_changed()

    def _master_found(self) -> None:
        """A slave's replication connected to its master: copy its metadata now (a returning master is
        offered the consumer offsets clients committed here meanwhile before anyone resets them there)."""
        if self.slave_sync is not None:
            self.slave_sync.master_learned()

    def _lease_refusal(self) -> str | None:
        """Why a controller-mode master acknowledges no write now (its lease ran out), else None."""
        return self.lease_gate.refusal() if self.lease_gate is not None else None

    def _acknowledging(self) -> bool:
        """Whether a master registers as one (id 0): not while its lease has run out."""
        return self.lease_gate is None or self.lease_gate.acknowledging

    def slave_refusal(self) -> str | None:
        """Why a slave refuses a send (naming its master); on a master, why it refuses one while a slave
        holds more of the commitlog than it does (see ``HAService``), else None."""
        if not self.config.is_slave:
            lease = self._lease_refusal()
            if lease is not None:
                return lease
            return self.ha_service.write_refusal if self.ha_service is not None else None
        return (f"broker {self.config.broker_name} at {self.address} is a slave (brokerId {self.config.broker_id}): "
                f"send to its master, {self.registration.master}")



async def run(config: BrokerConfig, stop: asyncio.Event,
              on_ready: Callable[[BrokerController], None] | None = None) -> None:
    """Run a broker until ``stop`` is set; in controller mode, replaced by one of the new role at each role
    change the controller decides (``run_roles``). ``on_ready`` gets the first broker once it serves."""
    controller_client = peer_client(config) if config.enable_controller_mode else None
    try:
        if controller_client is not None:
            first = controller_start(config, controller_client)
            broker = BrokerController(first.config, seat=first.seat)
        else:
            broker = BrokerController(config)
        await run_roles(broker, _of_new_role, stop, on_ready)
    finally:
        if controller_client is not None:
            await controller_client.close()


def _of_new_role(old: BrokerController, change: RoleChange) -> BrokerController:
    """The broker that replaces ``old`` on a role change: it keeps the metrics (served once per process) and the
    ACL gate (its rules as reloaded)."""
    return BrokerController(change.config, metrics=old.metrics, seat=change.seat, gate=old.gate)


async def serve(config: BrokerConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a broker (see ``run``) until SIGTERM or SIGINT."""
    await serve_until_signal(lambda stop: run(config, stop, None if on_ready is None else
                                              lambda broker: on_ready(broker.address)))
    log.info("broker stopped on signal")
