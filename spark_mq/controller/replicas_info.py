"""One broker set's replication state and the rules that change it (RocketMQ's ReplicasInfoManager).

Pure logic: each rule takes the current :class:`BrokerSetState` (None for a set never seen) and
returns the next one, or raises :class:`Refusal` with RocketMQ's response code and a remark that
says why. The controller persists a returned state whole, as the broker set's one record, with
compare-and-set on the store's version; nothing here does I/O.

Epochs fence stale actors: ``master_epoch`` grows with every new master, ``sync_state_set_epoch``
with every change of the SyncStateSet (an election resets the set to the new master alone). Only
the current master, naming both current epochs, may change the set, so a deposed master's late
ALTER_SYNC_STATE_SET is refused instead of re-admitting replicas the new history left behind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark_mq.controller.elect_policy import ElectPolicy
from spark_mq.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

CONTROLLER_TRIGGER = -1  # ELECT_MASTER's brokerId when the controller itself elects (its master died)

AliveCheck = Callable[[int], bool]  # broker id -> alive, within one broker set


class Refusal(Exception):
    """A request the rules refuse: ``code`` is RocketMQ's response code, the message its remark."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(frozen=True)
class BrokerSetState:
    """What the controller decided for one broker set (``brokerName``): its replicas, master, SyncStateSet
    and the two epochs. ``master_epoch`` 0 means no master was ever elected."""

    cluster_name: str
    broker_name: str
    replicas: Mapping[int, str] = field(default_factory=dict)  # broker id -> address
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def master_address(self) -> str | None:
        return self.replicas.get(self.master_id) if self.master_id is not None else None

    def to_bytes(self) -> bytes:
        return json.dumps({"clusterName": self.cluster_name, "brokerName": self.broker_name,
                           "replicas": {str(k): v for k, v in sorted(self.replicas.items())},
                           "masterId": self.master_id, "masterEpoch": self.master_epoch,
                           "syncStateSet": sorted(self.sync_state_set),
                           "syncStateSetEpoch": self.sync_state_set_epoch}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BrokerSetState:
        o = json.loads(data)
        return cls(o["clusterName"], o["brokerName"], {int(k): v for k, v in o["replicas"].items()}, o["masterId"],
                   o["masterEpoch"], frozenset(o["syncStateSet"]), o["syncStateSetEpoch"])


def register_broker(state: BrokerSetState | None, cluster_name: str, broker_name: str, broker_id: int,
                    address: str) -> BrokerSetState:
    """REGISTER_BROKER_TO_CONTROLLER: add the replica (or note its new address). RocketMQ applies the id
    first (APPLY_BROKER_ID); here a broker's id is its configured ``brokerId``, so registering applies it."""
    if broker_id < 0:
        raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST, f"brokerId {broker_id} is negative")
    if state is None:
        return BrokerSetState(cluster_name, broker_name, {broker_id: address})
    if state.cluster_name != cluster_name:
        raise Refusal(ResponseCode.CONTROLLER_INVALID_REQUEST,
                      f"broker set {broker_name} belongs to cluster {state.cluster_name}, not {cluster_name}")
    if state.replicas.get(broker_id) == address:
        return state
    return dataclasses.replace(state, replicas={**state.replicas, broker_id: address})


def alter_sync_state_set(state: BrokerSetState | None, master_id: int, master_epoch: int,
                         new_set: frozenset[int], new_set_epoch: int, alive: AliveCheck) -> BrokerSetState:
    """ALTER_SYNC_STATE_SET: the master, naming the current master epoch and SyncStateSet epoch, replaces
    the set with live registered replicas that include itself; the set's epoch grows by one."""
    if state is None:
        raise Refusal(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
    name = state.broker_name
    if new_set == state.sync_state_set:
        raise Refusal(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                      f"{name}: the new SyncStateSet equals the current one, nothing to change")
    if state.master_id is None or state.master_id != master_id:
        raise Refusal(ResponseCode.CONTROLLER_INVALID_MASTER,
                      f"{name}: rejecting the SyncStateSet change: the master is {state.master_id}, not {master_id}")
    if master_epoch != state.master_epoch:
        raise Refusal(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                      f"{name}: rejecting the SyncStateSet change: the master epoch is {state.master_epoch}, "
                      f"not {master_epoch}")
    if new_set_epoch != state.sync_state_set_epoch:
        raise Refusal(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                      f"{name}: rejecting the SyncStateSet change: the SyncStateSet epoch is "
                      f"{state.sync_state_set_epoch}, not {new_set_epoch}")
    for replica in sorted(new_set):
        if replica not in state.replicas:
            raise Refusal(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                          f"{name}: rejecting the SyncStateSet change: replica {replica} is not registered")
        if not alive(replica):
            raise Refusal(ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                          f"{name}: rejecting the SyncStateSet change: replica {replica} is not alive")
    if state.master_id not in new_set:
        raise Refusal(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                      f"{name}: rejecting the SyncStateSet change: the new set lacks the master {state.master_id}")
    return dataclasses.replace(state, sync_state_set=frozenset(new_set),
                               sync_state_set_epoch=state.sync_state_set_epoch + 1)


@dataclass(frozen=True)
class Election:
    """What ELECT_MASTER decided: ``state`` to persist (None: nothing changed) and whether a master now
    leads; ``refusal`` is set when the answer is not SUCCESS (the state may still change: a controller's
    failed election records that the set has no master)."""

    state: BrokerSetState | None
    refusal: Refusal | None = None


def elect_master(state: BrokerSetState | None, broker_id: int, designate: bool, policy: ElectPolicy,
                 unclean: bool) -> Election:
    """ELECT_MASTER, from a broker (``broker_id``: the first election makes the first asker master), an
    admin (``designate``: that replica, if it may be elected) or the controller (``CONTROLLER_TRIGGER``)."""
    if state is None:
        raise Refusal(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
    old = state.master_id
    new: int | None = None
    if state.master_epoch == 0 and broker_id in state.replicas:
        new = broker_id  # nobody was ever master: the first to ask is
    else:
        new = policy.elect(state.broker_name, state.sync_state_set, frozenset(state.replicas) if unclean else None,
                           old, broker_id if designate else None)
    if new is not None and new == old:
        return Election(None, Refusal(ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                                      f"the master {old} of {state.broker_name} is still alive, no election needed"))
    if new is not None:
        log.info("%s: elected master %d (%s), master epoch %d", state.broker_name, new, state.replicas[new],
                 state.master_epoch + 1)
        return Election(dataclasses.replace(state, master_id=new, master_epoch=state.master_epoch + 1,
                                            sync_state_set=frozenset({new}),
                                            sync_state_set_epoch=state.sync_state_set_epoch + 1))
    log.warning("%s: failed to elect a new master (SyncStateSet %s)", state.broker_name, sorted(state.sync_state_set))
    if broker_id == CONTROLLER_TRIGGER:
        lost = dataclasses.replace(state, master_id=None) if old is not None else None
        return Election(lost, Refusal(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                                      "Old master has down and failed to elect a new broker master"))
    return Election(None, Refusal(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master"))


def needs_new_master(state: BrokerSetState, alive: AliveCheck) -> bool:
    """A set whose master is dead while another replica lives (RocketMQ's scanNeedReelectBrokerSets), or
    that lost its master to a failed election (no live SyncStateSet member then) and has a live member
    again: a master that stalled past its heartbeat timeout while the set was itself alone, say, or a
    member restarted. Without this the set would stay masterless, its brokers waiting for a master."""
    if state.master_id is None:
        return state.master_epoch > 0 and any(alive(i) for i in state.sync_state_set)
    return not alive(state.master_id) and any(alive(i) for i in state.replicas if i != state.master_id)
