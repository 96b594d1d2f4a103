"""Fixtures of the peer tests; plain helpers live in ``peer_helpers`` (importable from here on)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from peer_helpers import start_broker, start_namesrv, stop_cleanly


@pytest.fixture
def namesrv(tmp_path):
    """A NameServer's address; its log is ``tmp_path / "namesrv.log"``."""
    server = start_namesrv(tmp_path / "namesrv.log")
    try:
        yield server.addr
    finally:
        stop_cleanly(server)


class Broker:
    """A ``spark-mq broker`` process registered with ``namesrv``; ``restart`` keeps its port and store."""

    def __init__(self, namesrv: str, root: Path) -> None:
        self.namesrv = namesrv
        self.store = root / "store"
        self.log_path = root / "broker.log"
        self.server = start_broker(namesrv, self.store, self.log_path)

    @property
    def addr(self) -> str:
        return self.server.addr

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Stop cleanly: exit code 0 and no abort file left in the store."""
        stop_cleanly(self.server, self.store)

    def restart(self) -> None:
        self.stop()
        self.server = start_broker(self.namesrv, self.store, self.log_path, port=self.server.port)


@pytest.fixture
def broker(tmp_path, namesrv):
    """A broker on a free port with its store in ``tmp_path / "store"``, stopped cleanly afterwards."""
    b = Broker(namesrv, tmp_path)
    try:
        yield b
    finally:
        if b.server.proc.returncode is None:
            b.stop()
