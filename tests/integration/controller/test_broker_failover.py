"""Real brokers acting on the controller's elections (enableControllerMode, the controller embedded in a
real NameServer with its state in a file): three replicas of one set, the master SIGKILLed, a slave
elected becomes master, registers as id 0 and takes our producer's sends; the old master restarted
rejoins as a slave of the new one and ends with a byte-identical commitlog (checked by the
independent reader)."""

from __future__ import annotations

from pathlib import Path

import pytest
from integration.ha.commitlog_files import read_commitlog
from servers import NAMESRV_READY, Broker, ServerProcess, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message

from ._support import FAST_CONF

FILES = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\n"
HEARTBEAT_TIMEOUT_MS = 4000  # the brokers': a role switch restarts a broker's parts, well within it
TIMEOUT_S = 60


def brokers_conf(namesrv: str) -> str:
    return (f"{FILES}enableControllerMode=true\ncontrollerAddr={namesrv}\nbrokerHeartbeatInterval=300\n"
            f"syncBrokerMetadataPeriod=500\ncontrollerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\n"
            "slaveSynchronizeInterval=1000\n")


@pytest.fixture
def embedded(tmp_path):
    """A NameServer running the controller (file state), unclean elections allowed (the SyncStateSet is
    the master's to grow)."""
    root = tmp_path / "ns"
    root.mkdir()
    (root / "namesrv.conf").write_text(f"enableControllerInNamesrv=true\ncontrollerStorePath={root / 'state'}\n"
                                       f"{FAST_CONF}enableElectUncleanMaster=true\n")
    server = ServerProcess(["namesrv", "-c", str(root / "namesrv.conf"), "--port", "0"], root / "namesrv.log",
                           NAMESRV_READY, verbose=False)
    yield server
    server.stop_cleanly()


@pytest.fixture
def api():
    client = SyncMQClientAPI(timeout=10.0)
    yield client
    client.close()


class ReplicaSet:
    """Three controller-mode brokers of one set: replica 1 configured master, 2 and 3 slaves."""

    def __init__(self, namesrv: str, root: Path) -> None:
        self.name = unique("failover")
        conf = brokers_conf(namesrv)
        self.brokers = {i: Broker(namesrv, root / f"replica{i}",
                                  f"{conf}brokerId={i}\nbrokerRole={'ASYNC_MASTER' if i == 1 else 'SLAVE'}\n",
                                  broker_name=self.name) for i in (1, 2, 3)}

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop_if_running()


@pytest.fixture
def replica_set(embedded, tmp_path):
    made: list[ReplicaSet] = []

    def make() -> ReplicaSet:
        made.append(ReplicaSet(embedded.addr, tmp_path))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def route(api, namesrv: str, topic: str, name: str) -> dict[int, str]:
    data = api.get_route_info(namesrv, topic)
    return next((dict(b.broker_addrs) for b in (data.broker_datas if data else []) if b.broker_name == name), {})


def test_a_killed_master_is_replaced_by_an_elected_slave_and_rejoins_as_its_slave(embedded, replica_set, api):
    namesrv = embedded.addr
    rs = replica_set()
    first = rs.brokers[1]
    wait_until(lambda: route(api, namesrv, "TBW102", rs.name).get(0) == first.addr, TIMEOUT_S,
               "replica 1 elected and registered as id 0")
    topic = unique("Failover")
    api.create_topic(first.addr, topic, 2, 2)
    wait_until(lambda: route(api, namesrv, topic, rs.name) == {0: first.addr, 2: rs.brokers[2].addr,
                                                               3: rs.brokers[3].addr}, TIMEOUT_S,
               "the route to list the master as 0 and both slaves by their ids")
    with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=0) as producer:
        for i in range(20):
            assert producer.send(Message(topic, f"before-{i}".encode())).status == SendStatus.SEND_OK
    end = read_commitlog(first.store).end
    wait_until(lambda: all(read_commitlog(rs.brokers[i].store).end == end for i in (2, 3)), TIMEOUT_S,
               "both slaves to have the master's commitlog")

    first.kill()
    new_master = wait_until(lambda: next((b for i, b in rs.brokers.items() if i != 1
                                          and route(api, namesrv, topic, rs.name).get(0) == b.addr), None),
                            TIMEOUT_S, "a slave elected, registered as id 0")
    assert "becomes its master" in new_master.log()
    with SyncProducer(unique("pg"), ClientConfig(namesrv), retry_times=2) as producer:
        for i in range(20):
            sent = producer.send(Message(topic, f"after-{i}".encode()))
            assert sent.status == SendStatus.SEND_OK
    other = next(b for i, b in rs.brokers.items() if i != 1 and b is not new_master)
    final_end = read_commitlog(new_master.store).end
    assert final_end > end
    wait_until(lambda: read_commitlog(other.store).end == final_end, TIMEOUT_S, "the other slave following it")

    first.start_again()
    wait_until(lambda: route(api, namesrv, topic, rs.name).get(1) == first.addr, TIMEOUT_S,
               "the old master listed as slave 1")
    wait_until(lambda: read_commitlog(first.store).end == final_end, TIMEOUT_S, "the old master catching up")
    master_files = read_commitlog(new_master.store)
    for b in (first, other):
        assert read_commitlog(b.store).span(0, final_end) == master_files.span(0, final_end)
