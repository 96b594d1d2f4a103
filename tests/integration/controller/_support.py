"""Talking to a real controller process the way a broker does: RocketMQ's controller requests as
remoting commands, and brokers that heartbeat from a background thread until told to stop."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from servers import ServerProcess, wait_until

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
# the controller's conf: scan often, so an election follows a death within about a heartbeat timeout
FAST_CONF = f"scanNotActiveBrokerInterval=200\ncontrollerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\n"


def start_controller(root: Path, conf: str = FAST_CONF, store: Path | None = None, port: int = 0) -> ServerProcess:
    """A ``spark-mq controller`` on ``port`` (0: a free one) with its state in ``store`` (default root/store)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "controller.conf").write_text(conf)
    return ServerProcess(["controller", "-c", str(root / "controller.conf"), "--port", str(port),
                          "--store", str(store or root / "store")], root / "controller.log", CONTROLLER_READY)


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
