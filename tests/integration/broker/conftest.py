"""Fixtures of the broker integration tests: a real ``spark-mq namesrv`` and ``spark-mq broker``
per test module (subprocesses on free loopback ports, temp store, metrics on a free port), and
blocking clients (``SyncMQClientAPI``) closed after each test.

Tests that share a module's broker use their own topic and group names (``unique``), so their
order does not matter.
"""

from __future__ import annotations

import pytest
from servers import Broker, start_namesrv, unique

from spark_mq.client.sync_api import SyncMQClientAPI


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    """A NameServer's address, stopped (exit 0) after the module."""
    server = start_namesrv(tmp_path_factory.mktemp("namesrv") / "namesrv.log", verbose=False)
    yield server.addr
    server.stop_cleanly()


@pytest.fixture(scope="module")
def broker_conf() -> str:
    """Extra broker.conf lines of the module's broker (a module overrides this fixture)."""
    return ""


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv, broker_conf):
    """The module's broker, stopped cleanly (exit 0, no abort file) after the module."""
    b = Broker(namesrv, tmp_path_factory.mktemp("broker"), broker_conf, metrics=True, verbose=False)
    yield b
    if b.server.alive():
        b.stop()


@pytest.fixture
def own_broker(tmp_path, namesrv):
    """``own_broker(name, extra_conf="")``: a broker of this test alone (it may kill or stop it), with
    ``extra_conf`` in its broker.conf; stopped cleanly after the test if still running."""
    brokers: list[Broker] = []

    def make(name: str, extra_conf: str = "") -> Broker:
        b = Broker(namesrv, tmp_path / name, extra_conf, broker_name=unique(name), verbose=False)
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        if b.server.alive():
            b.stop()


@pytest.fixture
def make_api():
    """``make_api()`` opens another client (its own connections); all are closed after the test."""
    apis: list[SyncMQClientAPI] = []

    def make(timeout: float = 5.0) -> SyncMQClientAPI:
        api = SyncMQClientAPI(timeout=timeout)
        apis.append(api)
        return api

    yield make
    for api in apis:
        api.close()


@pytest.fixture
def api(make_api) -> SyncMQClientAPI:
    return make_api()
