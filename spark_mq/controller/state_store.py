"""Where the controller keeps its decisions, and how controller processes agree on a leader.

The controller's state (per broker set: master, SyncStateSet, epoch, replica ids) must survive the
death of any controller process and must never be decided twice, so it lives in a real consensus
store (ZooKeeper or etcd), never in our own code. This module names the contract the controller
logic is written against; implementations: an external store (consensus) and, for development, a
local file (``enableControllerInNamesrv``).

Every record is one broker set's state, stored whole under its key and written with
compare-and-set on the store's version, so a deposed leader's late write fails instead of
overwriting the new leader's decision.

Errors: StaleStateError means the write did not happen (the record moved on, or this process does
not lead); a plain StateStoreError from ``compare_and_set`` means the store could not be reached and
the write may or may not have landed: reload before deciding again (a retry with the same expected
version is safe, it fails if the first attempt landed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from spark_mq.common.errors import SparkMQError

NO_RECORD = -1  # the expected version of a key that does not exist yet


class StateStoreError(SparkMQError):
    """The consensus store cannot be reached or refused an operation."""


class StaleStateError(StateStoreError):
    """A compare-and-set lost: the record changed since it was read (another leader decided)."""


class ControllerStateStore(Protocol):
    def load_all(self) -> dict[str, tuple[bytes, int]]:
        """Every record: key -> (value, version)."""
        ...

    def compare_and_set(self, key: str, value: bytes, expected_version: int) -> int:
        """Write ``value`` if the record's version is still ``expected_version`` (``NO_RECORD`` to
        create it) and this process still leads; return the new version. Raises StaleStateError."""
        ...

    def campaign(self, address: str, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """Take part in the leader election as ``address`` (the controller's remoting address);
        ``on_elected``/``on_lost`` are called from the store's thread when leadership changes."""
        ...

    def leader_address(self) -> str | None:
        """The current leader's address, or None while there is none."""
        ...

    def close(self) -> None:
        """Leave the election and release the store's session."""
        ...
