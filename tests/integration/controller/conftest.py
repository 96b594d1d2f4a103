"""Fixtures of the controller tests: a real ``spark-mq controller`` process per test (temp state
directory, free port) and a remoting client that speaks to it as brokers do."""

from __future__ import annotations

import pytest

from spark_mq.remoting.client import SyncRemotingClient

from ._support import ControllerClient, FakeBroker, Heartbeats, start_controller


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
