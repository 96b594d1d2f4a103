"""Process configuration: RocketMQ-style ``key=value`` properties into frozen dataclasses.

Keys are RocketMQ's camelCase names (``mapedFileSizeCommitLog``, ``flushDiskType``...) and
map to snake_case fields. An unknown key or a value of the wrong type is an error that names
the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

from spark_mq.common.config_dataclass import config_dataclass
from spark_mq.common.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels
from spark_mq.common.errors import ConfigError, InvalidNameError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass, realize
from spark_mq.common.names import validate_broker_name

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
# broker roles (RocketMQ's BrokerRole): a master acknowledges a put after its own write (ASYNC) or once a
# slave has the bytes too (SYNC); a slave copies its master's commitlog and refuses writes
ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"
BROKER_ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)
MASTER_ID = 0
GiB = 1024**3
TIMER_LOG_RECORD_SIZE = 40  # store/timer_log.py RECORD_FIELDS
MAX_TIMER_SLOTS = 1 << 26  # the timing wheel file: 32 bytes a slot, two slots per timerPrecisionMs of max delay
# Every key is RocketMQ's own name for it, except these: a different RocketMQ name, or None for a key
# spark_mq adds. A field's description is its trailing comment, the comment block above a run of fields
# introduces the run; docs/configuration.md is generated from both (scripts/gen_config_docs.py).
ROCKETMQ_NAMES: dict[str, str | None] = {
    "maxFrameSize": "com.rocketmq.remoting.frameMaxLength (a system property)",
    "serverPartialFrameTimeoutSeconds": None,
    "serverChannelMaxInFlightRequests": None,
    "serverChannelMaxHeldRequests": None,
    "serverMaxConnections": None,
    "listenAddress": "bindAddress (RocketMQ 5)",
    "metricsPort": "metricsPromExporterPort (RocketMQ 5)",
    "totalPhysicalMemorySize": None,
    "slaveSynchronizeInterval": None,
    "checkCRCOnRecoverFiles": None,
    "cleanUnconsumedForcibly": None,
    "deleteFilesBatchMax": "deleteFileBatchMax",
    "tieredStoreEnable": None,
    "tieredStoreRoot": None,
    "tieredDeleteUnarchivedForcibly": None,
    "rebalanceLockMaxLiveTime": "rocketmq.broker.rebalance.lockMaxLiveTime (a system property)",
    "brokerChannelExpiredTime": None,
    "zookeeperConnectString": None,
    "zookeeperRootPath": None,
    "zookeeperSessionTimeoutMills": None,
    "accessKey": None,
    "secretKey": None,
    "allowInsecureRemote": None,
}


TLS_MODES = ("disabled", "permissive", "enforcing")  # RocketMQ's TlsMode
TLS_CLIENT_AUTH = ("none", "optional", "require")  # RocketMQ's tls.server.need.client.auth
# keys with dots (RocketMQ's TLS system properties, read from the config file here): field -> key
DOTTED_KEYS = {
    "tls_enable": "tls.enable",
    "tls_server_mode": "tls.server.mode",
    "tls_server_cert_path": "tls.server.certPath",
    "tls_server_key_path": "tls.server.keyPath",
    "tls_server_trust_cert_path": "tls.server.trustCertPath",
    "tls_server_need_client_auth": "tls.server.need.client.auth",
    "tls_client_cert_path": "tls.client.certPath",
    "tls_client_key_path": "tls.client.keyPath",
    "tls_client_trust_cert_path": "tls.client.trustCertPath",
    "tls_client_auth_server": "tls.client.authServer",
}
DOTTED_FIELDS = {key: name for name, key in DOTTED_KEYS.items()}
LOOPBACK_ADDRESSES = ("127.0.0.1", "localhost", "::1")
PLAIN_ACL_FILE = "plain_acl.yml"  # the accounts file's default name, beside the config file


def is_loopback(address: str) -> bool:
    """Whether binding ``address`` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    return address in LOOPBACK_ADDRESSES or address.startswith("127.")


@config_dataclass
class SecurityConfig:
    """Who may talk to a server and how (broker, NameServer and controller each have these keys).

    ``aclEnable`` checks every request against the accounts of ``aclFile`` (RocketMQ's plain_acl.yml
    format; default: plain_acl.yml beside the config file), reloaded when it changes. ``accessKey`` and
    ``secretKey`` are this process's own account, which signs what it sends to its peers (registration,
    controller heartbeats, replication): an admin account of the cluster. TLS keys are RocketMQ's
    ``tls.*`` names. A server bound beyond loopback without ``aclEnable`` refuses to start unless
    ``allowInsecureRemote=true``.
    """

    acl_enable: bool = False  # check every request's signature and permissions against aclFile
    acl_file: str = ""  # the accounts (plain_acl.yml format); empty: plain_acl.yml beside the config file
    access_key: str = ""  # this process's own account, signing its requests to peers (an admin account)
    secret_key: str = field(default="", repr=False)  # ... and its secret (never logged)
    allow_insecure_remote: bool = False  # let a server bound beyond loopback run without aclEnable
    # TLS on the ports this process serves (remoting, HA, metrics)
    tls_server_mode: str = "disabled"  # disabled, permissive (TLS and plaintext) or enforcing (TLS only)
    tls_server_cert_path: str = ""  # PEM certificate the server presents
    tls_server_key_path: str = ""  # PEM private key of that certificate
    tls_server_trust_cert_path: str = ""  # PEM CA certificates client certificates are checked against
    tls_server_need_client_auth: str = "none"  # none, optional or require a client certificate
    # TLS on the connections this process opens (to NameServers, controllers, its master)
    tls_enable: bool = False  # dial peers over TLS
    tls_client_cert_path: str = ""  # PEM certificate presented to peers asking for one
    tls_client_key_path: str = ""  # PEM private key of that certificate
    tls_client_trust_cert_path: str = ""  # PEM CA certificates a peer's certificate is checked against
    tls_client_auth_server: bool = True  # check the peer's certificate (false: encryption only)

    def check_security(self, listen_address: str) -> None:
        """Raise ``ConfigError`` naming the key for an inconsistent security setting."""
        if self.tls_server_mode not in TLS_MODES:
            raise ConfigError(f"tls.server.mode={self.tls_server_mode}: use one of {', '.join(TLS_MODES)}")
        if self.tls_server_need_client_auth not in TLS_CLIENT_AUTH:
            raise ConfigError(f"tls.server.need.client.auth={self.tls_server_need_client_auth}: use one of "
                              f"{', '.join(TLS_CLIENT_AUTH)}")
        if self.tls_server_mode != "disabled" and not (self.tls_server_cert_path and self.tls_server_key_path):
            raise ConfigError(f"tls.server.mode={self.tls_server_mode} needs tls.server.certPath and "
                              "tls.server.keyPath (PEM files; scripts/make_certs.py makes a throwaway set)")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("accessKey and secretKey go together: give both or neither")
        if not (is_loopback(listen_address) or self.acl_enable or self.allow_insecure_remote):
            raise ConfigError(f"listenAddress={listen_address} serves other machines but aclEnable is off: anyone "
                              "reaching the port could read, write and administer; set aclEnable=true (with a "
                              "plain_acl.yml) or, on a trusted network, allowInsecureRemote=true")


@config_dataclass
class ServerChannelConfig:
    """What one client connection may cost a server (broker, NameServer or controller); each config has these keys.

    A connection is closed after ``serverChannelMaxIdleTimeSeconds`` with nothing received from it
    (RocketMQ's key and default), or when a frame stays incomplete for
    ``serverPartialFrameTimeoutSeconds``. Its memory is bounded by stopping to read from it while its
    unsent answers pass ``writeBufferHighWaterMark`` (until they drain to ``writeBufferLowWaterMark``;
    RocketMQ's keys, its 4.9.3 defaults) and while ``serverChannelMaxInFlightRequests`` of its
    requests are being served; long-polling pulls waiting for messages do not count there (a consumer
    holds one per queue), up to ``serverChannelMaxHeldRequests`` of them. A server holds at most
    ``serverMaxConnections`` client connections (no RocketMQ key: Netty takes them all); one past it
    is closed at once.
    """

    max_frame_size: int = 16 * 1024 * 1024  # largest remoting frame accepted from a peer
    server_channel_max_idle_time_seconds: int = 120  # 0: never close an idle connection
    server_partial_frame_timeout_seconds: int = 30  # 0: no deadline for a frame once it started
    server_channel_max_in_flight_requests: int = 64  # requests of a connection served at once; then it is not read
    server_channel_max_held_requests: int = 4096  # past it, a pull finding nothing is answered at once
    write_buffer_high_water_mark: int = 4 * 1024 * 1024  # unsent answer bytes at which a connection stops being read
    write_buffer_low_water_mark: int = 1024 * 1024  # ... and the level they must drain to before it is read again
    server_max_connections: int = 10_000  # client connections a server holds; one more is closed at once

    def __post_init__(self) -> None:
        if self.max_frame_size < 1024:
            raise ConfigError(f"maxFrameSize={self.max_frame_size}: give at least 1024 bytes")
        if self.server_channel_max_idle_time_seconds < 0 or self.server_partial_frame_timeout_seconds < 0:
            raise ConfigError("serverChannelMaxIdleTimeSeconds and serverPartialFrameTimeoutSeconds must be >= 0 "
                              "(0 turns the timeout off)")
        if self.server_channel_max_in_flight_requests < 1 or self.server_channel_max_held_requests < 0:
            raise ConfigError("serverChannelMaxInFlightRequests must be >= 1 and serverChannelMaxHeldRequests >= 0")
        if self.server_max_connections < 1:
            raise ConfigError(f"serverMaxConnections={self.server_max_connections}: give at least 1")
        if not 0 <= self.write_buffer_low_water_mark <= self.write_buffer_high_water_mark:
            raise ConfigError(f"need 0 <= writeBufferLowWaterMark ({self.write_buffer_low_water_mark}) <= "
                              f"writeBufferHighWaterMark ({self.write_buffer_high_water_mark})")


@config_dataclass
class BrokerConfig(ServerChannelConfig, SecurityConfig):
    """Everything a broker process reads from conf/broker.conf (store settings included)."""

    broker_name: str = "broker-a"  # the broker set this broker belongs to (master and slaves share it)
    broker_cluster_name: str = "DefaultCluster"  # the cluster the set is registered in at the NameServers
    broker_id: int = 0  # 0: the set's master; >0: a slave (controller mode: the replica's id)
    broker_ip1: str = "127.0.0.1"  # the address registered with the NameServers, which clients connect to
    listen_address: str = "127.0.0.1"  # the address the broker binds (0.0.0.0: every interface)
    listen_port: int = 10911  # the remoting port clients and NameServers talk to
    namesrv_addr: str = ""  # the NameServers to register with, ';'-separated host:port
    metrics_port: int = 9100  # Prometheus /metrics on this port of listenAddress (0: off)
    enable_grpc_endpoint: bool = False  # serve RocketMQ 5's gRPC protocol (its official 5.x clients) on grpcListenPort
    grpc_listen_port: int = 8081  # the gRPC endpoint's port of listenAddress (0: any free port)
    # store layout
    store_path_root_dir: str = "./data/store"  # the store's directory: commitlog/, consumequeue/, index/, config/
    maped_file_size_commit_log: int = GiB  # bytes per commitlog file
    maped_file_size_consume_queue: int = 300_000 * 20  # bytes per consume queue file (300,000 entries of 20 bytes)
    max_hash_slot_num: int = 5_000_000  # hash slots per index file
    max_index_num: int = 20_000_000  # entries per index file
    message_index_enable: bool = True  # index keys and UNIQ_KEYs (lookups by key and id, the exactly-once sink)
    max_message_size: int = 4 * 1024 * 1024  # largest message body accepted, in bytes
    # flush
    flush_disk_type: str = ASYNC_FLUSH  # ASYNC_FLUSH (every flushIntervalCommitLog) or SYNC_FLUSH (a put waits)
    flush_interval_commit_log: int = 500  # ms between commitlog flushes (ASYNC_FLUSH)
    flush_interval_consume_queue: int = 1000  # ms between flushes of queues and index (and checkpoints)
    sync_flush_timeout: int = 5000  # ms; also how long a SYNC_MASTER put waits for its slave
    # replication (RocketMQ's HA keys): brokerId 0 is the master of its brokerName, >0 a slave
    broker_role: str = ASYNC_MASTER  # ASYNC_MASTER, SYNC_MASTER or SLAVE
    ha_listen_port: int = 0  # where a master serves its slaves; 0: listenPort + 1
    ha_master_address: str = ""  # a slave's host:port of its master's HA service, fixed ('': as the NameServer says)
    ha_send_heartbeat_interval: int = 5000  # ms: a slave reports its offset (and a master pings) at least this often
    ha_housekeeping_interval: int = 20_000  # ms: a slave that read nothing from its master this long reconnects
    ha_transfer_batch_size: int = 32 * 1024  # bytes of commitlog per transfer to a slave
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024  # bytes: a slave further behind is not in sync (SYNC_MASTER)
    # reads from slaves: with slaveReadEnable, a pull reading further behind the commitlog's end than
    # accessMessageInMemoryMaxRatio percent of RAM (totalPhysicalMemorySize; 0: this machine's) is told
    # to pull from the slave (suggestWhichBrokerId 1), and a caught-up reader back to the master (0)
    slave_read_enable: bool = False  # send slow readers to the slave (suggestWhichBrokerId)
    access_message_in_memory_max_ratio: int = 40  # percent of RAM a read may be behind and still count as in memory
    total_physical_memory_size: int = 0  # bytes; no RocketMQ key (it reads the OS's figure): lets a test set it
    # a slave's copy of its master's topics, groups and offsets (RocketMQ's SlaveSynchronize)
    slave_synchronize_interval: int = 10_000  # ms: a slave copies its master's metadata this often (RocketMQ: 10 s)
    # SQL92 subscriptions (expressionType=SQL92 on heartbeats and pulls) are served only with this on,
    # as in RocketMQ; off, they are refused with SYSTEM_ERROR
    enable_property_filter: bool = False  # serve SQL92 subscriptions
    # controller mode (RocketMQ 5): register with the replication controllers (controllerAddr, ';'-separated),
    # heartbeat to each every brokerHeartbeatInterval ms (dead after controllerHeartBeatTimeoutMills of
    # silence) and ask for the set's master every syncBrokerMetadataPeriod ms (the fallback for the
    # controller's push of each election, NOTIFY_BROKER_ROLE_CHANGED)
    enable_controller_mode: bool = False  # register with the replication controllers and follow their elections
    controller_addr: str = ""  # the controllers (or a NameServer embedding one), ';'-separated
    controller_heart_beat_timeout_mills: int = 10_000  # ms of silence before the controller takes this broker for dead
    broker_heartbeat_interval: int = 1000  # ms between heartbeats to every controller
    sync_broker_metadata_period: int = 5000  # ms between asks for the set's master (the fallback for a lost notify)
    # a master acknowledges writes only while a heartbeat answered by the leading controller was sent less than
    # masterLeaseMills ago; it must end a heartbeat interval before the controller deems the broker dead
    # (masterLeaseMills + brokerHeartbeatInterval <= controllerHeartBeatTimeoutMills): see docs/architecture.md
    master_lease_mills: int = 0  # ms; 0: controllerHeartBeatTimeoutMills - 2 * brokerHeartbeatInterval
    # the master keeps the SyncStateSet: a slave out of it once its oldest unacknowledged byte is older than
    # haMaxTimeSlaveNotCatchup ms (or it is gone that long), back in once it has everything; with
    # allAckInSyncStateSet a put is acknowledged once every member has it, else once minInSyncReplicas
    # replicas (the master included) have it (RocketMQ 5's keys and defaults)
    ha_max_time_slave_not_catchup: int = 15_000  # ms a slave may lag (or be gone) before it leaves the set
    all_ack_in_sync_state_set: bool = False  # a put waits for every SyncStateSet member
    min_in_sync_replicas: int = 1  # replicas (the master included) a put waits for, without allAckInSyncStateSet
    # transactional messages (RocketMQ's keys and defaults): a half message unresolved after
    # transactionTimeOut ms is checked back every transactionCheckInterval ms, at most transactionCheckMax
    # times, then discarded; rejectTransactionMessage refuses prepared sends
    transaction_time_out: int = 6000  # ms before an unresolved half message is first checked back
    transaction_check_interval: int = 60_000  # ms between check-back rounds
    transaction_check_max: int = 15  # check-backs before a half message is discarded
    reject_transaction_message: bool = False  # refuse prepared (transactional) sends with NO_PERMISSION
    # recovery
    check_crc_on_recover: bool = True  # check body CRCs when recovering
    check_crc_on_recover_files: int = 3  # start-up checks the units of the last N commitlog files (0: none)
    # retention
    file_reserved_time: int = 72  # hours a commitlog file is kept after its last write
    delete_when: str = "04"  # hours of day expired files are deleted at, ';'-separated
    disk_max_used_space_ratio: int = 75  # percent: above it, expired files go at once
    disk_space_clean_forcibly_ratio: float = 0.85  # above it, delete oldest files even if not expired
    disk_space_warning_level_ratio: float = 0.90  # above it, writes are refused
    clean_resource_interval: int = 10_000  # ms between retention runs
    # past diskSpaceCleanForciblyRatio, delete messages consumer groups have not consumed (else refuse writes)
    clean_unconsumed_forcibly: bool = False  # under disk pressure, delete messages groups have not consumed
    delete_files_batch_max: int = 10  # commitlog files deleted per retention run at most
    # tiered storage: with it on, retention keeps every commitlog file holding messages not yet archived
    tiered_store_enable: bool = False  # keep commitlog files holding messages not yet archived
    tiered_store_root: str = ""  # archive root (a local path or any filesystem pyarrow opens)
    tiered_delete_unarchived_forcibly: bool = False  # under disk pressure, delete unarchived files anyway
    # topics
    auto_create_topic_enable: bool = True  # create an unknown topic on its first send (through TBW102)
    default_topic_queue_nums: int = 4  # queues of a topic created on its first send
    # consumer groups: a queue lock (LOCK_BATCH_MQ) not renewed within this many ms is free to another member
    # (RocketMQ's rocketmq.broker.rebalance.lockMaxLiveTime system property)
    rebalance_lock_max_live_time: int = 60_000  # ms a queue lock lives without renewal
    # pop consumption: one group does not pop and pull one queue at once; a queue left alone this long (and
    # without popped messages in flight) may be used by the other mode
    pop_mode_switch_millis: int = 30_000  # ms a queue stays with pop (or pull) after its group's last use
    # delay levels of messages sent with the DELAY property (level 1 first), and how often the schedule
    # service's per-level progress (delayOffset.json) is written (ms)
    message_delay_level: str = DEFAULT_DELAY_LEVELS  # the delay of each level, level 1 first
    flush_delay_offset_interval: int = 10_000  # ms between writes of config/delayOffset.json
    # timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS; RocketMQ 5's keys and defaults): due
    # times are rounded up to timerPrecisionMs, at most timerMaxDelaySec ahead; the timer log's file size, and
    # how often its progress (config/timercheck.json) is written, in ms
    timer_wheel_enable: bool = True  # accept timer messages (off: refused with MESSAGE_ILLEGAL)
    timer_precision_ms: int = 1000  # ms per wheel slot: due times are rounded up to it
    timer_max_delay_sec: int = 3 * 24 * 3600  # seconds ahead a timer may be due at most
    mapped_file_size_timer_log: int = 100 * 1024 * 1024  # bytes per timer log file
    timer_flush_interval_ms: int = 1000  # ms between writes of config/timercheck.json
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_security(self.listen_address)
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ConfigError(f"flushDiskType={self.flush_disk_type}: use {ASYNC_FLUSH} or {SYNC_FLUSH}")
        if self.maped_file_size_commit_log < 4096:
            raise ConfigError("mapedFileSizeCommitLog must be at least 4096 bytes")
        if self.maped_file_size_consume_queue % 20 or self.maped_file_size_consume_queue <= 0:
            raise ConfigError("mapedFileSizeConsumeQueue must be a positive multiple of 20 (the entry size)")
        if self.max_message_size + 4096 > self.maped_file_size_commit_log:
            raise ConfigError(
                f"maxMessageSize={self.max_message_size} cannot fit a commitlog file of "
                f"{self.maped_file_size_commit_log} bytes: raise mapedFileSizeCommitLog or lower maxMessageSize"
            )
        for hour in self.delete_when.split(";"):
            if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
                raise ConfigError(f"deleteWhen={self.delete_when!r}: give hours 0-23 separated by ';'")
        if self.rebalance_lock_max_live_time <= 0:
            raise ConfigError(f"rebalanceLockMaxLiveTime={self.rebalance_lock_max_live_time}: give the lock expiry in "
                              f"ms, above 0")
        if not 0 < self.disk_space_clean_forcibly_ratio <= self.disk_space_warning_level_ratio <= 1:
            raise ConfigError("need 0 < diskSpaceCleanForciblyRatio <= diskSpaceWarningLevelRatio <= 1")
        self._check_replication()
        self._check_delay_levels()
        self._check_timer()
        for key, name in (("brokerName", self.broker_name), ("brokerClusterName", self.broker_cluster_name)):
            try:  # each becomes a topic of this broker, and a name the NameServer checks
                validate_broker_name(name)
            except InvalidNameError as e:
                raise ConfigError(f"{key}={name!r}: {e}") from None

    def _check_delay_levels(self) -> None:
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as e:
            raise ConfigError(f"messageDelayLevel={self.message_delay_level!r}: {e}; give delays like \"1s 5s 1m 2h\" "
                              "(level 1 first)") from None
        if self.flush_delay_offset_interval <= 0:
            raise ConfigError(f"flushDelayOffsetInterval={self.flush_delay_offset_interval}: give a positive number "
                              "of ms")

    def _check_timer(self) -> None:
        if self.timer_precision_ms <= 0 or self.timer_max_delay_sec <= 0 or self.timer_flush_interval_ms <= 0:
            raise ConfigError("timerPrecisionMs, timerMaxDelaySec and timerFlushIntervalMs must be positive")
        if self.timer_max_delay_sec * 1000 // self.timer_precision_ms > MAX_TIMER_SLOTS // 2:
            raise ConfigError(f"timerMaxDelaySec={self.timer_max_delay_sec} at "
                              f"timerPrecisionMs={self.timer_precision_ms} needs over {MAX_TIMER_SLOTS // 2} wheel "
                              "slots: raise the precision or lower the max delay")
        if self.mapped_file_size_timer_log <= 0 or self.mapped_file_size_timer_log % TIMER_LOG_RECORD_SIZE:
            raise ConfigError(f"mappedFileSizeTimerLog={self.mapped_file_size_timer_log}: give a positive multiple "
                              f"of {TIMER_LOG_RECORD_SIZE} (the timer log's record size)")

    def _check_replication(self) -> None:
        if self.broker_role not in BROKER_ROLES:
            raise ConfigError(f"brokerRole={self.broker_role}: use one of {', '.join(BROKER_ROLES)}")
        if self.enable_controller_mode:
            if self.broker_id <= MASTER_ID:
                raise ConfigError(f"enableControllerMode=true needs brokerId > 0 (got {self.broker_id}): it is this "
                                  "replica's id at the controller, and 0 is the id of whichever replica is master")
        elif self.broker_role == SLAVE and self.broker_id <= MASTER_ID:
            raise ConfigError(f"brokerRole=SLAVE needs brokerId > 0 (got {self.broker_id}): 0 is the master's id")
        elif self.broker_role != SLAVE and self.broker_id != MASTER_ID:
            raise ConfigError(f"brokerRole={self.broker_role} needs brokerId=0 (got {self.broker_id}): "
                              "a broker with another id is a slave (brokerRole=SLAVE)")
        if not 0 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort={self.ha_listen_port}: give 1-65535 (0: listenPort + 1)")
        if self.ha_send_heartbeat_interval <= 0 or self.ha_transfer_batch_size <= 0 or self.ha_max_gap_not_in_sync <= 0:
            raise ConfigError("haSendHeartbeatInterval, haTransferBatchSize and haMaxGapNotInSync must be positive")
        if self.ha_master_address and (self.enable_controller_mode or not self.ha_master_address.rpartition(":")[2]
                                       .isdigit()):
            raise ConfigError(f"haMasterAddress={self.ha_master_address}: give host:port (a slave's fixed master "
                              "HA address), and not with enableControllerMode (the controller names the master)")
        if self.ha_housekeeping_interval <= self.ha_send_heartbeat_interval:
            raise ConfigError(f"haHousekeepingInterval={self.ha_housekeeping_interval} must exceed "
                              f"haSendHeartbeatInterval={self.ha_send_heartbeat_interval}: an idle master sends a "
                              "heartbeat that often, and a slave hearing nothing for haHousekeepingInterval reconnects")
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError(f"accessMessageInMemoryMaxRatio={self.access_message_in_memory_max_ratio}: give a "
                              "percentage of RAM, 0-100")
        if self.total_physical_memory_size < 0:
            raise ConfigError(f"totalPhysicalMemorySize={self.total_physical_memory_size}: give bytes (0: the "
                              "machine's RAM)")
        if self.enable_controller_mode and not split_addresses(self.controller_addr):
            raise ConfigError("enableControllerMode=true needs controllerAddr: the controllers' addresses, "
                              "';'-separated (a NameServer's with enableControllerInNamesrv)")
        if min(self.controller_heart_beat_timeout_mills, self.broker_heartbeat_interval,
               self.sync_broker_metadata_period) <= 0:
            raise ConfigError("controllerHeartBeatTimeoutMills, brokerHeartbeatInterval and syncBrokerMetadataPeriod "
                              "must be positive (ms)")
        if self.enable_controller_mode:
            self._check_master_lease()
        if self.ha_max_time_slave_not_catchup <= 0 or self.min_in_sync_replicas < 1:
            raise ConfigError("haMaxTimeSlaveNotCatchup must be positive (ms) and minInSyncReplicas at least 1 (the "
                              "master counts)")
        if self.slave_synchronize_interval <= 0:
            raise ConfigError(f"slaveSynchronizeInterval={self.slave_synchronize_interval}: give a positive number "
                              "of ms (how often a slave copies its master's topics, groups and offsets)")

    @property
    def root(self) -> Path:
        return Path(self.store_path_root_dir)

    @property
    def ha_port(self) -> int:
        """The replication port: haListenPort, or listenPort + 1 when that is 0 (RocketMQ's 10912)."""
        return self.ha_listen_port or self.listen_port + 1

    @property
    def is_slave(self) -> bool:
        return self.broker_role == SLAVE

    @property
    def registered_id(self) -> int:
        """The id this broker registers with the NameServers: its brokerId, except that in controller
        mode (where brokerId is the replica's id at the controller) the current master registers as 0."""
        return MASTER_ID if self.enable_controller_mode and not self.is_slave else self.broker_id

    @property
    def master_lease_ms(self) -> int:
        """The master lease (controller mode): masterLeaseMills, or when 0 controllerHeartBeatTimeoutMills less
        two heartbeat intervals (see ``broker/replication/master_lease.py``)."""
        return self.master_lease_mills or self.controller_heart_beat_timeout_mills - 2 * self.broker_heartbeat_interval

    def _check_master_lease(self) -> None:
        """The lease must end a heartbeat interval before the controller deems this broker dead, and outlast
        the interval between two heartbeats."""
        lease, timeout, interval = (self.master_lease_ms, self.controller_heart_beat_timeout_mills,
                                    self.broker_heartbeat_interval)
        if lease + interval > timeout:
            raise ConfigError(f"masterLeaseMills={lease} must end at least one brokerHeartbeatInterval ({interval} ms) "
                              f"before controllerHeartBeatTimeoutMills ({timeout} ms), or an isolated master could "
                              f"still acknowledge writes when its successor is elected: give masterLeaseMills <= "
                              f"{timeout - interval}, or raise controllerHeartBeatTimeoutMills")
        if lease <= interval:
            raise ConfigError(f"masterLeaseMills={lease} must be longer than brokerHeartbeatInterval ({interval} ms), "
                              f"or the master stops acknowledging between two heartbeats: raise "
                              f"controllerHeartBeatTimeoutMills to more than {3 * interval} ms (masterLeaseMills=0) or "
                              f"lower brokerHeartbeatInterval")

    @property
    def in_memory_read_bytes(self) -> int:
        """How far behind the commitlog's end a read may be and still count as served from memory
        (RocketMQ: TOTAL_PHYSICAL_MEMORY_SIZE * accessMessageInMemoryMaxRatio / 100)."""
        total = self.total_physical_memory_size or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total * self.access_message_in_memory_max_ratio // 100


# lazy (made at the first instance, ``lazy_dataclass.py``): ~1.5 ms of every broker's start otherwise
@lazy_dataclass(frozen=True)
class NamesrvConfig(LazyDataclass, ServerChannelConfig, SecurityConfig):
    """What a NameServer process reads from conf/namesrv.conf.

    RocketMQ 4.x hard-codes the scan (10 s) and the expiry (120 s); they are keys here so tests
    can watch an eviction in seconds.
    """

    listen_address: str = "127.0.0.1"  # the address the NameServer binds (0.0.0.0: every interface)
    listen_port: int = 9876  # the remoting port brokers and clients talk to (0 picks a free port)
    scan_not_active_broker_interval: int = 10_000  # ms between scans of the broker live table
    broker_channel_expired_time: int = 120_000  # ms of silence after which a broker is evicted
    order_message_enable: bool = False  # attach ORDER_TOPIC_CONFIG KV entries to routes, as RocketMQ does
    kv_config_path: str = ""  # kvConfig.json; empty keeps KV config in memory only
    # run the replication controller in this process, on this port (RocketMQ 5's key); the file's
    # controller keys (ControllerConfig's) configure it
    enable_controller_in_namesrv: bool = False  # serve the replication controller too
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_security(self.listen_address)
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort={self.listen_port}: give 0-65535 (0 picks a free port)")
        if self.scan_not_active_broker_interval <= 0 or self.broker_channel_expired_time <= 0:
            raise ConfigError("scanNotActiveBrokerInterval and brokerChannelExpiredTime must be positive (ms)")


CONTROLLER_TYPE_FILE = "file"
CONTROLLER_TYPE_ZOOKEEPER = "zookeeper"
CONTROLLER_TYPES = (CONTROLLER_TYPE_ZOOKEEPER, CONTROLLER_TYPE_FILE)
_ZK_MEMBER = re.compile(r"[^\s:/,]+:(\d{1,5})")  # host:port (no chroot: zookeeperRootPath is the root)
_ZK_PATH = re.compile(r"(/(?!\.\.?(/|$))[^/\s]+)+")


def _zookeeper_member(text: str) -> bool:
    m = _ZK_MEMBER.fullmatch(text.strip())
    return m is not None and 0 < int(m[1]) <= 65535


# lazy, as NamesrvConfig: only the processes that run a controller make it
@lazy_dataclass(frozen=True)
class ControllerConfig(LazyDataclass, ServerChannelConfig, SecurityConfig):
    """What a replication controller reads (``spark-mq controller -c controller.conf``, or the controller
    keys of namesrv.conf with ``enableControllerInNamesrv``); RocketMQ 5's ControllerConfig keys.

    A broker that sends no ``heartbeatTimeoutMills`` in its BROKER_HEARTBEAT counts as dead after
    ``controllerHeartBeatTimeoutMills`` of silence (RocketMQ's broker-side key and default); the live
    table is scanned every ``scanNotActiveBrokerInterval``, and a set whose master is dead gets a new
    one (up to ``electMasterMaxRetryCount`` tries). ``enableElectUncleanMaster`` lets the election take
    a replica outside the SyncStateSet when none inside is alive: acknowledged messages may be lost.

    ``controllerType`` (RocketMQ's key choosing the controller's consensus, DLedger or jRaft there)
    chooses where decisions and leadership live: ``file`` is one JSON file in ``controllerStorePath``
    and one controller only (the one embedded in the NameServer always uses it); ``zookeeper`` is a
    ZooKeeper ensemble (``zookeeperConnectString``, under ``zookeeperRootPath``), shared by controllers
    that elect one leader and replace a dead one after ``zookeeperSessionTimeoutMills``.
    """

    listen_address: str = "127.0.0.1"  # the address the controller binds (0.0.0.0: every interface)
    listen_port: int = 9878  # the remoting port brokers and admin tools talk to (0 picks a free port)
    controller_type: str = CONTROLLER_TYPE_FILE  # file (one controller) or zookeeper (controllers that fail over)
    controller_store_path: str = "./data/controller"  # controllerType=file: the state file's directory
    zookeeper_connect_string: str = "127.0.0.1:2181"  # host:port of every ensemble member, comma-separated
    zookeeper_root_path: str = "/spark_mq/controller"  # the znode the controllers' records and election live under
    # zookeeperSessionTimeoutMills stays well under a failover's ~5 s; ZooKeeper raises a session timeout to
    # 2 x its tickTime at least (tickTime=1000 or less keeps 3000)
    zookeeper_session_timeout_mills: int = 3000  # ms: a dead leader is replaced after about this long
    # brokers' liveness and elections
    scan_not_active_broker_interval: int = 5000  # ms between scans for dead brokers (and masters to elect)
    controller_heart_beat_timeout_mills: int = 10_000  # ms of heartbeat silence after which a broker is dead
    elect_master_max_retry_count: int = 3  # tries to elect a master for a set whose master died
    enable_elect_unclean_master: bool = False  # elect outside the SyncStateSet when no member lives (may lose messages)
    # push each election to the set's live brokers (NOTIFY_BROKER_ROLE_CHANGED) instead of leaving them to
    # learn it at their next syncBrokerMetadataPeriod poll (which stays the fallback)
    notify_broker_role_changed: bool = True  # push each election to the set's live brokers
    extra: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_security(self.listen_address)
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort={self.listen_port}: give 0-65535 (0 picks a free port)")
        if self.scan_not_active_broker_interval <= 0 or self.controller_heart_beat_timeout_mills <= 0:
            raise ConfigError("scanNotActiveBrokerInterval and controllerHeartBeatTimeoutMills must be positive (ms)")
        if self.elect_master_max_retry_count < 1:
            raise ConfigError(f"electMasterMaxRetryCount={self.elect_master_max_retry_count}: give at least 1")
        if self.controller_type not in CONTROLLER_TYPES:
            raise ConfigError(f"controllerType={self.controller_type}: give {' or '.join(CONTROLLER_TYPES)} "
                              "(zookeeper: controllers sharing their state and failing over; file: one controller)")
        if not self.controller_store_path:
            raise ConfigError("controllerStorePath is empty: give the directory of the controller's state")
        if not all(_zookeeper_member(m) for m in self.zookeeper_connect_string.split(",")):
            raise ConfigError(f"zookeeperConnectString={self.zookeeper_connect_string!r}: give every ZooKeeper "
                              "member as host:port, comma-separated (e.g. 10.0.0.1:2181,10.0.0.2:2181)")
        if not _ZK_PATH.fullmatch(self.zookeeper_root_path):
            raise ConfigError(f"zookeeperRootPath={self.zookeeper_root_path!r}: give an absolute znode path below /, "
                              "with no empty, '.' or '..' part and no trailing '/' (e.g. /spark_mq/controller)")
        if self.zookeeper_session_timeout_mills <= 0:
            raise ConfigError(f"zookeeperSessionTimeoutMills={self.zookeeper_session_timeout_mills}: give a positive "
                              "number of ms (a dead controller leader is replaced after about this long)")


C = TypeVar("C")


def split_addresses(text: str) -> list[str]:
    """A ';'-separated address list (namesrvAddr, the namesrv option), blanks dropped."""
    return [a.strip() for a in text.split(";") if a.strip()]


def camel_to_snake(name: str) -> str:
    """``checkCRCOnRecover`` → ``check_crc_on_recover``, ``brokerIP1`` → ``broker_ip1``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def field_name(key: str) -> str:
    """The field a properties key sets (``flushDiskType`` → ``flush_disk_type``, ``tls.server.mode`` →
    ``tls_server_mode``)."""
    return DOTTED_FIELDS.get(key) or camel_to_snake(key)


def config_key(name: str) -> str:
    """The properties key of field ``name``: its camelCase name, or RocketMQ's dotted TLS key."""
    return DOTTED_KEYS.get(name) or snake_to_camel(name)


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(_ACRONYMS.get(p, p[:1].upper() + p[1:]) for p in rest)


_ACRONYMS = {"crc": "CRC", "ip1": "IP1"}


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines; ``#`` and ``!`` start comments, as in java.util.Properties."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"line {lineno}: expected key=value, got {raw!r}")
        out[key.strip()] = value.strip()
    return out


# a field's annotation (a string: ``from __future__ import annotations``) to the type its value is parsed as,
# read without ``get_type_hints`` (which evaluates every annotation: ~1 ms of every start for ~120 fields)
_SCALARS: dict[str, type] = {"bool": bool, "int": int, "float": float}


def _convert(key: str, value: str, typ: type) -> Any:
    try:
        if typ is bool:
            low = value.lower()
            if low not in ("true", "false"):
                raise ValueError
            return low == "true"
        if typ is int:
            return int(value)
        if typ is float:
            return float(value)
        return value
    except ValueError:
        raise ConfigError(f"{key}={value!r}: expected {typ.__name__}") from None


def config_from_properties(cls: type[C], props: dict[str, str], **overrides: Any) -> C:
    """Build ``cls`` from camelCase properties; unknown keys raise naming the key."""
    types = {f.name: _SCALARS.get(f.type, str) for f in dataclasses.fields(realize(cls))}  # type: ignore[arg-type]
    fields = types.keys() - {"extra"}
    kwargs: dict[str, Any] = {}
    for key, value in props.items():
        name = field_name(key)
        if name not in fields:
            # lazy import: only for this message, not on every start's import path
            import difflib

            known = sorted(config_key(f) for f in fields)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"unknown config key {key!r}: {hint}")
        kwargs[name] = _convert(key, value, types[name])
    kwargs.update(overrides)
    return cls(**kwargs)


def load_config(cls: type[C], path: str | Path, **overrides: Any) -> C:
    """Read a properties file into ``cls``; overrides (snake_case) win over the file."""
    p = Path(path)
    try:
        return acl_file_beside(config_from_properties(cls, _read_properties(p), **overrides), p)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def acl_file_beside(config: C, path: Path) -> C:
    """``config`` with ACL on and no ``aclFile`` reads plain_acl.yml beside its config file ``path`` (as
    RocketMQ reads $ROCKETMQ_HOME/conf/plain_acl.yml)."""
    if isinstance(config, SecurityConfig) and config.acl_enable and not config.acl_file:
        return dataclasses.replace(config, acl_file=str(path.resolve().parent / PLAIN_ACL_FILE))  # type: ignore[type-var]
    return config


def _read_properties(p: Path) -> dict[str, str]:
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    return parse_properties(text)


def load_namesrv_config(path: str | Path | None, **overrides: Any) -> tuple[NamesrvConfig, ControllerConfig | None]:
    """namesrv.conf: the NameServer's keys, and with ``enableControllerInNamesrv=true`` the embedded
    controller's (ControllerConfig's keys in the same file, as RocketMQ reads them); the controller
    shares the NameServer's address, port and ``scanNotActiveBrokerInterval``. A key neither knows is an
    error naming it."""
    props = _read_properties(Path(path)) if path else {}
    namesrv_fields = {f.name for f in dataclasses.fields(realize(NamesrvConfig))}
    own = {k: v for k, v in props.items() if field_name(k) in namesrv_fields}
    try:
        namesrv = config_from_properties(NamesrvConfig, own, **overrides)
        if path:
            namesrv = acl_file_beside(namesrv, Path(path))
        rest = {k: v for k, v in props.items() if k not in own}
        if not namesrv.enable_controller_in_namesrv:
            config_from_properties(NamesrvConfig, rest)  # names the first unknown key
            return namesrv, None
        shared = {f: getattr(namesrv, f) for f in (*(f.name for f in dataclasses.fields(ServerChannelConfig)),
                                                    *(f.name for f in dataclasses.fields(SecurityConfig)),
                                                    "listen_address", "listen_port")}
        if "scanNotActiveBrokerInterval" in own:  # one key, both scans
            shared["scan_not_active_broker_interval"] = namesrv.scan_not_active_broker_interval
        controller = config_from_properties(ControllerConfig, rest, **shared)
        if controller.controller_type != CONTROLLER_TYPE_FILE:
            raise ConfigError(f"controllerType={controller.controller_type}: the controller embedded in the "
                              f"NameServer keeps its state in controllerStorePath only (controllerType="
                              f"{CONTROLLER_TYPE_FILE}); run `spark-mq controller` processes for controllers "
                              "that share ZooKeeper and fail over")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None
    return namesrv, controller
