"""PullConsumer and LitePullConsumer against real ``spark-mq namesrv`` / ``spark-mq broker`` processes:
explicit pulls, offsets and tag filtering; a group splitting an 8-queue topic, a member joining
(NOTIFY_CONSUMER_IDS_CHANGED) and leaving with every message polled exactly once; where a new
group starts (first, last, timestamp); manual commit and seek.

Test data is sent with ``SyncMQClientAPI.send_batch`` (no Producer needed)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from servers import LONG_SUSPEND_MS, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.ids import uniq_keys
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import PullStatus
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ClientError
from spark_mq.common.message import Message, MessageBatch
from spark_mq.remoting.bodies import MessageQueue

BROKER_NAME = "broker-a"  # the name of the ``cluster`` fixture's broker
BLOCK_S = LONG_SUSPEND_MS / 1000  # a blocking pull answered within half its suspend was woken, not timed out
NOTIFIED_ONLY_S = 3600.0  # a rebalance interval no test outlasts: a member rebalances only when notified


@pytest.fixture(scope="module")
def api():
    with SyncMQClientAPI(timeout=5.0) as a:
        yield a


@pytest.fixture
def consumers():
    """``consumers.append(c)``: shut down after the test if still running."""
    made: list = []
    yield made
    for c in made:
        c.shutdown()


def make_topic(api, cluster, queues: int) -> str:
    topic = unique("pull_topic")
    api.create_topic(cluster.broker, topic, queues, queues)
    wait_until(lambda: api.get_route_info(cluster.namesrv, topic), what=f"route of {topic}")
    return topic


def send(api, cluster, topic: str, queue_id: int, bodies: list[str], tags: list[str | None] | None = None):
    tags = tags or [None] * len(bodies)
    msgs = [Message(topic, b.encode(), tags=t) for b, t in zip(bodies, tags, strict=True)]
    batch = MessageBatch.from_messages(msgs, queue_id, [k.decode() for k in uniq_keys(len(msgs))])
    return api.send_batch(cluster.broker, batch, "pull-test-producer")


def send_round(api, cluster, topic: str, queues: int, per_queue: int, label: str) -> set[str]:
    bodies = set()
    for q in range(queues):
        chunk = [f"{label}-{q}-{i}" for i in range(per_queue)]
        send(api, cluster, topic, q, chunk)
        bodies.update(chunk)
    return bodies


def lite(cluster, group: str, topic: str, consumers: list, expression: str = "*", **kwargs) -> SyncLitePullConsumer:
    c = SyncLitePullConsumer(group, ClientConfig(cluster.namesrv, instance_name=unique("inst")), **kwargs)
    c.subscribe(topic, expression)
    c.start()
    consumers.append(c)
    return c


def drain(members: list, expected: int, timeout: float = 15.0, settle: float = 0.6) -> list[tuple[int, object]]:
    """Poll every member round-robin until ``expected`` messages came, then ``settle`` s more
    (to see any duplicate); returns (member index, message) pairs."""
    got: list[tuple[int, object]] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    while time.monotonic() < deadline:
        for i, c in enumerate(members):
            got.extend((i, m) for m in c.poll(0.05))
        if len(got) >= expected:
            quiet_until = quiet_until or time.monotonic() + settle
            if time.monotonic() >= quiet_until:
                break
    return got


def bodies_of(pairs) -> list[str]:
    return [m.body.decode() for _, m in pairs]


def is_partition(assignments: list[frozenset], everything: set) -> bool:
    return sum(len(a) for a in assignments) == len(everything) and set().union(*assignments) == everything


def test_pull_consumer_explicit_pulls_offsets_and_tag_filter(api, cluster):
    topic = make_topic(api, cluster, 4)
    group = unique("pull_group")
    # "Aa" and "BB" share a Java hash code: the broker returns both, the client keeps only the tag asked for
    tags = ["Aa", "BB", "c", "Aa", "BB", "c", "Aa", "BB", "c", "Aa"]
    send(api, cluster, topic, 0, [f"m{i}" for i in range(10)], tags)
    with SyncPullConsumer(group, ClientConfig(cluster.namesrv, instance_name=unique("inst"))) as c:
        c.start()
        queues = c.fetch_queues(topic)
        assert queues == [MessageQueue(topic, BROKER_NAME, i) for i in range(4)]
        q0 = queues[0]

        everything = c.pull(q0, 0, 32)
        assert everything.status == PullStatus.FOUND
        assert [m.body for m in everything.messages] == [f"m{i}".encode() for i in range(10)]
        assert (everything.next_begin_offset, everything.min_offset, everything.max_offset) == (10, 0, 10)

        middle = c.pull(q0, 3, 2)
        assert [m.queue_offset for m in middle.messages] == [3, 4] and middle.next_begin_offset == 5

        assert c.pull(q0, 10, 32).status == PullStatus.NO_NEW_MSG
        assert c.pull(queues[1], 0, 32).status == PullStatus.NO_NEW_MSG

        only_aa = c.pull(q0, 0, 32, "Aa")
        assert [m.queue_offset for m in only_aa.messages] == [0, 3, 6, 9]
        assert {m.tags for m in only_aa.raw.messages()} == {"Aa", "BB"}  # what the broker's hash filter let by
        assert [m.tags for m in c.pull(q0, 0, 32, "c || BB").messages] == ["BB", "c"] * 3

        # a blocking pull is held by the broker until a message arrives (long polling): the message is
        # sent once the broker reports the pull held, and answers it well before its suspend timeout
        def send_once_held() -> None:
            wait_until(lambda: api.get_broker_runtime_info(cluster.broker)["pullHoldWaiters"] == "1",
                       what="the blocking pull held at the broker")  # the module's first test: nothing else holds
            send(api, cluster, topic, 1, ["late"])

        sender = threading.Thread(target=send_once_held)
        started = time.monotonic()
        sender.start()
        late = c.pull(queues[1], 0, 32, block_s=BLOCK_S)
        waited = time.monotonic() - started
        sender.join()
        assert [m.body for m in late.messages] == [b"late"]
        assert waited < BLOCK_S / 2, f"answered after {waited:.1f} s: by its suspend timeout, not the message"

        assert c.read_offset(q0) == -1  # the group never committed
        c.update_offset(q0, 7)
        c.persist(q0)
    assert api.query_consumer_offset(cluster.broker, group, topic, 0) == 7
    with SyncPullConsumer(group, ClientConfig(cluster.namesrv, instance_name=unique("inst"))) as again:
        again.start()
        assert again.read_offset(q0) == 7
        with pytest.raises(ClientError, match="does it exist"):
            again.fetch_queues(unique("no_such_topic"))


def test_lite_group_splits_queues_and_rebalances_on_join_and_leave(api, cluster, consumers):
    topic = make_topic(api, cluster, 8)
    group = unique("lite_group")
    everything = {MessageQueue(topic, BROKER_NAME, i) for i in range(8)}
    # no periodic rebalance: every move below is caused by the broker's NOTIFY_CONSUMER_IDS_CHANGED
    a = lite(cluster, group, topic, consumers, consume_from="first", rebalance_interval_s=NOTIFIED_ONLY_S)
    b = lite(cluster, group, topic, consumers, consume_from="first", rebalance_interval_s=NOTIFIED_ONLY_S)
    wait_until(lambda: is_partition([a.assignment(), b.assignment()], everything), 15, "A and B to split the queues")
    assert len(a.assignment()) == len(b.assignment()) == 4

    sent = send_round(api, cluster, topic, 8, 25, "one")
    got = drain([a, b], len(sent))
    assert Counter(bodies_of(got)) == Counter(sent)  # each exactly once
    assert {i for i, _ in got} == {0, 1}
    a.commit()  # auto-commit: persist what poll returned now rather than at the next 5 s tick
    b.commit()

    # a third member joins: the broker's NOTIFY_CONSUMER_IDS_CHANGED makes everyone rebalance at once
    c = lite(cluster, group, topic, consumers, consume_from="first", rebalance_interval_s=NOTIFIED_ONLY_S)
    wait_until(lambda: is_partition([a.assignment(), b.assignment(), c.assignment()], everything)
               and all(x.assignment() for x in (a, b, c)), 15, "three-way split after the join")
    sent2 = send_round(api, cluster, topic, 8, 20, "two")
    got2 = drain([a, b, c], len(sent2))
    assert Counter(bodies_of(got2)) == Counter(sent2)
    assert {i for i, _ in got2} == {0, 1, 2}
    c_queues = c.assignment()

    # it leaves (offsets persisted first): the others take its queues over from its committed offsets.
    # Queues also move between A and B here, and each reads the other's *persisted* offset: persist
    # now, or whatever was polled since the last 5 s tick is read twice (at-least-once, as RocketMQ)
    a.commit()
    b.commit()
    c.shutdown()
    for mq in c_queues:
        assert api.query_consumer_offset(cluster.broker, group, topic, mq.queue_id) == 45
    wait_until(lambda: is_partition([a.assignment(), b.assignment()], everything), 15, "A and B to take C's queues")
    sent3 = send_round(api, cluster, topic, 8, 15, "three")
    got3 = drain([a, b], len(sent3))
    assert Counter(bodies_of(got3)) == Counter(sent3)  # no loss, no duplicate of C's messages
    a.shutdown()
    b.shutdown()
    for q in range(8):
        assert api.query_consumer_offset(cluster.broker, group, topic, q) == 60


def test_lite_consume_from_first_last_timestamp_for_a_new_group(api, cluster, consumers):
    topic = make_topic(api, cluster, 2)
    old = send_round(api, cluster, topic, 2, 5, "old")
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    newer = send_round(api, cluster, topic, 2, 3, "newer")

    first = lite(cluster, unique("from_first"), topic, consumers, consume_from="first")
    assert Counter(bodies_of(drain([first], len(old | newer)))) == Counter(old | newer)

    since = lite(cluster, unique("from_ts"), topic, consumers, consume_from=boundary_ms)
    assert Counter(bodies_of(drain([since], len(newer)))) == Counter(newer)

    last_group = unique("from_last")
    last = lite(cluster, last_group, topic, consumers, consume_from="last")
    assert last.poll(0.5) == []  # nothing old
    latest = send_round(api, cluster, topic, 2, 2, "latest")
    assert Counter(bodies_of(drain([last], len(latest)))) == Counter(latest)
    last.shutdown()

    # a committed offset wins over consume_from
    again = lite(cluster, last_group, topic, consumers, consume_from="first")
    assert again.poll(0.5) == []
    assert {again.committed(mq) for mq in again.assignment()} == {10}


def test_lite_manual_commit_seek_and_tag_filter(api, cluster, consumers):
    topic = make_topic(api, cluster, 1)
    group = unique("manual")
    send(api, cluster, topic, 0, [f"m{i}" for i in range(6)], ["x", "y"] * 3)
    c = lite(cluster, group, topic, consumers, "x", auto_commit=False, consume_from="first")
    (mq,) = c.assignment()
    assert [m.body for m in c.poll(5)] == [b"m0", b"m2", b"m4"]
    assert c.committed(mq) == -1  # nothing committed until commit()
    c.commit()
    assert c.committed(mq) == 6  # past the filtered-out tail too
    c.seek(mq, 1)
    assert [m.body for m in c.poll(5)] == [b"m2", b"m4"]
    with pytest.raises(ClientError, match="outside"):
        c.seek(mq, 99)
    with pytest.raises(ClientError, match="not assigned"):
        c.seek(MessageQueue(topic, BROKER_NAME, 5), 0)
    c.shutdown()  # a seek without commit is not persisted
    assert api.query_consumer_offset(cluster.broker, group, topic, 0) == 6
