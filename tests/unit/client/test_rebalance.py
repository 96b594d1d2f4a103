"""Allocation strategies against their defining properties (every queue to exactly one member,
balanced, order-independent, consistent hashing moves only what it must) and RocketMQ's examples."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.rebalance import (
    STRATEGIES,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    allocate_average,
    allocate_average_by_circle,
    diff,
    get_strategy,
    md5_hash,
    queue_key,
    rebalance_result,
)
from spark_mq.common.errors import ConfigError
from spark_mq.remoting.bodies import MessageQueue

GROUP = "g"

queues = st.lists(
    st.builds(MessageQueue, st.sampled_from(["t1", "t2"]), st.sampled_from(["broker-a", "broker-b", "broker-c"]),
              st.integers(0, 15)),
    unique=True, max_size=40)
cids = st.lists(st.integers(0, 9999), unique=True, min_size=1, max_size=12).map(
    lambda ns: [f"10.0.0.{n % 256}@{n}" for n in ns])

ROOMS = {"broker-a": "hz", "broker-b": "sh", "broker-c": "bj"}


def nearby(inner=allocate_average):
    return AllocateMachineRoomNearby(inner, ROOMS.__getitem__,
                                     lambda cid: ("hz", "sh")[int(cid.rpartition("@")[2]) % 2])


ALL = {**STRATEGIES, "consistent_hash_3": AllocateConsistentHash(3), "nearby_average": nearby(),
       "nearby_circle": nearby(allocate_average_by_circle)}


def mq(i: int, topic: str = "t", broker: str = "broker-a") -> MessageQueue:
    return MessageQueue(topic, broker, i)


def allocation(strategy, mqs, members) -> dict[str, list[MessageQueue]]:
    return {cid: strategy(GROUP, cid, mqs, members) for cid in members}


@pytest.mark.parametrize("name", sorted(ALL))
@settings(max_examples=100)
@given(mqs=queues, members=cids, data=st.data())
def test_every_queue_goes_to_exactly_one_member(name, mqs, members, data):
    strategy = ALL[name]
    owned = allocation(strategy, mqs, members)
    flat = [q for qs in owned.values() for q in qs]
    assert sorted(flat) == sorted(mqs)  # union is mq_all, and nothing twice
    # input order does not matter
    shuffled_mqs = data.draw(st.permutations(mqs))
    shuffled_cids = data.draw(st.permutations(members))
    assert allocation(strategy, shuffled_mqs, shuffled_cids) == {c: owned[c] for c in shuffled_cids}


@pytest.mark.parametrize("name", sorted(ALL))
@given(mqs=queues, members=cids)
def test_a_stranger_gets_nothing(name, mqs, members):
    assert ALL[name](GROUP, "10.9.9.9@stranger", mqs, members) == []


@pytest.mark.parametrize("strategy", [allocate_average, allocate_average_by_circle])
@settings(max_examples=150)
@given(mqs=queues, members=cids)
def test_average_sizes_differ_by_at_most_one(strategy, mqs, members):
    sizes = [len(v) for v in allocation(strategy, mqs, members).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150)
@given(mqs=queues, members=cids)
def test_average_gives_contiguous_blocks_in_member_order(mqs, members):
    owned = allocation(allocate_average, mqs, members)
    assert [q for cid in sorted(members) for q in owned[cid]] == sorted(mqs)


@settings(max_examples=100)
@given(mqs=queues, members=cids, joiner=st.integers(0, 9999).map(lambda n: f"10.1.1.{n % 256}@{n}"))
def test_consistent_hash_moves_only_the_joiner_s_queues(mqs, members, joiner):
    strategy = AllocateConsistentHash()
    before = allocation(strategy, mqs, members)
    after = allocation(strategy, mqs, [*members, joiner])
    owner_before = {q: c for c, qs in before.items() for q in qs}
    owner_after = {q: c for c, qs in after.items() for q in qs}
    moved = {q for q in mqs if owner_before[q] != owner_after[q]}
    # a join moves queues only to the joiner; the leave (the reverse) moves only the leaver's queues
    assert all(owner_after[q] == joiner for q in moved)
    assert moved == set(after[joiner])


def test_consistent_hash_moves_fewer_queues_than_average_on_a_join():
    mqs = [mq(i, broker=b) for b in ("broker-a", "broker-b") for i in range(64)]
    members = [f"10.0.0.{i}@{i}" for i in range(1, 8)]

    def moved(strategy):
        before = {q: c for c, qs in allocation(strategy, mqs, members).items() for q in qs}
        after = {q: c for c, qs in allocation(strategy, mqs, [*members, "10.0.0.99@99"]).items() for q in qs}
        return sum(before[q] != after[q] for q in mqs)

    assert moved(AllocateConsistentHash()) < len(mqs) / 2  # expected ~1/8 of them
    assert moved(AllocateConsistentHash()) < moved(allocate_average)


def test_rocketmq_examples_8_queues_3_consumers():
    mqs = [mq(i) for i in range(8)]
    members = ["c1", "c2", "c3"]
    assert allocation(allocate_average, mqs, members) == {
        "c1": [mq(0), mq(1), mq(2)], "c2": [mq(3), mq(4), mq(5)], "c3": [mq(6), mq(7)]}
    assert allocation(allocate_average_by_circle, mqs, members) == {
        "c1": [mq(0), mq(3), mq(6)], "c2": [mq(1), mq(4), mq(7)], "c3": [mq(2), mq(5)]}


def test_rocketmq_examples_more_consumers_than_queues():
    mqs = [mq(0), mq(1)]
    assert allocation(allocate_average, mqs, ["c1", "c2", "c3"]) == {"c1": [mq(0)], "c2": [mq(1)], "c3": []}
    assert allocation(allocate_average_by_circle, mqs, ["c1", "c2", "c3"]) == {"c1": [mq(0)], "c2": [mq(1)],
                                                                              "c3": []}


def test_average_sorts_queues_like_java_compare_to():
    mqs = [mq(10, broker="b"), mq(2, broker="b"), mq(1, broker="a")]
    assert allocate_average(GROUP, "c1", mqs, ["c1", "c2"]) == [mq(1, broker="a"), mq(2, broker="b")]
    assert allocate_average(GROUP, "c2", mqs, ["c2", "c1"]) == [mq(10, broker="b")]


def test_md5_hash_and_queue_key_match_rocketmq():
    assert md5_hash("") == 0xD41D8CD9  # MD5("") = d41d8cd98f00b204e9800998ecf8427e
    key = queue_key(MessageQueue("TopicTest", "broker-a", 3))
    assert key == "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=3]"
    assert md5_hash(key) == int(hashlib.md5(key.encode()).hexdigest()[:8], 16)


def test_consistent_hash_routes_to_the_next_point_clockwise():
    strategy = AllocateConsistentHash(1, hash={"a-0": 100, "b-0": 200}.__getitem__)
    hashes, owners = strategy.ring(["a", "b"])
    assert (hashes, owners) == ([100, 200], ["a", "b"])
    assert AllocateConsistentHash.route(hashes, owners, 50) == "a"
    assert AllocateConsistentHash.route(hashes, owners, 100) == "a"
    assert AllocateConsistentHash.route(hashes, owners, 150) == "b"
    assert AllocateConsistentHash.route(hashes, owners, 250) == "a"


def test_machine_room_nearby_keeps_queues_in_the_room_and_shares_orphans():
    mqs = [mq(i, broker=b) for b in ("broker-a", "broker-b", "broker-c") for i in range(2)]
    strategy = nearby()
    hz, sh = "10.0.0.1@2", "10.0.0.1@1"  # even pid: hz, odd pid: sh
    owned = allocation(strategy, mqs, [hz, sh])
    assert {q.broker_name for q in owned[hz]} <= {"broker-a", "broker-c"}
    assert {q.broker_name for q in owned[sh]} <= {"broker-b", "broker-c"}
    assert [q for q in owned[hz] if q.broker_name == "broker-a"] == [mq(0), mq(1)]
    assert len([q for q in owned[hz] + owned[sh] if q.broker_name == "broker-c"]) == 2


def test_get_strategy_names_the_valid_ones():
    assert get_strategy("average") is allocate_average
    assert get_strategy("circle") is allocate_average_by_circle
    assert isinstance(get_strategy("consistent_hash"), AllocateConsistentHash)
    with pytest.raises(ConfigError, match="average, circle, consistent_hash"):
        get_strategy("random")
    with pytest.raises(ConfigError):
        AllocateConsistentHash(0)


def test_diff_and_rebalance_result():
    old, new = {mq(0), mq(1)}, {mq(1), mq(2)}
    assert diff(old, new) == ({mq(2)}, {mq(0)})
    result = rebalance_result(old, new)
    assert result.assigned == new and result.added == {mq(2)} and result.removed == {mq(0)} and result.changed
    assert not rebalance_result(old, old).changed
