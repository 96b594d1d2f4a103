"""Fixtures of the replication tests: a real NameServer per module, and per test a master and its
slave (``spark-mq broker`` processes on free loopback ports, temp stores, one brokerName), with
commitlog files small enough that replication crosses file ends."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from servers import Broker, free_port, start_namesrv, unique

from ._support import SMALL_FILES
from .ha_proxy import HAProxy


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    server = start_namesrv(tmp_path_factory.mktemp("namesrv") / "namesrv.log", verbose=False)
    yield server.addr
    server.stop_cleanly()


@dataclass
class Pair:
    master: Broker
    slave: Broker | None
    name: str
    ha_port: int
    metrics: bool = False
    slave_conf: str = ""

    def start_slave(self, root, namesrv: str, extra_conf: str = "") -> Broker:
        self.slave = Broker(namesrv, root / "slave",
                            f"{SMALL_FILES}brokerRole=SLAVE\nbrokerId=1\n{self.slave_conf}{extra_conf}",
                            broker_name=self.name, metrics=self.metrics)
        return self.slave


@pytest.fixture
def ha_pair(tmp_path, namesrv):
    """``ha_pair(role, with_slave=True, metrics=False, master_conf="", slave_conf="")``: a master of ``role``
    (ASYNC_MASTER or SYNC_MASTER) and, started after it, its slave (both serving Prometheus metrics if
    ``metrics``; each with its extra conf lines); both stopped cleanly after the test if still running."""
    pairs: list[Pair] = []

    def make(role: str, with_slave: bool = True, metrics: bool = False, master_conf: str = "",
             slave_conf: str = "") -> Pair:
        name = unique("ha")
        ha_port = free_port()
        master = Broker(namesrv, tmp_path / "master",
                        f"{SMALL_FILES}brokerRole={role}\nhaListenPort={ha_port}\nsyncFlushTimeout=3000\n"
                        f"{master_conf}", broker_name=name, metrics=metrics)
        pair = Pair(master, None, name, ha_port, metrics, slave_conf)
        pairs.append(pair)
        if with_slave:
            pair.start_slave(tmp_path, namesrv)
        return pair

    yield make
    for pair in pairs:
        for b in (pair.slave, pair.master):
            if b is not None and b.server.alive():
                b.stop()




@pytest.fixture
def ha_proxy():
    """``ha_proxy(pair)``: an ``HAProxy`` to ``pair``'s master's HA port (a slave given
    ``haMasterAddress={proxy.addr}`` replicates through it); closed after the test."""
    proxies: list[HAProxy] = []

    def make(pair: Pair) -> HAProxy:
        proxies.append(HAProxy(f"127.0.0.1:{pair.ha_port}"))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()
