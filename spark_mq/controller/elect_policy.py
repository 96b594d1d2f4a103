"""Which replica becomes a broker set's master (RocketMQ's DefaultElectPolicy).

Candidates are the live replicas of the SyncStateSet: they have every acknowledged message. The old
master stays if it is still among them; a preferred replica (an admin's ELECT_MASTER with
``designateElect``) is taken if it is a candidate, else nobody; otherwise the most up-to-date by the
last heartbeat wins: highest epoch, then highest commitlog offset, then the lowest
``electionPriority``, then the lowest id (RocketMQ takes any; we want the same answer on every run).

Only when the SyncStateSet yields nobody (no live member, or the preferred replica is not one), and only
with ``enableElectUncleanMaster``, are the other registered replicas tried the same way. Such a master
may lack acknowledged messages (and the replicas that have them truncate to its log when they
return), so it is logged at ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

NO_PRIORITY = 2**31 - 1  # a heartbeat without electionPriority: last among equals (RocketMQ's default)


@dataclass(frozen=True)
class ReplicaProgress:
    """How far a replica's log goes, as its last heartbeat said."""

    epoch: int = -1
    max_offset: int = -1
    election_priority: int = NO_PRIORITY


Alive = Callable[[str, int], bool]  # (broker name, broker id) -> alive
Progress = Callable[[str, int], ReplicaProgress]


class ElectPolicy:
    def __init__(self, alive: Alive, progress: Progress) -> None:
        self._alive = alive
        self._progress = progress

    def elect(self, broker_name: str, sync_state_set: Iterable[int], all_replicas: Iterable[int] | None,
              old_master: int | None, preferred: int | None) -> int | None:
        """The new master's id, or None; ``all_replicas`` (unclean election) is tried only when the
        SyncStateSet yields nobody."""
        in_sync = frozenset(sync_state_set)
        chosen = self._try(broker_name, in_sync, old_master, preferred)
        if chosen is None and all_replicas is not None:
            chosen = self._try(broker_name, frozenset(all_replicas) - in_sync, old_master, preferred)
            if chosen is not None:
                log.error("%s: UNCLEAN ELECTION: electing replica %d from outside the SyncStateSet %s "
                          "(enableElectUncleanMaster=true): messages acknowledged by the old master may be lost",
                          broker_name, chosen, sorted(in_sync))
        return chosen

    def _try(self, broker_name: str, replicas: frozenset[int], old_master: int | None,
             preferred: int | None) -> int | None:
        live = [i for i in replicas if self._alive(broker_name, i)]
        if not live:
            return None
        if old_master in live and (preferred is None or preferred == old_master):
            return old_master
        if preferred is not None:
            return preferred if preferred in live else None

        def rank(broker_id: int) -> tuple[int, int, int, int]:
            p = self._progress(broker_name, broker_id)
            return -p.epoch, -p.max_offset, p.election_priority, broker_id

        return min(live, key=rank)
