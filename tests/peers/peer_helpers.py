"""Helpers of the peer tests (the server processes come from ``tests/servers.py``)."""

from __future__ import annotations

from pathlib import Path


def cpp_log(home: Path) -> str:
    """What the C++ client logged under ``home`` (it writes ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.N``)."""
    return "".join(p.read_text(errors="replace") for p in (home / "logs" / "rocketmq-cpp").glob("*rocketmq-cpp.log*"))
