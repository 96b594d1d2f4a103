"""``BrokerOffsets`` when a broker set's master does not answer: the offsets come from its slave (a master
killed after the route was read, before the NameServer dropped it), and later questions go to the slave
first; while no member answers (an election under way) it asks them again for a while."""

from __future__ import annotations

import pytest

from spark_mq.arrow import queues
from spark_mq.arrow.queues import BrokerOffsets, TopicQueues
from spark_mq.common.errors import MQClientError, RemotingConnectError
from spark_mq.remoting.codes import ResponseCode

MASTER, SLAVE = "127.0.0.1:1", "127.0.0.1:2"


class Api:
    """Max offsets per address; the addresses in ``dead`` do not answer. Records every address asked."""

    def __init__(self, offsets: dict[str, int], dead: set[str]) -> None:
        self.offsets = offsets
        self.dead = dead
        self.asked: list[str] = []

    def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        self.asked.append(addr)
        if addr in self.dead:
            raise RemotingConnectError(f"cannot connect to {addr}")
        return self.offsets[addr] + queue_id


def _queues() -> TopicQueues:
    return TopicQueues("T", {"b": MASTER}, (("b", 0), ("b", 1)), {"b": ((0, MASTER), (1, SLAVE))})


def test_a_master_that_does_not_answer_is_replaced_by_its_slave():
    api = Api({MASTER: 100, SLAVE: 90}, dead={MASTER})
    source = BrokerOffsets(api, _queues())  # type: ignore[arg-type]
    assert source.max_offset(("b", 0)) == 90
    assert source.max_offset(("b", 1)) == 91
    assert api.asked == [MASTER, SLAVE, SLAVE]  # the dead master is asked once, not per queue


def test_a_live_master_is_asked_and_no_member_answering_is_an_error(monkeypatch):
    monkeypatch.setattr(queues, "FAILOVER_PATIENCE_S", 0.5)
    api = Api({MASTER: 100, SLAVE: 90}, dead=set())
    assert BrokerOffsets(api, _queues()).max_offset(("b", 1)) == 101  # type: ignore[arg-type]
    assert api.asked == [MASTER]
    api.dead = {MASTER, SLAVE}
    with pytest.raises(RemotingConnectError):
        BrokerOffsets(api, _queues()).max_offset(("b", 0))  # type: ignore[arg-type]


def test_members_that_all_refuse_for_a_moment_are_asked_again():
    """Every member refuses its first two questions (the master dead, its slaves restarting their parts as one
    of them is elected): the lookup goes round them again and takes the first answer."""
    api = Api({MASTER: 100, SLAVE: 90}, dead={MASTER, SLAVE})

    def get_max_offset(addr: str, topic: str, queue_id: int) -> int:
        if api.asked.count(addr) >= 2:
            api.dead.discard(addr)
        return Api.get_max_offset(api, addr, topic, queue_id)

    api.get_max_offset = get_max_offset  # type: ignore[method-assign]
    assert BrokerOffsets(api, _queues()).max_offset(("b", 0)) == 100  # type: ignore[arg-type]
    assert api.asked == [MASTER, SLAVE, MASTER, SLAVE, MASTER]


def test_a_member_that_refuses_to_serve_is_passed_over_and_other_errors_are_not():
    """SERVICE_NOT_AVAILABLE (a slave of a controller-mode set whose puts wait for replicas serves no reads)
    moves on to the next member, as an unreachable one does; any other refusal is the caller's to see."""
    api = Api({MASTER: 100, SLAVE: 90}, dead=set())
    refusal = {SLAVE: ResponseCode.SERVICE_NOT_AVAILABLE}

    def get_max_offset(addr: str, topic: str, queue_id: int) -> int:
        api.asked.append(addr)
        if addr in refusal:
            raise MQClientError(refusal[addr], "a slave", addr, "GET_MAX_OFFSET")
        return api.offsets[addr] + queue_id

    api.get_max_offset = get_max_offset  # type: ignore[method-assign]
    slave_first = TopicQueues("T", {"b": SLAVE}, (("b", 0),), {"b": ((0, MASTER), (1, SLAVE))})
    assert BrokerOffsets(api, slave_first).max_offset(("b", 0)) == 100  # type: ignore[arg-type]
    assert api.asked == [SLAVE, MASTER]
    refusal[SLAVE] = ResponseCode.SYSTEM_ERROR
    with pytest.raises(MQClientError):
        BrokerOffsets(api, slave_first).max_offset(("b", 0))  # type: ignore[arg-type]


def test_a_round_in_which_none_answers_asks_the_route_again_for_the_set_s_members():
    """A range planned from a route read mid-election may know one refusing slave only; the new master the
    route names afterwards is asked next."""
    new_master = "127.0.0.1:3"
    asked: list[str] = []

    def pull(addr: str) -> str:
        asked.append(addr)
        if addr != new_master:
            raise MQClientError(ResponseCode.SERVICE_NOT_AVAILABLE, "a slave", addr, "PULL_MESSAGE")
        return "found"

    assert queues.first_answering([SLAVE], pull, "q", refresh=lambda: [new_master, SLAVE]) == "found"
    assert asked == [SLAVE, new_master]
