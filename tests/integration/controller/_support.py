"""Talking to a real controller process the way a broker does: RocketMQ's controller requests as
remoting commands, and brokers that heartbeat from a background thread until told to stop; and real
controller-mode brokers: a ``ReplicaSet`` of three and what the failover tests check of it (the route,
replicas caught up, byte-identical commitlogs by the independent reader)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from integration.ha.commitlog_files import Commitlog, read_commitlog
from servers import Broker, ServerProcess, unique, wait_until

from spark_mq.remoting.bodies import ElectMasterResponseBody, SyncStateSet
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand
from spark_mq.remoting.headers import (
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)

CONTROLLER_READY = "spark-mq controller listening on "
CLUSTER = "DefaultCluster"
HEARTBEAT_TIMEOUT_MS = 2000  # the brokers' controllerHeartBeatTimeoutMills in these tests
HEARTBEAT_EVERY_S = 0.3
BROKER_FILES = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\n"
# the real brokers': a role switch restarts a broker's parts, well within it
BROKER_HEARTBEAT_TIMEOUT_MS = 4000
TIMEOUT_S = 60
# the controller's conf: scan often, so an election follows a death within about a heartbeat timeout
FAST_CONF = f"scanNotActiveBrokerInterval=200\ncontrollerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\n"


ZOOKEEPER_SESSION_MS = 2000  # controllers on ZooKeeper: a SIGKILLed leader is replaced after about this long


def zookeeper_conf(hosts: str, root: str) -> str:
    """Controller keys for a state in ZooKeeper at ``hosts`` under ``root``: controllers given the same share it."""
    return (f"controllerType=zookeeper\nzookeeperConnectString={hosts}\nzookeeperRootPath={root}\n"
            f"zookeeperSessionTimeoutMills={ZOOKEEPER_SESSION_MS}\n")


def start_controller(root: Path, conf: str = FAST_CONF, store: Path | None = None, port: int = 0,
                     launcher: list[str] | None = None) -> ServerProcess:
    """A ``spark-mq controller`` on ``port`` (0: a free one); with the default controllerType=file its state is
    in ``store`` (default root/store). ``launcher``: as ``ServerProcess``'s (another machine)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "controller.conf").write_text(conf)
    return ServerProcess(["controller", "-c", str(root / "controller.conf"), "--port", str(port),
                          "--store", str(store or root / "store")], root / "controller.log", CONTROLLER_READY,
                         launcher=launcher)


@dataclass
class ReplicaInfo:
    code: int
    master_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


class ControllerClient:
    """Blocking requests to one controller address."""

    def __init__(self, client: SyncRemotingClient, addr: str) -> None:
        self.client = client
        self.addr = addr

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        return self.client.invoke(self.addr, RemotingCommand.request(code, ext, body), timeout=10.0)

    def metadata(self) -> dict[str, str]:
        """GET_METADATA_INFO's answer: controllerLeaderAddress, isLeader."""
        return self.call(RequestCode.CONTROLLER_GET_METADATA_INFO).ext_fields

    def wait_leading(self) -> ControllerClient:
        """Once this controller leads (it campaigns after printing its address)."""
        wait_until(lambda: self.metadata().get("isLeader") == "true", timeout=30, what=f"{self.addr} leading")
        return self

    def register(self, broker_name: str, broker_id: int, address: str) -> RemotingCommand:
        return self.call(RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(
            cluster_name=CLUSTER, broker_name=broker_name, broker_id=broker_id, broker_address=address).to_ext_fields())

    def heartbeat(self, broker_name: str, broker_id: int, address: str, epoch: int = 0, max_offset: int = 0,
                  priority: int | None = None) -> RemotingCommand:
        return self.call(RequestCode.BROKER_HEARTBEAT, BrokerHeartbeatRequestHeader(
            cluster_name=CLUSTER, broker_addr=address, broker_name=broker_name, broker_id=broker_id, epoch=epoch,
            max_offset=max_offset, heartbeat_timeout_mills=HEARTBEAT_TIMEOUT_MS,
            election_priority=priority).to_ext_fields())

    def elect(self, broker_name: str, broker_id: int = -1, designate: bool = False) -> RemotingCommand:
        return self.call(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            cluster_name=CLUSTER, broker_name=broker_name, broker_id=broker_id,
            designate_elect=designate).to_ext_fields())

    def alter(self, broker_name: str, master_id: int, master_epoch: int, members: set[int],
              set_epoch: int) -> RemotingCommand:
        return self.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, AlterSyncStateSetRequestHeader(
            broker_name=broker_name, master_broker_id=master_id, master_epoch=master_epoch).to_ext_fields(),
            SyncStateSet(frozenset(members), set_epoch).to_json())

    def replica_info(self, broker_name: str) -> ReplicaInfo:
        r = self.call(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                      GetReplicaInfoRequestHeader(broker_name=broker_name).to_ext_fields())
        if r.code != ResponseCode.SUCCESS:
            return ReplicaInfo(r.code, None, None, None, frozenset(), 0)
        ext = r.ext_fields
        body = SyncStateSet.from_json(r.body)
        master = ext.get("masterBrokerId")
        return ReplicaInfo(r.code, int(master) if master is not None else None, ext.get("masterAddress"),
                           int(ext["masterEpoch"]), body.sync_state_set, body.sync_state_set_epoch)


def elected_set(response: RemotingCommand) -> frozenset[int]:
    return ElectMasterResponseBody.from_json(response.body).sync_state_set


@dataclass
class FakeBroker:
    """What the controller knows of a broker: its name, id, address and reported progress."""

    name: str
    broker_id: int
    address: str
    epoch: int = 0
    max_offset: int = 0
    priority: int | None = None


@dataclass
class Heartbeats:
    """Heartbeats every HEARTBEAT_EVERY_S for each broker in ``beating``, from one thread (one connection)."""

    controller: ControllerClient
    beating: dict[tuple[str, int], FakeBroker] = field(default_factory=dict)
    answers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="test-heartbeats")
        self._thread.start()

    def start(self, broker: FakeBroker) -> None:
        self.controller.heartbeat(broker.name, broker.broker_id, broker.address, broker.epoch, broker.max_offset,
                                  broker.priority)
        with self._lock:
            self.beating[(broker.name, broker.broker_id)] = broker

    def stop(self, broker: FakeBroker) -> None:
        with self._lock:
            self.beating.pop((broker.name, broker.broker_id), None)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY_S):
            with self._lock:
                brokers = list(self.beating.values())
            for b in brokers:
                try:
                    self.answers.append(self.controller.heartbeat(b.name, b.broker_id, b.address, b.epoch,
                                                                  b.max_offset, b.priority).code)
                except Exception:  # the controller may be down on purpose; the test watches the answers
                    self.answers.append(-1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# --- real controller-mode brokers --------------------------------------------------------------


def brokers_conf(controllers: str) -> str:
    """Controller-mode keys for brokers whose controllers are at ``controllers`` (';'-separated)."""
    return (f"{BROKER_FILES}enableControllerMode=true\ncontrollerAddr={controllers}\nbrokerHeartbeatInterval=300\n"
            f"syncBrokerMetadataPeriod=500\ncontrollerHeartBeatTimeoutMills={BROKER_HEARTBEAT_TIMEOUT_MS}\n"
            "slaveSynchronizeInterval=1000\n")


class ReplicaSet:
    """Three controller-mode brokers of one set: replica 1 configured master, 2 and 3 slaves. Their
    controllers are ``controllers`` (default: the NameServer's embedded one). Replica ``i`` adds
    ``replica_conf[i]`` to its conf and runs through ``launchers[i]`` (its own machine), when given."""

    def __init__(self, namesrv: str, root: Path, extra_conf: str = "", controllers: str | None = None, *,
                 replica_conf: dict[int, str] | None = None, launchers: dict[int, list[str]] | None = None) -> None:
        self.name = unique("failover")
        conf = brokers_conf(controllers or namesrv) + extra_conf
        self.brokers = {i: Broker(namesrv, root / f"replica{i}",
                                  f"{conf}brokerId={i}\nbrokerRole={'ASYNC_MASTER' if i == 1 else 'SLAVE'}\n"
                                  f"{(replica_conf or {}).get(i, '')}",
                                  broker_name=self.name, launcher=(launchers or {}).get(i)) for i in (1, 2, 3)}

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop_if_running()


def route(api, namesrv: str, topic: str, name: str) -> dict[int, str]:
    data = api.get_route_info(namesrv, topic)
    return next((dict(b.broker_addrs) for b in (data.broker_datas if data else []) if b.broker_name == name), {})


def sync_state_set(ctl: ControllerClient, rs: ReplicaSet) -> frozenset[int]:
    return ctl.replica_info(rs.name).sync_state_set


def started_with_a_topic(api, namesrv: str, rs: ReplicaSet) -> str:
    """Replica 1 elected and registered as id 0, a topic on it, the route listing every replica."""
    first = rs.brokers[1]
    wait_until(lambda: route(api, namesrv, "TBW102", rs.name).get(0) == first.addr, TIMEOUT_S,
               "replica 1 elected and registered as id 0")
    topic = unique("Failover")
    api.create_topic(first.addr, topic, 2, 2)
    wait_until(lambda: route(api, namesrv, topic, rs.name) == {0: first.addr, 2: rs.brokers[2].addr,
                                                               3: rs.brokers[3].addr}, TIMEOUT_S,
               "the route to list the master as 0 and both slaves by their ids")
    return topic


def caught_up(brokers: list[Broker], end: int) -> None:
    wait_until(lambda: all(read_commitlog(b.store).end == end for b in brokers), TIMEOUT_S,
               f"{len(brokers)} replicas at commitlog offset {end}")


@dataclass(frozen=True)
class Ends:
    """The commitlog ends of a master and of its other replicas (by id), read one after the other: true
    once every replica is at the master's end."""

    master: int
    replicas: dict[int, int]

    def __bool__(self) -> bool:
        return all(end == self.master for end in self.replicas.values())


def identical_to(master: Broker, rs: ReplicaSet) -> Commitlog:
    """Once every other replica reached ``master``'s end: their commitlogs and epoch files are its own.
    Returns ``master``'s commitlog. The end is read again at each look, not once: the master may still be
    writing (a consumer group's offset commits are logged in its commitlog, ``offset_log.py``), and its
    replicas then pass the end first read, never stopping at it."""
    others = {i: b for i, b in rs.brokers.items() if b is not master}
    ends = wait_until(lambda: Ends(read_commitlog(master.store).end,
                                   {i: read_commitlog(b.store).end for i, b in others.items()}),
                      TIMEOUT_S, "every replica at the master's commitlog end", interval=0.5)
    end = ends.master
    files = read_commitlog(master.store)
    for b in others.values():
        assert read_commitlog(b.store).span(0, end) == files.span(0, end)
        assert (b.store / "epochFileCheckpoint").read_text() == (master.store / "epochFileCheckpoint").read_text()
    return files
