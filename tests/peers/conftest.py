"""Fixtures of the peer tests: a NameServer and a broker per test (``tests/servers.py``); plain
helpers live in ``peer_helpers`` (importable from here on). ``tests/integration`` is on the path too (appended),
so the controller tests' replica sets can be imported as ``integration.controller...`` whose modules import
``broker._support``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).parents[1] / "integration"))

from servers import Broker, start_namesrv


@pytest.fixture
def namesrv(tmp_path):
    """A NameServer's address; its log is ``tmp_path / "namesrv.log"``."""
    server = start_namesrv(tmp_path / "namesrv.log")
    try:
        yield server.addr
    finally:
        server.stop_cleanly()


@pytest.fixture
def broker(tmp_path, namesrv):
    """A broker on a free port with its store in ``tmp_path / "store"``, stopped cleanly afterwards."""
    b = Broker(namesrv, tmp_path)
    try:
        yield b
    finally:
        if b.server.proc.returncode is None:  # not stopped by the test (a crash still fails the stop)
            b.stop()
