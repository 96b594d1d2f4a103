"""Reads from slaves (issue 14): with ``slaveReadEnable`` a pull reading further behind the commitlog's end
than ``accessMessageInMemoryMaxRatio`` of memory is told to read the slave (suggestWhichBrokerId 1), a
caught-up one the master (0), unless its subscription group says otherwise; our consumers follow that and, with
the master SIGKILLed, read the slave. A pull held on the slave is answered by what replication brings.

The memory figure is set small (``totalPhysicalMemorySize``) so a few hundred KB make a reader "far behind"."""

from __future__ import annotations

import asyncio
from collections import Counter

from broker._support import pull_header, send_header
from broker.test_admin import scrape
from servers import LONG_SUSPEND_MS, WOKEN_WITHIN_S, Broker, free_port, unique, until_held, wait_until

from spark_mq.arrow.queues import BrokerOffsets, discover_queues
from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.client.api import MQClientAPI
from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.remoting.bodies import MessageQueue, SubscriptionGroupConfig
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from ._support import SMALL_FILES
from .conftest import Pair
from .test_replication import QUEUES, REPLICATION_TIMEOUT_S, make_topic, replicated, send_batches, slave_connected

# 40 % of 100 000 bytes: a reader more than 40 000 commitlog bytes behind the end is "far behind"
SMALL_MEMORY = "totalPhysicalMemorySize=100000\naccessMessageInMemoryMaxRatio=40\n"
SLAVE_READ = f"slaveReadEnable=true\n{SMALL_MEMORY}"
BATCHES = 40
LAST_QUEUE = (BATCHES - 1) % QUEUES  # holds the commitlog's last message: its last offset is caught up


def suggestion(api, addr: str, topic: str, queue_id: int, offset: int, group: str = "ha_reader") -> int:
    result = api.pull_message(addr, pull_header(group, topic, queue_id, offset, max_nums=1))
    assert result.status == PullStatus.FOUND
    return result.suggest_which_broker_id


def test_far_behind_reader_is_sent_to_the_slave_only_with_slave_read_enable(ha_pair, api):
    # the master reads from slaves, its slave does not (the same small memory figure on both)
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SMALL_MEMORY)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=3)  # ~500 KB over 4 queues
    replicated(pair)
    q = LAST_QUEUE
    last = api.pull_message(pair.master.addr, pull_header("ha_reader", topic, q, 0, max_nums=1)).max_offset - 1

    assert suggestion(api, pair.master.addr, topic, q, 0) == 1  # far behind: read the slave
    assert suggestion(api, pair.master.addr, topic, q, last) == 0  # caught up: stay on the master
    # slaveReadEnable off: always the master, however far behind
    assert suggestion(api, pair.slave.addr, topic, q, 0) == 0
    assert suggestion(api, pair.slave.addr, topic, q, last) == 0


def test_slave_with_slave_read_enable_sends_a_caught_up_reader_back_to_the_master(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SLAVE_READ)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=4)
    replicated(pair)
    q = LAST_QUEUE
    last = api.pull_message(pair.slave.addr, pull_header("ha_reader", topic, q, 0, max_nums=1)).max_offset - 1
    assert suggestion(api, pair.slave.addr, topic, q, 0) == 1  # still far behind: stay on the slave
    assert suggestion(api, pair.slave.addr, topic, q, last) == 0  # caught up: back to the master


def test_a_group_configured_to_read_the_slave_is_sent_there_even_when_caught_up(ha_pair, api):
    """RocketMQ's per-group choice (SubscriptionGroupConfig brokerId / whichBrokerWhenConsumeSlowly, mqadmin
    updateSubGroup -i / -w): a caught-up reader goes to the group's brokerId, a far-behind one to its
    whichBrokerWhenConsumeSlowly; the slave copies the group from its master and answers the same."""
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=f"{SLAVE_READ}slaveSynchronizeInterval=1000\n")
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=8)
    replicated(pair)
    group = unique("ha_slave_reader")
    body = SubscriptionGroupConfig(group, broker_id=1, which_broker_when_consume_slowly=0).to_json()
    with SyncRemotingClient() as remoting:
        resp = remoting.invoke(pair.master.addr,
                               RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    q = LAST_QUEUE
    last = api.pull_message(pair.master.addr, pull_header(group, topic, q, 0, max_nums=1)).max_offset - 1

    assert suggestion(api, pair.master.addr, topic, q, last, group) == 1  # caught up: the group's brokerId
    assert suggestion(api, pair.master.addr, topic, q, 0, group) == 0  # far behind: its whichBrokerWhenConsumeSlowly
    wait_until(lambda: suggestion(api, pair.slave.addr, topic, q, last, group) == 1, REPLICATION_TIMEOUT_S,
               "the slave to copy the group and keep a caught-up reader of it")
    assert suggestion(api, pair.slave.addr, topic, q, 0, group) == 0
    # a group never configured: RocketMQ's defaults (the master when caught up, the slave when far behind)
    assert suggestion(api, pair.slave.addr, topic, q, last) == 0
    assert suggestion(api, pair.master.addr, topic, q, 0) == 1


def test_a_pull_held_on_the_slave_is_woken_by_what_the_master_replicates(ha_pair, api):
    """A slave's messages arrive as replicated commitlog bytes, never as sends: each transfer wakes the pulls
    held there that it satisfies (each pull seen held before the send, and answered within half its suspend
    timeout: woken, not timed out)."""
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)

    async def main():
        async with MQClientAPI(timeout=5.0) as a:
            for offset in range(5):
                held = asyncio.ensure_future(a.pull_message(
                    pair.slave.addr, pull_header("ha_poll", topic, 0, offset, suspend_ms=LONG_SUSPEND_MS)))
                await until_held(a, pair.slave.addr, 1)
                sent = await a.send_message(pair.master.addr, send_header(topic, 0), f"m{offset}".encode())
                assert sent.status == SendStatus.SEND_OK  # a SYNC_MASTER: the slave has it
                r = await asyncio.wait_for(held, WOKEN_WITHIN_S)
                assert r.status == PullStatus.FOUND
                assert [(m.queue_offset, m.body) for m in r.messages()] == [(offset, f"m{offset}".encode())]

    asyncio.run(main())


def consume(consumer: SyncPullConsumer, mq: MessageQueue, offset: int,
            up_to: int | None = None) -> tuple[list[bytes], int]:
    """Pull ``mq`` from ``offset`` until nothing new (or ``up_to``); the bodies and the next offset."""
    bodies: list[bytes] = []
    while up_to is None or offset < up_to:
        result = consumer.pull(mq, offset, 16 if up_to is None else min(16, up_to - offset))
        if result.status is not PullStatus.FOUND:
            assert result.status is PullStatus.NO_NEW_MSG
            break
        bodies += [m.body for m in result.messages]
        offset = result.next_begin_offset
    return bodies, offset


def test_pull_consumer_reads_every_acknowledged_message_from_the_slave_after_a_master_kill(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    acked = []  # the producer's ledger: every SEND_OK (a SYNC_MASTER: the slave has it)
    for i in range(400):
        body = f"m{i}".encode()
        if api.send_message(pair.master.addr, send_header(topic, i % QUEUES), body).status == SendStatus.SEND_OK:
            acked.append(body)
    assert len(acked) == 400

    group = unique("ha_group")
    config = ClientConfig(namesrv, instance_name=unique("inst"), poll_name_server_interval_s=1.0)
    with SyncPullConsumer(group, config) as consumer:
        consumer.start()
        queues = consumer.fetch_queues(topic)
        got: list[bytes] = []
        offsets = {}
        for mq in queues:  # half of each queue from the master, committed there
            bodies, offsets[mq] = consume(consumer, mq, 0, up_to=50)
            got += bodies
            consumer.update_offset(mq, offsets[mq])
        consumer.persist()
        assert {mq.queue_id: api.query_consumer_offset(pair.master.addr, group, topic, mq.queue_id)
                for mq in queues} == {q: 50 for q in range(QUEUES)}

        pair.master.kill()
        for mq in queues:  # the rest from the slave
            bodies, offsets[mq] = consume(consumer, mq, consumer.read_offset(mq, from_store=False))
            got += bodies
            consumer.update_offset(mq, offsets[mq])

        # committed while the master is down: the slave keeps the offsets (once the route has no master)
        def committed_on_slave():
            consumer.persist()
            return all(api.query_consumer_offset(pair.slave.addr, group, topic, mq.queue_id) == offsets[mq]
                       for mq in queues)
        wait_until(committed_on_slave, REPLICATION_TIMEOUT_S, "the offsets committed to the slave")

    counts = Counter(got)
    lost = [b for b in acked if b not in counts]
    duplicates = [b for b, n in counts.items() if n > 1]
    assert (lost, duplicates) == ([], [])
    assert sorted(got) == sorted(acked)


def test_pull_consumer_follows_the_suggestion_to_read_the_slave(ha_pair, api, namesrv):
    pair = ha_pair("ASYNC_MASTER", master_conf=SLAVE_READ, slave_conf=SLAVE_READ)
    topic = make_topic(api, pair)
    send_batches(api, pair.master.addr, topic, BATCHES, seed=5)
    replicated(pair)
    with SyncPullConsumer(unique("ha_group"), ClientConfig(namesrv, instance_name=unique("inst"))) as consumer:
        consumer.start()
        mq = MessageQueue(topic, pair.name, LAST_QUEUE)
        instance = consumer._target.instance
        first = consumer.pull(mq, 0, 1)  # from the master, far behind: it suggests the slave
        assert first.raw.suggest_which_broker_id == 1
        assert instance.pull_addrs(mq)[0] == pair.slave.addr
        last = first.max_offset - 1
        caught_up = consumer.pull(mq, last, 1)  # from the slave: caught up, back to the master
        assert [m.queue_offset for m in caught_up.messages] == [last]
        assert instance.pull_addrs(mq)[0] == pair.master.addr


def test_range_reader_planned_on_the_master_reads_the_slave_once_the_master_is_killed(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    sent = send_batches(api, pair.master.addr, topic, 8, seed=6)  # SEND_OK from a SYNC_MASTER: the slave has them
    queues = discover_queues(api, [namesrv], topic)
    offsets = BrokerOffsets(api, queues)
    parts = [QueueRange(topic, pair.name, queues.addr(key), key[1], 0, offsets.max_offset(key), "", "ha_spark", 64,
                        True, queues.members_of(key)) for key in queues.queues]
    assert {p.broker_addr for p in parts} == {pair.master.addr}  # planned while the master was up

    pair.master.kill()
    got = [body for p in parts for batch in read_range(p, columns=["body"])
           for body in batch.column("body").to_pylist()]
    assert sorted(got) == sorted(sent)


def test_lite_pull_consumer_keeps_consuming_from_the_slave_after_a_master_kill(ha_pair, api, namesrv):
    pair = ha_pair("SYNC_MASTER")
    topic = make_topic(api, pair)
    slave_connected(pair)
    config = ClientConfig(namesrv, instance_name=unique("inst"), poll_name_server_interval_s=1.0,
                          heartbeat_broker_interval_s=1.0)
    acked: list[bytes] = []
    got: list[bytes] = []

    def send(n: int) -> None:
        for _ in range(n):
            body = f"m{len(acked)}".encode()
            if api.send_message(pair.master.addr, send_header(topic, len(acked) % QUEUES),
                                body).status == SendStatus.SEND_OK:
                acked.append(body)

    def consumed_all() -> bool:
        got.extend(m.body for m in consumer.poll(timeout=0.5))
        return len(got) >= len(acked)

    with SyncLitePullConsumer(unique("ha_lite"), config, consume_from="first", rebalance_interval_s=1.0,
                              pull_suspend_s=1.0) as consumer:
        consumer.subscribe(topic)
        consumer.start()
        send(200)
        wait_until(consumed_all, REPLICATION_TIMEOUT_S, "the first messages consumed from the master")
        consumer.commit()
        # the rest: sent before the kill (acknowledged, so on the slave), consumed after it
        send(200)
        pair.master.kill()
        wait_until(consumed_all, REPLICATION_TIMEOUT_S, "every acknowledged message consumed from the slave")

    counts = Counter(got)
    assert ([b for b in acked if b not in counts], [b for b, n in counts.items() if n > 1]) == ([], [])


def test_range_reader_follows_the_suggestion_to_the_slave(tmp_path, api, namesrv):
    name, ha_port = unique("ha"), free_port()
    master = Broker(namesrv, tmp_path / "master", f"{SMALL_FILES}haListenPort={ha_port}\n{SLAVE_READ}",
                    broker_name=name, metrics=True)
    slave = Broker(namesrv, tmp_path / "slave", f"{SMALL_FILES}brokerRole=SLAVE\nbrokerId=1\n{SLAVE_READ}",
                   broker_name=name, metrics=True)
    try:
        pair = Pair(master, slave, name, ha_port)
        topic = make_topic(api, pair)
        sent = send_batches(api, master.addr, topic, BATCHES, seed=7)
        replicated(pair)
        queues = discover_queues(api, [namesrv], topic)
        key = (name, LAST_QUEUE)
        end = BrokerOffsets(api, queues).max_offset(key)
        part = QueueRange(topic, name, master.addr, LAST_QUEUE, 0, end, "", "ha_spark", 16, True,
                          queues.members_of(key))
        got = [b for batch in read_range(part, columns=["body"]) for b in batch.column("body").to_pylist()]
        assert got == [b for i, b in enumerate(sent) if i // 16 % QUEUES == LAST_QUEUE]

        served = {b: scrape(b.metrics_url).get(("spark_mq_messages_out_total", (("topic", topic),)), 0)
                  for b in (master, slave)}
        # the master answered the first pull (far behind: go to the slave) and the caught-up tail only
        assert served[slave] > 0 and served[master] < end and served[master] + served[slave] == end
    finally:
        slave.stop_if_running()
        master.stop_if_running()
