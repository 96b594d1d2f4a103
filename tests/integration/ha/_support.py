"""Settings and checks shared by the replication tests."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from pathlib import Path

from servers import wait_until

from .commitlog_files import read_commitlog

# 64 KiB commitlog files: a few hundred messages fill several, and their blank tails replicate too
SMALL_FILES = "mapedFileSizeCommitLog=65536\nmaxMessageSize=8192\n"


def commitlog_copies(store: Path) -> collections.Counter:
    """How many times each (topic, body) is in ``store``'s commitlog, read by the independent struct reader."""
    return collections.Counter((u.topic, u.body) for u in read_commitlog(store).units)


def delivered_copies(pair, topic: str, bodies: Iterable[bytes],
                     timeout: float) -> tuple[collections.Counter, collections.Counter]:
    """Wait until every body's delivered copy in ``topic`` reached the slave; the master's and the slave's
    commitlog copies then (scheduled messages: timers and delay levels, delivered by the master only)."""
    def delivered_on_slave():
        c = commitlog_copies(pair.slave.store)
        return c if all(c[(topic, b)] for b in bodies) else None

    on_slave = wait_until(delivered_on_slave, timeout, "the delivered copies replicated to the slave")
    return commitlog_copies(pair.master.store), on_slave
