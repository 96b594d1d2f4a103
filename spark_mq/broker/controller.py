"""The broker process: a ``MessageStore`` behind a RemotingServer, plus the background duties
(registration with every NameServer every 30 s and on topic changes, offset persistence,
expiry of silent clients, metrics).

Replication (``brokerRole``): a master serves its slaves on haListenPort (``HAService``); a slave
registers its id and HA address, learns its master's addresses from the registration answer (it
asks again every ``MASTER_LOOKUP_INTERVAL_S`` until it has them), copies the master's commitlog
(``HAClient``) and its metadata (``SlaveSynchronize``), and refuses sends, naming the master.

With ``enableControllerMode`` it also registers and heartbeats with the replication controllers
(``ReplicasManager``), and takes the role they decide (``role_switch``): ``serve`` then replaces the
running ``BrokerController`` with one of the new role. A slave in controller mode replicates only
from the master the controller names.

``serve`` runs one until SIGTERM/SIGINT and shuts down cleanly: unregister from the
NameServers, release held pulls, persist offsets and topics, flush and checkpoint the store,
remove the abort file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from spark_mq.broker.client_registry import ClientRegistry
from spark_mq.broker.consumer_offsets import ConsumerOffsetManager
from spark_mq.broker.metrics import BrokerMetrics
from spark_mq.broker.processors.admin import AdminProcessor
from spark_mq.broker.processors.client import ClientProcessor
from spark_mq.broker.processors.epoch import EpochProcessor
from spark_mq.broker.processors.long_polling import PullHoldService
from spark_mq.broker.processors.metadata import MetadataProcessor
from spark_mq.broker.processors.pull import PullProcessor
from spark_mq.broker.processors.retry import RetryScheduler, SendBackProcessor
from spark_mq.broker.processors.send import SendProcessor
from spark_mq.broker.processors.tiered import TieredOffsetProcessor
from spark_mq.broker.processors.unserved_features import UnservedFeatures
from spark_mq.broker.queue_locks import QueueLockManager
from spark_mq.broker.replication.master_commitlog import MasterCommitLog
from spark_mq.broker.replication.replicas_manager import ReplicasManager
from spark_mq.broker.replication.role_switch import ControllerSeat, RoleChange, controller_start, next_role
from spark_mq.broker.replication.slave_synchronize import SlaveSynchronize
from spark_mq.broker.replication.sync_state_keeper import SyncStateKeeper
from spark_mq.broker.scheduled.delay_service import ScheduleService
from spark_mq.broker.scheduled.timer import TimerLimits
from spark_mq.broker.scheduled.timer_service import TimerMessageService
from spark_mq.broker.sql92_filters import Sql92Filters
from spark_mq.broker.subscription_groups import SubscriptionGroupManager
from spark_mq.broker.tiered_offsets import TieredOffsetManager
from spark_mq.broker.topic_config import TopicConfigManager
from spark_mq.broker.transaction.end_transaction import EndTransactionProcessor
from spark_mq.broker.transaction.service import TransactionalMessageService, TransactionConfig
from spark_mq.common.config import SYNC_MASTER, BrokerConfig, split_addresses
from spark_mq.common.errors import RemotingError
from spark_mq.common.json_file import JsonSectionsFile
from spark_mq.remoting.bodies import RegisterBrokerBody, body_crc32
from spark_mq.remoting.client import RemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.loop import stop_tasks, wait_event
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
from spark_mq.store.ha.ha_client import HAClient
from spark_mq.store.ha.ha_service import HAService
from spark_mq.store.ha.replica_epochs import begin_epoch, open_epochs
from spark_mq.store.ha.sync_state_set import BrokerSyncStateSet
from spark_mq.store.message_store import MessageStore
from spark_mq.store.retention import no_floor
from spark_mq.store.store_paths import TIMER_LOG_DIR, TIMER_WHEEL_FILE, store_path
from spark_mq.store.timer_log import TimerLog
from spark_mq.store.timer_wheel import TimerWheel, wheel_slots

log = logging.getLogger(__name__)

REGISTER_INTERVAL_S = 30.0
PERSIST_INTERVAL_S = 5.0
CLIENT_SCAN_INTERVAL_S = 10.0
NAMESRV_TIMEOUT_S = 6.0
MASTER_LOOKUP_INTERVAL_S = 2.0  # a slave that does not know its master yet registers again this often


class Processor(Protocol):
    """A request processor: it registers its handlers for its request codes on the server."""

    def register_on(self, server: RemotingServer) -> None: ...


class BrokerController:
    """Owns the broker's parts; ``start``/``stop`` and every handler run on one event loop."""

    def __init__(self, config: BrokerConfig, *, metrics: BrokerMetrics | None = None,
                 seat: ControllerSeat | None = None) -> None:
        """``metrics`` and ``seat`` (controller mode) come from the broker this one replaces on a role change."""
        self.config = config
        self.seat = seat
        self.server = RemotingServer(config.listen_address, config.listen_port, config, name="broker")
        self.clients = ClientRegistry()
        self.hold = PullHoldService()
        self.locks = QueueLockManager(expiry_s=config.rebalance_lock_max_live_time / 1000)
        self.metrics = metrics or BrokerMetrics(config.root)
        self.unserved = UnservedFeatures(config.broker_name, self.metrics.refused)
        self.sql92_filters = Sql92Filters(config.enable_property_filter, self.unserved)
        self.namesrv_client = RemotingClient()
        self.store: MessageStore
        self.topics: TopicConfigManager
        self.groups: SubscriptionGroupManager
        self.offsets: ConsumerOffsetManager
        self.tiered: TieredOffsetManager
        self.retry: RetryScheduler
        self.schedule: ScheduleService
        self.transactions: TransactionalMessageService
        self.timer: TimerMessageService | None = None  # a master's, with timerWheelEnable
        self.ha_service: HAService | None = None  # a master's
        self.ha_client: HAClient | None = None  # a slave's
        self.slave_sync: SlaveSynchronize | None = None  # a slave's
        self.master_client = RemotingClient()  # a slave's requests to its master
        self.replicas: ReplicasManager | None = None
        # controller mode: this broker's SyncStateSet and the confirmed offset, learned by ``replicas``,
        # kept by a master's ``SyncStateKeeper``, acknowledged through ``ha_service``
        self.sync_state_set = None if seat is None else BrokerSyncStateSet(
            config.broker_id, config.all_ack_in_sync_state_set, config.min_in_sync_replicas)
        self.epochs: EpochFile | None = None  # controller mode: which master epoch wrote which part of the commitlog
        self.controller_master = ""  # controller mode, a slave: the master the controller names
        self.role_change: RoleChange | None = None  # controller mode: set (with ``role_changed``) to switch role
        self.role_changed = asyncio.Event()
        self.ha_port = config.ha_port  # a master's, once it listens
        self.master_addr = ""  # a slave's master (remoting) and its HA address, from the NameServer
        self.master_ha_addr = ""
        self._register_now = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task] = []

    @property
    def address(self) -> str:
        return f"{self.config.broker_ip1}:{self.server.port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.config.namesrv_addr)

    async def start(self) -> int:
        """Bind, open (and recover) the store, serve, register with the NameServers; returns the port.

        Connections are accepted only once every request handler is registered: a client that
        still has this broker's route must not get REQUEST_CODE_NOT_SUPPORTED while it recovers.
        """
        port = await self.server.start(serve=False)
        listen_port_given = self.config.listen_port != 0
        # message ids carry the store host, so the store learns the port actually bound
        self.config = dataclasses.replace(self.config, listen_port=port)
        try:
            # loaded before the store starts: its retention must never run without the watermarks
            # and the consumer offsets (it keeps what groups have not consumed)
            self.tiered = TieredOffsetManager(config_file(self.config.root, TIERED_OFFSETS))
            self.tiered.load()
            self.offsets = ConsumerOffsetManager(config_file(self.config.root, CONSUMER_OFFSETS),
                                                 slave=self.config.is_slave)
            self.offsets.load()
            self.store = MessageStore(self.config, archived_offset=self.tiered.get,
                                      consumed_offsets=self.offsets.committed,
                                      replica_floor=self._replica_floor if self.config.is_slave else no_floor)
            await asyncio.get_running_loop().run_in_executor(None, self.store.start)
        except BaseException:
            await self.server.stop()
            raise
        if self.seat is not None:
            try:
                self._open_epochs(self.seat)
            except BaseException:
                await self.server.stop()
                self.store.shutdown()
                raise
        if not self.config.is_slave:
            try:
                await self._start_ha_service(listen_port_given)
            except BaseException:
                await self.server.stop()
                self.store.shutdown()
                raise
        self.topics = TopicConfigManager(self.config, self.store.config_file(TOPICS))
        self.topics.load()
        self.groups = SubscriptionGroupManager(self.store.config_file(SUBSCRIPTION_GROUPS))
        self.groups.load()
        delay_offsets = JsonSectionsFile(self.store.config_file(DELAY_OFFSETS).path)  # shared: see schedule.py
        self.retry = RetryScheduler(self.store, self.topics, delay_offsets,
                                    delay_levels=self.config.message_delay_level, on_stored=self.hold.notify,
                                    on_topic_created=self.request_registration)
        self.retry.load()
        self.schedule = ScheduleService(self.store, delay_offsets, self.config.flush_delay_offset_interval / 1000,
                                        on_stored=self.hold.notify)
        self.schedule.load()
        self.metrics.track_schedule(self.schedule)
        self.transactions = TransactionalMessageService(
            self.store, self.clients.producer_connections, self.metrics, self.config.broker_name,
            TransactionConfig(self.config.transaction_time_out, self.config.transaction_check_interval,
                              self.config.transaction_check_max), on_stored=self.hold.notify,
            ensure_topic=self._ensure_system_topic)
        if not self.config.is_slave:
            await asyncio.get_running_loop().run_in_executor(None, self.transactions.load)
            if self.config.timer_wheel_enable:
                self.timer = self._open_timer()
                await asyncio.get_running_loop().run_in_executor(None, self.timer.load)
        self.metrics.track_timer(self.timer)
        if self.seat is not None:  # before serving: it answers the controller's notifies
            self.replicas = ReplicasManager(self.config, self.seat.client, lambda: self.address,
                                            self.store.commitlog.max_offset, self.seat.first_election,
                                            self._controller_names_master, self.sync_state_set,
                                            self.seat.known_epoch)
        for processor in self._processors():
            processor.register_on(self.server)
        await self.server.start_serving()
        self.metrics.track_store(self.store)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._register_loop(), name="broker-register"),
            loop.create_task(self._every(PERSIST_INTERVAL_S, self.offsets.persist), name="broker-persist"),
            loop.create_task(self._every(CLIENT_SCAN_INTERVAL_S, self._expire_clients), name="broker-clients"),
        ]
        if self.config.is_slave:  # delayed messages are delivered by the master (and replicated)
            self.ha_client = HAClient(self.store, lambda: self.master_ha_addr,
                                      self.config.ha_send_heartbeat_interval / 1000, self.request_registration,
                                      lambda: self.hold.recheck(self.store.get_max_offset),
                                      MasterCommitLog(self.master_client, lambda: self.master_addr), self._master_found,
                                      epochs=self.epochs,
                                      replica_id=None if self.seat is None else self.config.broker_id)
            self._tasks.append(loop.create_task(self.ha_client.run(), name="broker-ha-client"))
            self.slave_sync = SlaveSynchronize(self.master_client, lambda: self.master_addr, self.topics, self.groups,
                                               self.offsets, self.retry, self.schedule, self.tiered,
                                               self.config.slave_synchronize_interval / 1000, self.request_registration,
                                               timer_file=self.store.config_file(TIMER_CHECKPOINT))
            self._tasks.append(loop.create_task(self.slave_sync.run(), name="broker-slave-sync"))
        else:
            self._tasks.append(loop.create_task(self.retry.run(), name="broker-retry"))
            self._tasks.append(loop.create_task(self.schedule.run(), name="broker-schedule"))
            self._tasks.append(loop.create_task(self.transactions.run(), name="broker-transaction-check"))
            if self.timer is not None:
                self._tasks.append(loop.create_task(self.timer.run(), name="broker-timer"))
        self.metrics.track_ha(self.ha_service, self.ha_client)
        if self.replicas is not None:
            self._tasks.append(loop.create_task(self.replicas.run(), name="broker-replicas"))
            if self.ha_service is not None and self.sync_state_set is not None:
                keeper = SyncStateKeeper(self.ha_service, self.sync_state_set, self.replicas,
                                         self.config.ha_max_time_slave_not_catchup / 1000)
                self._tasks.append(loop.create_task(keeper.run(), name="broker-sync-state-set"))
        # register as soon as requests can be served: clients find the broker through the route
        await self.register_all()
        # then the metrics endpoint (it imports prometheus_client), on a worker thread so that the
        # first requests are served meanwhile
        if self.config.metrics_port > 0 and self.metrics.registry is None:  # not yet served by a broker replaced
            try:
                await loop.run_in_executor(None, self.metrics.serve, self.config.listen_address,
                                           self.config.metrics_port)
            except BaseException:
                await self.stop()
                raise
        log.info("broker %s (%s) serving at %s", self.config.broker_name, self.config.broker_cluster_name,
                 self.address)
        return port

    def _open_timer(self) -> TimerMessageService:
        """The timer wheel and log under the store root, and the service that runs them (a master's)."""
        c = self.config
        wheel = TimerWheel(store_path(c.root, TIMER_WHEEL_FILE),
                           wheel_slots(c.timer_max_delay_sec * 1000, c.timer_precision_ms), c.timer_precision_ms)
        timer_log = TimerLog(store_path(c.root, TIMER_LOG_DIR), c.mapped_file_size_timer_log)
        return TimerMessageService(self.store, timer_log, wheel, self.store.config_file(TIMER_CHECKPOINT),
                                   c.timer_flush_interval_ms / 1000, on_stored=self.hold.notify)

    def _open_epochs(self, seat: ControllerSeat) -> None:
        """Controller mode: read the epoch file; a master records its epoch before it takes a send (its
        writes start at the commitlog's end)."""
        self.epochs = open_epochs(self.store)
        if not self.config.is_slave and seat.master_epoch > self.epochs.last_epoch:
            begin_epoch(self.store, self.epochs, seat.master_epoch)
            log.info("master of %s in epoch %d from commitlog offset %d", self.config.broker_name, seat.master_epoch,
                     self.store.commitlog.max_offset())

    def _controller_names_master(self, master_id: int | None, master_address: str | None, epoch: int) -> None:
        """The controller's view of this broker's set changed: switch role if it asks for it, else (a slave)
        follow the master it names, whose HA address the NameServers give once it registered there."""
        assert self.seat is not None
        change = next_role(self.config, self.seat, master_id, epoch)
        if change is not None:
            log.warning("controller: %s is master of %s in epoch %d: this broker (id %d) becomes %s",
                        master_id, self.config.broker_name, epoch, self.config.broker_id,
                        "its master" if not change.config.is_slave else "a slave")
            self.role_change = change
            self.role_changed.set()
        elif self.config.is_slave and (master_address or "") != self.controller_master:
            self.controller_master = master_address or ""
            self.master_addr = self.master_ha_addr = ""
            self.request_registration()

    async def _start_ha_service(self, listen_port_given: bool) -> None:
        """Serve slaves on haListenPort; when that is 0, on listenPort + 1 (RocketMQ's 10912), or on any
        free port when listenPort was 0 too or listenPort + 1 is taken: slaves learn the HA address from
        the NameServer, so it need not be known in advance."""
        self.ha_service = HAService(self.config, self.store.commitlog, self.sync_state_set,
                                    on_confirmed=lambda: self.hold.recheck(self.store.get_max_offset))
        if self.config.ha_listen_port or not listen_port_given:
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
        master = self.master_addr or "not known yet (its NameServer has no master registered)"
        return (f"broker {self.config.broker_name} at {self.address} is a slave (brokerId {self.config.broker_id}) "
                f"of a set whose puts wait for replicas (controller mode): pull from its master, {master}")

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
        return (
            *controller_mode,
            SendProcessor(self.store, self.topics, self.hold, self.metrics, self.transactions, c.sync_flush_timeout,
                          self.request_registration, self.ha_service, self._waits_for_replicas(),
                          self.slave_refusal, reject_transaction_message=c.reject_transaction_message,
                          timer=TimerLimits.of(c)),
            EndTransactionProcessor(self.transactions, self.slave_refusal),
            PullProcessor(self.store, self.topics, self.clients, self.offsets, self.groups, self.hold, self.metrics,
                          self.sql92_filters, slave_read_enable=c.slave_read_enable and not self._confirmed_reads(),
                          in_memory_read_bytes=c.in_memory_read_bytes, readable_end=self._readable_end,
                          read_refusal=self._read_refusal),
            ClientProcessor(self.store, self.topics, self.clients, self.offsets, self.locks, self.sql92_filters,
                            self.request_registration, self.notify_group_changes),
            AdminProcessor(c, self.store, self.topics, self.clients, self.offsets, self.tiered, self.hold,
                           self.metrics, self.request_registration, self.replication_info),
            SendBackProcessor(self.retry),
            TieredOffsetProcessor(self.store, self.topics, self.tiered, self.slave_refusal),
            MetadataProcessor(self.groups, self.offsets, self.retry, self.schedule, self.timer),
            self.sql92_filters,
        )

    async def stop(self) -> None:
        # a registration answered just as it is cancelled swallows the cancellation (wait_for before
        # Python 3.12): its loop then ends at the flag, and the wait is bounded anyway
        self._stopping = True
        await stop_tasks(self._tasks)
        await self._unregister_all()
        if self.ha_service is not None:
            await self.ha_service.stop()
        self.hold.wake_all()
        await self.server.stop()
        await self.namesrv_client.close()
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
    def request_registration(self) -> None:
        """Re-register soon (a topic was created or changed)."""
        self._register_now.set()

    def _ensure_system_topic(self, name: str) -> None:
        if self.topics.ensure_system_topic(name):
            self.request_registration()

    def replication_info(self) -> dict[str, str]:
        """The role and replication figures GET_BROKER_RUNTIME_INFO answers."""
        info = {"brokerRole": self.config.broker_role}
        if self.ha_service is not None:
            info.update(self.ha_service.runtime_info(time.monotonic()))
        if self.ha_client is not None:
            info.update(self.ha_client.runtime_info())
        if self.epochs is not None:  # controller mode: the replica's id there and its last recorded epoch
            last = self.epochs.entries[-1] if self.epochs.entries else None
            info.update(replicaId=str(self.config.broker_id), masterEpoch=str(last.epoch if last else 0),
                        masterEpochStartOffset=str(last.start_offset if last else 0))
        return info

    def _replica_floor(self) -> int:
        """A slave's retention floor: its master's commitlog min offset as last learned (0 until then,
        or while its synchronisation is not running yet: every file is kept)."""
        return self.slave_sync.master_min_offset if self.slave_sync is not None else 0

    def _master_found(self) -> None:
        """A slave's replication connected to its master: copy its metadata now (a returning master is
        offered the consumer offsets clients committed here meanwhile before anyone resets them there)."""
        if self.slave_sync is not None:
            self.slave_sync.master_learned()

    def slave_refusal(self) -> str | None:
        """Why a slave refuses a send (naming its master); on a master, why it refuses one while a slave
        holds more of the commitlog than it does (see ``HAService``), else None."""
        if not self.config.is_slave:
            return self.ha_service.write_refusal if self.ha_service is not None else None
        master = self.master_addr or "not known yet (its NameServer has no master registered)"
        return (f"broker {self.config.broker_name} at {self.address} is a slave (brokerId {self.config.broker_id}): "
                f"send to its master, {master}")

    async def _register_loop(self) -> None:
        while not self._stopping:
            lookup = self.config.is_slave and not self.master_ha_addr
            await wait_event(self._register_now, MASTER_LOOKUP_INTERVAL_S if lookup else REGISTER_INTERVAL_S)
            self._register_now.clear()
            await self.register_all()

    async def register_all(self) -> None:
        """REGISTER_BROKER with every NameServer; a failing one is logged and retried later."""
        body = RegisterBrokerBody(self.topics.wrapper()).to_json()
        fields = {
            "brokerName": self.config.broker_name, "brokerAddr": self.address,
            "clusterName": self.config.broker_cluster_name, "haServerAddr": f"{self.config.broker_ip1}:{self.ha_port}",
            "brokerId": self.config.registered_id, "compressed": "false", "bodyCrc32": body_crc32(body),
        }
        for addr in self.namesrv_addrs:
            try:
                resp = await self.namesrv_client.invoke(
                    addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body), NAMESRV_TIMEOUT_S)
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("namesrv %s refused registration: %s %s", addr, resp.code, resp.remark)
                elif self.config.is_slave:
                    self._learn_master(resp.ext_fields.get("masterAddr", ""), resp.ext_fields.get("haServerAddr", ""))
            except RemotingError as e:
                log.warning("cannot register with namesrv %s (retrying in %.0f s): %s", addr, REGISTER_INTERVAL_S, e)

    def _learn_master(self, master_addr: str, master_ha_addr: str) -> None:
        """A slave's master, as a registration answer names it (kept while an answer names none; in controller
        mode, only the master the controller names: the NameServers may still list a dead one)."""
        if self.seat is not None and master_addr != self.controller_master:
            return
        if master_addr and (master_addr, master_ha_addr) != (self.master_addr, self.master_ha_addr):
            log.info("HA: master of %s is %s (HA address %s)", self.config.broker_name, master_addr, master_ha_addr)
            self.master_addr, self.master_ha_addr = master_addr, master_ha_addr
            if self.slave_sync is not None:
                self.slave_sync.master_learned()

    async def _unregister_all(self) -> None:
        fields = {"brokerName": self.config.broker_name, "brokerAddr": self.address,
                  "clusterName": self.config.broker_cluster_name, "brokerId": self.config.registered_id}
        for addr in self.namesrv_addrs:
            with contextlib.suppress(RemotingError):
                await self.namesrv_client.invoke(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), NAMESRV_TIMEOUT_S)

    @staticmethod
    async def _every(interval: float, duty: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                duty()
            except Exception:  # a failing duty is retried next interval; the broker keeps serving
                log.exception("broker duty %s failed", getattr(duty, "__name__", duty))

    def _expire_clients(self) -> None:
        self.notify_group_changes(self.clients.expire())

    def notify_group_changes(self, groups: Iterable[str]) -> None:
        """Tell every member of each group that the member list changed (they rebalance)."""
        for group in groups:
            info = self.clients.consumer_group(group)
            if info is None:
                continue
            for conn in list(info.channels):
                with contextlib.suppress(RemotingError):
                    conn.send_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                             {"consumerGroup": group}))


async def run(config: BrokerConfig, stop: asyncio.Event,
              on_ready: Callable[[BrokerController], None] | None = None) -> None:
    """Run a broker until ``stop`` is set; in controller mode, replaced by one of the new role at each role
    change the controller decides. ``on_ready`` gets the first broker once it serves."""
    controller_client = RemotingClient() if config.enable_controller_mode else None
    broker: BrokerController | None
    try:
        if controller_client is not None:
            start = controller_start(config, controller_client)
            broker = BrokerController(start.config, seat=start.seat)
        else:
            broker = BrokerController(config)
        await broker.start()
        try:
            if on_ready is not None:
                on_ready(broker)
            while not await _stop_or_role_change(stop, broker.role_changed):
                change = broker.role_change
                assert change is not None
                old, broker = broker, None
                await old.stop()
                new = BrokerController(change.config, metrics=old.metrics, seat=change.seat)
                await new.start()  # one that fails to start has stopped what it started
                broker = new
                log.info("broker %s now %s (id %d at the NameServers)", change.config.broker_name,
                         change.config.broker_role, change.config.registered_id)
        finally:
            if broker is not None:
                await broker.stop()
    finally:
        if controller_client is not None:
            await controller_client.close()


async def serve(config: BrokerConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Run a broker (see ``run``) until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run(config, stop, None if on_ready is None else lambda broker: on_ready(broker.address))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("broker stopped on signal")


async def _stop_or_role_change(stop: asyncio.Event, role_changed: asyncio.Event) -> bool:
    """Wait for either; True when asked to stop."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(role_changed.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return stop.is_set()
