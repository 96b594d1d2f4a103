"""Real ``spark-mq namesrv`` and ``spark-mq broker`` subprocesses for the client and CLI tests,
from the generic process helpers of ``tests/peers/peer_helpers.py``."""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "peers"))

from peer_helpers import ServerProcess, start_broker, start_namesrv, stop_cleanly

_unique = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test of this session uses."""
    return f"{prefix}_{os.getpid()}_{next(_unique)}"


@dataclass
class Cluster:
    """One NameServer and one broker; ``namesrv`` and ``broker`` are their addresses."""

    namesrv_server: ServerProcess
    broker_server: ServerProcess
    store: Path

    @property
    def namesrv(self) -> str:
        return self.namesrv_server.addr

    @property
    def broker(self) -> str:
        return self.broker_server.addr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A NameServer and a broker for the module, stopped cleanly (exit 0, no abort file) after it."""
    root = tmp_path_factory.mktemp("cluster")
    namesrv = start_namesrv(root / "namesrv.log")
    try:
        broker = start_broker(namesrv.addr, root / "store", root / "broker.log")
    except BaseException:
        stop_cleanly(namesrv)
        raise
    yield Cluster(namesrv, broker, root / "store")
    stop_cleanly(broker, root / "store")
    stop_cleanly(namesrv)
