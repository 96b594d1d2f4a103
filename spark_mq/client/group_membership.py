"""``GroupMembership``: one client's membership of one consumer group — the part every kind of
group member shares (PushConsumer, LitePullConsumer, the Spark driver's DriverGroupMember).

- **Allocation**: the queues ``strategy`` gives this member of the group's current member list
  (:mod:`spark_mq.client.rebalance`), or all of them when broadcasting; ``None`` when that cannot
  be known now (no route, no broker answered the member list), so callers keep what they own.
- **Queue locks**: LOCK_BATCH_MQ per broker; ``held`` is what this member holds. The broker expires
  a lock after 60 s, so a member renews its locks every :data:`LOCK_RENEW_INTERVAL_S`
  (``keep_locks``: the one renewal loop of every kind of member); a lock found lost (this member
  was cut off past the expiry and another took the queue) leaves ``held`` and is reported to the
  caller.
- **Hand-over**: ``hand_over`` commits a queue's offset first and only then unlocks it, so the next
  owner, which locks it and then reads the committed offset, neither skips nor repeats.

Thread-safety: everything runs on the client instance's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable

from spark_mq.client.instance import ClientInstance
from spark_mq.client.offset_store import broker_addr_of
from spark_mq.client.rebalance import AllocateStrategy
from spark_mq.common.errors import ClientError, MQClientError, RemotingError
from spark_mq.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

LOCK_RENEW_INTERVAL_S = 20.0  # RocketMQ's REBALANCE_LOCK_INTERVAL; the broker expires a lock after 60 s

Renewed = Callable[[set[MessageQueue]], None]
"""``renewed(lost)``: a renewal round is done; ``lost`` are the locks another member holds now."""


def by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    """The queues grouped by broker name, each group sorted (one lock request per broker)."""
    out: dict[str, list[MessageQueue]] = {}
    for mq in sorted(set(mqs)):
        out.setdefault(mq.broker_name, []).append(mq)
    return out


class GroupMembership:
    """This client's membership of consumer group ``group`` (see the module doc)."""

    def __init__(self, instance: ClientInstance, group: str, strategy: AllocateStrategy, *,
                 clustering: bool = True) -> None:
        self.instance = instance
        self.group = group
        self.strategy = strategy
        self.clustering = clustering
        self.held: set[MessageQueue] = set()

    # -- allocation -------------------------------------------------------------------------------

    async def allocate(self, topic: str, mqs: list[MessageQueue] | None = None) -> list[MessageQueue] | None:
        """This member's share of ``mqs`` (default: ``topic``'s readable queues, from a fresh route);
        None when it cannot be known now."""
        if mqs is None:
            try:
                mqs = await self.instance.subscribe_queues(topic, refresh=True)
            except RemotingError as e:
                log.warning("group %s: no route for %s: %s", self.group, topic, e)
                return None
        if not mqs:
            return None
        if not self.clustering:
            return list(mqs)
        cids = await self.instance.group_members(topic, self.group)
        return self.strategy(self.group, self.instance.client_id, list(mqs), cids) if cids else None

    # -- locks ------------------------------------------------------------------------------------

    async def lock(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ per broker; the queues of ``mqs`` now held (a failing broker's count as not
        held). Adds them to ``held``."""
        got: set[MessageQueue] = set()
        for name, group_mqs in by_broker(mqs).items():
            try:
                addr = await broker_addr_of(self.instance, group_mqs[0])
                got |= set(await self.instance.api.lock_batch_mq(addr, self.group, self.instance.client_id,
                                                                 group_mqs))
            except (RemotingError, MQClientError, ClientError) as e:
                log.warning("group %s: locking queues at %s failed: %s", self.group, name, e)
        self.held |= got
        return got

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ per broker (their offsets must be committed first: see ``hand_over``); a
        failure is logged, and the lock then expires at the broker."""
        mqs = set(mqs)
        self.held -= mqs
        for name, group_mqs in by_broker(mqs).items():
            try:
                addr = await broker_addr_of(self.instance, group_mqs[0])
                await self.instance.api.unlock_batch_mq(addr, self.group, self.instance.client_id, group_mqs)
            except (RemotingError, MQClientError, ClientError) as e:
                log.warning("group %s: unlocking queues at %s failed (the locks expire at the broker): %s",
                            self.group, name, e)

    async def hand_over(self, mqs: Iterable[MessageQueue], commit: Callable[[], Awaitable[object]], *,
                        unlock: bool = True) -> bool:
        """Give ``mqs`` up: ``commit()`` their offsets, then unlock them (or, without ``unlock``,
        leave the locks to expire), so the next owner reads what was committed. A failed commit is
        logged and keeps the locks, to expire: the next owner then waits for the expiry instead of
        reading a stale offset at once. True if committed."""
        mqs = set(mqs)
        try:
            await commit()
        except (RemotingError, MQClientError, ClientError) as e:
            log.warning("group %s: committing the offsets of %s failed%s: %s", self.group,
                        ", ".join(f"{mq.topic}:{mq.broker_name}:{mq.queue_id}" for mq in sorted(mqs)),
                        "; their locks are left to expire" if unlock else "", e)
            self.held -= mqs
            return False
        if unlock:
            await self.unlock(mqs)
        else:  # given up all the same: its lock expires at the broker
            self.held -= mqs
        return True

    async def renew(self, mqs: Iterable[MessageQueue] | None = None) -> set[MessageQueue]:
        """Lock again the queues this member should hold (default: ``held``); the ones refused
        (another member holds them) leave ``held`` and are returned. A broker that does not
        answer loses nothing here (its locks are tried again next time)."""
        lost: set[MessageQueue] = set()
        for name, group_mqs in by_broker(self.held if mqs is None else mqs).items():
            try:
                addr = await broker_addr_of(self.instance, group_mqs[0])
                locked = set(await self.instance.api.lock_batch_mq(addr, self.group, self.instance.client_id,
                                                                   group_mqs))
            except (RemotingError, MQClientError, ClientError) as e:
                log.warning("group %s: renewing locks at %s failed: %s", self.group, name, e)
                continue
            lost |= set(group_mqs) - locked
            self.held |= locked
        if lost:
            log.warning("group %s lost the lock of %s", self.group,
                        ", ".join(f"{mq.topic}:{mq.broker_name}:{mq.queue_id}" for mq in sorted(lost)))
            self.held -= lost
        return lost

    async def keep_locks(self, wanted: Callable[[], Collection[MessageQueue]] | None = None,
                         renewed: Renewed | None = None, *, interval_s: float = LOCK_RENEW_INTERVAL_S) -> None:
        """Every ``interval_s`` until cancelled (run it as a task), lock again the queues ``wanted()``
        names (default: those held; see ``renew``), then tell ``renewed(lost)``."""
        while True:
            await asyncio.sleep(interval_s)
            lost = await self.renew(None if wanted is None else wanted())
            if renewed is not None:
                renewed(lost)

    async def leave(self) -> None:
        """Unlock what is held (offsets committed by the caller), leave the group at every broker."""
        await self.unlock(set(self.held))
        self.instance.unregister_consumer(self.group)
        await self.instance.unregister_everywhere(None, self.group)
