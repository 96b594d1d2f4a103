"""The NameServer's route registry (RocketMQ's RouteInfoManager), with no network in it.

Tables, as RocketMQ keeps them:

* cluster name → broker names
* broker name → BrokerData (cluster, broker name, broker id → address; id 0 is the master)
* topic → broker name → QueueData (read/write queue counts, perm, topic sys flag)
* broker address → BrokerLive (last heartbeat, topic-config DataVersion, HA address, connection)

A broker registers at start and re-registers every 30 s (its heartbeat); only a master's
topic configs make queue data, and only when its DataVersion changed or it registers first.
``scan_not_active_brokers`` (run every 10 s) evicts brokers silent for the expiry (120 s), and
a broker whose connection closes is evicted at once: removing a broker's last address removes
its name from the cluster and its queue data from every topic, dropping topics left empty.

Time comes from an injected clock (seconds, like ``time.time``) so tests never sleep. Not
thread-safe: the NameServer calls it from its one event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from spark_mq.common.config import MASTER_ID
from spark_mq.common.perm import PERM_WRITE
from spark_mq.remoting.bodies import BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfig, TopicRouteData

log = logging.getLogger(__name__)


@dataclass
class BrokerLive:
    last_update: float  # clock seconds
    data_version: DataVersion
    ha_server_addr: str
    conn: object | None  # the connection it registered on; closed on eviction


@dataclass(frozen=True)
class RegisterResult:
    """For a slave: its master's address and HA address (empty for a master)."""

    ha_server_addr: str = ""
    master_addr: str = ""


class RouteInfoManager:
    """Brokers, clusters, topics and broker liveness; see the module docstring for the rules."""

    def __init__(self, clock: Callable[[], float] = time.time, broker_expiry: float = 120.0,
                 on_evict: Callable[[str, object | None], None] | None = None) -> None:
        self.clock = clock
        self.broker_expiry = broker_expiry
        self._on_evict = on_evict
        self.cluster_table: dict[str, set[str]] = {}
        self.broker_table: dict[str, BrokerData] = {}
        self.topic_table: dict[str, dict[str, QueueData]] = {}
        self.live_table: dict[str, BrokerLive] = {}

    # -- registration -------------------------------------------------------------------------

    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, data_version: DataVersion,
                        topic_configs: Mapping[str, TopicConfig] | None, conn: object | None = None) -> RegisterResult:
        """Record a broker (first registration or heartbeat) and, for a master, its topics."""
        self.cluster_table.setdefault(cluster, set()).add(broker_name)
        data = self.broker_table.get(broker_name)
        first = data is None
        if data is None:
            data = self.broker_table[broker_name] = BrokerData(cluster, broker_name)
        # a slave turned master re-registers the same address under id 0: one id per address
        for bid in [b for b, a in data.broker_addrs.items() if a == broker_addr and b != broker_id]:
            del data.broker_addrs[bid]
        old = data.broker_addrs.get(broker_id)
        data.broker_addrs[broker_id] = broker_addr
        first = first or old is None
        if topic_configs is not None and broker_id == MASTER_ID:
            if first or self.topic_config_changed(broker_addr, data_version):
                for tc in topic_configs.values():
                    self.topic_table.setdefault(tc.topic_name, {})[broker_name] = QueueData(
                        broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        if broker_addr not in self.live_table:
            log.info("new broker registered: %s %s id=%d at %s", cluster, broker_name, broker_id, broker_addr)
        self.live_table[broker_addr] = BrokerLive(self.clock(), data_version, ha_server_addr, conn)
        if broker_id != MASTER_ID:
            master = data.broker_addrs.get(MASTER_ID)
            live = self.live_table.get(master) if master else None
            if master and live is not None:
                return RegisterResult(live.ha_server_addr, master)
        return RegisterResult()

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """A broker leaving cleanly (shutdown)."""
        self.live_table.pop(broker_addr, None)
        data = self.broker_table.get(broker_name)
        if data is None:
            return
        data.broker_addrs.pop(broker_id, None)
        log.info("broker unregistered: %s %s id=%d at %s", cluster, broker_name, broker_id, broker_addr)
        if not data.broker_addrs:
            del self.broker_table[broker_name]
            names = self.cluster_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_table[cluster]
            self._remove_topics_of(broker_name)

    def topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        live = self.live_table.get(broker_addr)
        return live is None or live.data_version != data_version

    def data_version_of(self, broker_addr: str) -> DataVersion | None:
        live = self.live_table.get(broker_addr)
        return live.data_version if live else None

    def touch(self, broker_addr: str) -> None:
        """Count a heartbeat without re-registering (QUERY_DATA_VERSION found nothing changed)."""
        live = self.live_table.get(broker_addr)
        if live is not None:
            live.last_update = self.clock()

    # -- liveness -----------------------------------------------------------------------------

    def scan_not_active_brokers(self) -> list[str]:
        """Evict every broker whose last registration is older than the expiry; their addresses."""
        now = self.clock()
        expired = [addr for addr, live in self.live_table.items() if live.last_update + self.broker_expiry < now]
        for addr in expired:
            live = self.live_table[addr]
            log.warning("broker %s silent for %.0f s (expiry %.0f s): evicting", addr, now - live.last_update,
                        self.broker_expiry)
            self.on_broker_gone(addr)
            if self._on_evict is not None:
                self._on_evict(addr, live.conn)
        return expired

    def on_connection_closed(self, conn: object) -> list[str]:
        """A connection closed: evict the brokers that registered on it; their addresses."""
        gone = [addr for addr, live in self.live_table.items() if live.conn is conn]
        for addr in gone:
            log.info("connection of broker %s closed: evicting", addr)
            self.on_broker_gone(addr)
        return gone

    def on_broker_gone(self, broker_addr: str) -> None:
        """Forget one broker address everywhere (RocketMQ's onChannelDestroy)."""
        self.live_table.pop(broker_addr, None)
        for name, data in list(self.broker_table.items()):
            ids = [b for b, a in data.broker_addrs.items() if a == broker_addr]
            if not ids:
                continue
            for bid in ids:
                del data.broker_addrs[bid]
            if not data.broker_addrs:
                del self.broker_table[name]
                for cluster, names in list(self.cluster_table.items()):
                    names.discard(name)
                    if not names:
                        del self.cluster_table[cluster]
                self._remove_topics_of(name)
            break

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic, queues in list(self.topic_table.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_table[topic]

    # -- queries ------------------------------------------------------------------------------

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """A copy of the topic's queues and the brokers that hold them; None if either is missing."""
        queues = self.topic_table.get(topic)
        if not queues:
            return None
        brokers = [_copy(d) for name in sorted(queues) if (d := self.broker_table.get(name)) is not None]
        if not brokers:
            return None
        qds = [QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_syn_flag)
               for _, q in sorted(queues.items())]
        return TopicRouteData(qds, brokers)

    def cluster_info(self) -> ClusterInfo:
        """A copy of the broker and cluster tables, sorted by name."""
        return ClusterInfo({name: _copy(d) for name, d in sorted(self.broker_table.items())},
                           {c: sorted(names) for c, names in sorted(self.cluster_table.items())})

    def all_topics(self) -> list[str]:
        return sorted(self.topic_table)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_table.get(cluster, set())
        return sorted(t for t, queues in self.topic_table.items() if names & queues.keys())

    def delete_topic(self, topic: str) -> None:
        self.topic_table.pop(topic, None)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write permission of ``broker_name`` on every topic; how many topics."""
        count = 0
        for queues in self.topic_table.values():
            q = queues.get(broker_name)
            if q is not None:
                q.perm &= ~PERM_WRITE
                count += 1
        return count


def _copy(data: BrokerData) -> BrokerData:
    """A snapshot of ``data`` with its addresses in broker-id order (master first)."""
    return BrokerData(data.cluster, data.broker_name, dict(sorted(data.broker_addrs.items())))
