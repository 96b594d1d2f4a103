"""Fixtures of the producer and push consumer tests: a NameServer and a broker ``broker-a`` per module
(``tests/servers.py``); the other client tests use the ``cluster`` fixture."""

from __future__ import annotations

import pytest
from servers import Broker, start_namesrv


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    server = start_namesrv(tmp_path_factory.mktemp("namesrv") / "namesrv.log")
    yield server.addr
    server.stop_cleanly()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    """The module's broker ``broker-a``."""
    b = Broker(namesrv, tmp_path_factory.mktemp("broker-a"))
    yield b
    b.stop_if_running()
