"""The broker side's SyncStateSet (RocketMQ 5's ``AutoSwitchHAService`` syncStateSet and its epoch), and
the confirmed offset computed from it (RocketMQ's confirmOffset): one owner for both, in controller mode.

The SyncStateSet is the replicas that have the master's log: a put waits for them (with
allAckInSyncStateSet until every member has it, else until minInSyncReplicas replicas -- the master
included -- have it), and only they can be elected cleanly. While a new set is asked of the controller
(``proposed``) and its answer is not known, puts wait for the members of both (RocketMQ's
synchronizing SyncStateSet): the controller may have taken the new set already, and from then on may
elect any of its members, which must hold every acknowledged put.

The confirmed offset is what the replicas a put waits for all have -- or the commitlog's end when this
master started serving its slaves (everything it had then is its history's) -- and never decreases:
what consumers may read when puts wait for replicas. A unit read past it could be lost with this
master, and a consumer's offset would then point past the messages the next master stores there.

Who writes:

- ``ReplicasManager`` (broker/replication) -- :meth:`learn`: the set and epoch the controller has,
  from its answers, role-change notifies and polls (a newer or equal epoch wins);
- ``SyncStateKeeper`` (a master's) -- :meth:`propose` before asking the controller for a set,
  :meth:`settle` when it took it, :meth:`withdraw` when it certainly did not;
- ``HAService`` (a master's) -- :meth:`attach` once at start (its slaves' acknowledgements, and whom
  to tell), :meth:`update` on every acknowledgement.

Who reads: ``HAService`` (:meth:`members_needed`: how many members a put waits for), the
``SyncStateKeeper`` (``members``, ``proposed``), the ``ReplicasManager`` (``epoch``, sent with
ALTER_SYNC_STATE_SET), and the pull path (:meth:`confirmed_offset`). The controller keeps its own
record of every set (``controller/replicas_info.py``).

Thread-safety: none; every method runs on the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# (replica id or None before its hello, offset it acknowledged) of each connected replica's connection
Acks = Callable[[], Iterable[tuple[int | None, int]]]


class BrokerSyncStateSet:
    """This broker's SyncStateSet (``members``, ``epoch``, ``proposed``) and its confirmed offset."""

    def __init__(self, master_id: int, all_ack: bool, min_in_sync_replicas: int) -> None:
        """``master_id``: this broker's id (the set's master when it serves slaves); ``all_ack``,
        ``min_in_sync_replicas``: the broker keys allAckInSyncStateSet and minInSyncReplicas."""
        self.master_id = master_id
        self.all_ack = all_ack
        self.min_in_sync_replicas = min_in_sync_replicas
        self.members: frozenset[int] = frozenset({master_id})  # agreed; this master alone until the controller says
        self.proposed: frozenset[int] = frozenset()  # asked of the controller, not known taken or refused
        self._known: tuple[frozenset[int], int] = (frozenset(), 0)  # the controller's (set, epoch) last learned
        self._end: Callable[[], int] = lambda: 0
        self._acks: Acks = lambda: ()
        self._on_acked: Callable[[int], None] = lambda offset: None
        self._on_confirmed: Callable[[], None] = lambda: None
        self._confirmed = 0

    @property
    def epoch(self) -> int:
        """The epoch of the set the controller has, as last learned (0: none yet)."""
        return self._known[1]

    # -- written by the ReplicasManager and the SyncStateKeeper ---------------------------------------
    def learn(self, members: frozenset[int], epoch: int) -> bool:
        """The controller has ``members`` at ``epoch``: taken unless an older epoch than the one known
        (a late answer); returns whether it changed what is known."""
        if (members, epoch) == self._known or epoch < self._known[1]:
            return False
        self._known = (members, epoch)
        self.settle(members)
        return True

    def settle(self, members: frozenset[int]) -> None:
        """``members`` is the set as the controller last agreed it (any proposal is settled by it: taken,
        or fenced by the change); puts wait for it from now on."""
        self.proposed = frozenset()
        if members != self.members:
            log.info("HA: SyncStateSet %s (was %s)", sorted(members), sorted(self.members))
            self.members = members
        self.update()

    def propose(self, members: frozenset[int]) -> None:
        """``members`` are being asked of the controller: puts wait for them too until :meth:`settle`
        or :meth:`withdraw`."""
        self.proposed = members

    def withdraw(self) -> None:
        """The controller refused the proposed set at the agreed set's epoch: it never took it."""
        self.proposed = frozenset()
        self.update()

    # -- what puts wait for ----------------------------------------------------------------------
    def waited_for(self) -> frozenset[int]:
        """The replicas a put may wait for: the agreed set's and a proposed one's."""
        return self.members | self.proposed

    def members_needed(self) -> int:
        """How many slaves of the set a put waits for."""
        others = len(self.waited_for() - {self.master_id})
        return others if self.all_ack else min(others, self.min_in_sync_replicas - 1)

    def _acked_offset(self) -> int:
        """The offset enough members have (-1: not enough connected)."""
        needed = self.members_needed()
        if needed <= 0:
            return self._end()
        acked: dict[int, int] = {}
        members = self.waited_for()
        for replica, offset in self._acks():
            if replica in members and replica != self.master_id:
                acked[replica] = max(acked.get(replica, -1), offset)
        best = sorted(acked.values(), reverse=True)
        return best[needed - 1] if len(best) >= needed else -1

    # -- the confirmed offset --------------------------------------------------------------------
    def attach(self, end: Callable[[], int], acks: Acks, on_acked: Callable[[int], None],
               on_confirmed: Callable[[], None]) -> None:
        """A master's HA service starts: ``end()`` is the commitlog's end (confirmed as of now), ``acks()``
        its slaves' acknowledgements; ``on_acked(offset)`` releases the puts waiting up to ``offset``,
        ``on_confirmed()`` is told when the confirmed offset grew (held pulls may be answered)."""
        self._end, self._acks, self._on_acked, self._on_confirmed = end, acks, on_acked, on_confirmed
        self._confirmed = end()

    def update(self) -> None:
        """Release the puts the replicas waited for all have; tell of a confirmed offset that grew."""
        acked = self._acked_offset()
        self._on_acked(acked)
        if acked > self._confirmed:
            self._confirmed = acked
            self._on_confirmed()

    def confirmed_offset(self) -> int:
        """The commitlog offset below which every replica a put waits for has every byte (never
        decreasing): what consumers may read."""
        self.update()
        return self._confirmed
