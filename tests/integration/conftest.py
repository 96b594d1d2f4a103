"""Fixtures shared by the integration tests: ``cluster``, a real NameServer and broker per module
(``tests/servers.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from servers import Broker, ServerProcess, start_namesrv


@dataclass
class Cluster:
    """One NameServer and one broker (``broker-a``); ``namesrv`` and ``broker`` are their addresses."""

    namesrv_server: ServerProcess
    broker_proc: Broker

    @property
    def namesrv(self) -> str:
        return self.namesrv_server.addr

    @property
    def broker(self) -> str:
        return self.broker_proc.addr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A NameServer and a broker for the module, stopped cleanly (exit 0, no abort file) after it."""
    root = tmp_path_factory.mktemp("cluster")
    namesrv = start_namesrv(root / "namesrv.log")
    try:
        broker = Broker(namesrv.addr, root)
    except BaseException:
        namesrv.stop_cleanly()
        raise
    yield Cluster(namesrv, broker)
    broker.stop()
    namesrv.stop_cleanly()
