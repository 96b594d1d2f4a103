"""Fixtures of the offload tests: one NameServer and one broker per module with tiered storage on and
64 KiB commitlog files (a few hundred messages fill several, so queues have a cold range), and a
blocking client."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from servers import Broker, start_namesrv

TIERED_BROKER_CONF = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\ntieredStoreEnable=true\n"


@dataclass
class TieredCluster:
    namesrv: str
    broker: Broker

    @property
    def addr(self) -> str:
        return self.broker.addr


@pytest.fixture(scope="module")
def tiered_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiered_cluster")
    namesrv = start_namesrv(root / "namesrv.log", verbose=False)
    try:
        broker = Broker(namesrv.addr, root / "broker", TIERED_BROKER_CONF, verbose=False)
    except BaseException:
        namesrv.stop_cleanly()
        raise
    yield TieredCluster(namesrv.addr, broker)
    broker.stop()
    namesrv.stop_cleanly()
