"""Fixtures of the controller tests: a real ``spark-mq controller`` process per test (temp state
directory, free port), a remoting client that speaks to it as brokers do, and a real standalone
ZooKeeper server per test module for the stores and the controllers that share their state."""

from __future__ import annotations

import pytest
from consensus import ZooKeeperEnsemble
from servers import unique

from spark_mq.remoting.client import SyncRemotingClient

from ._support import ControllerClient, FakeBroker, Heartbeats, start_controller, zookeeper_conf


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """One standalone ZooKeeper server (a child process) for the module: tests keep apart by root path."""
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def shared_store(zookeeper) -> str:
    """Controller keys for a state of this test's own in the module's ZooKeeper: controllers started
    with them share it."""
    return zookeeper_conf(zookeeper.hosts, f"/{unique('controllers')}")


@pytest.fixture
def remoting():
    client = SyncRemotingClient()
    yield client
    client.close()


@pytest.fixture
def controller(tmp_path):
    server = start_controller(tmp_path / "controller")
    yield server
    if server.alive():
        server.stop_cleanly()


@pytest.fixture
def api(remoting, controller) -> ControllerClient:
    return ControllerClient(remoting, controller.addr).wait_leading()


@pytest.fixture
def heartbeats(api):
    beats = Heartbeats(api)
    yield beats
    beats.close()


def replica_set(name: str, count: int = 3) -> list[FakeBroker]:
    """``count`` replicas of broker set ``name``: ids 0.., addresses that only name them."""
    return [FakeBroker(name, i, f"127.0.0.1:{20000 + i}") for i in range(count)]
