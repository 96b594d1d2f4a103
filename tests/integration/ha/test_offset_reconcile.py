"""Consumer offsets committed on a slave while its master is down, reconciled when the master returns
(issue 14): the slave offers the master what clients committed on it, and the master takes each offset
only where it is ahead of its own. A consumer that stopped during the outage restarts at its progress;
an admin's reset on the master is not undone by the slave."""

from __future__ import annotations

from broker._support import send_header
from servers import unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.pull_consumer import SyncPullConsumer
from spark_mq.client.results import SendStatus

from .test_replication import QUEUES, REPLICATION_TIMEOUT_S, make_topic, replicated
from .test_slave_read import consume
from .test_slave_synchronize import SYNC_INTERVAL_MS

SLAVE_SYNC = f"slaveSynchronizeInterval={SYNC_INTERVAL_MS}\n"


def committed(api, addr: str, group: str, topic: str) -> dict[int, int | None]:
    return {q: api.query_consumer_offset(addr, group, topic, q, zero_if_not_found=False) for q in range(QUEUES)}


def sent_everywhere(api, pair, count: int) -> str:
    """A topic with ``count`` messages over its queues, on both brokers."""
    topic = make_topic(api, pair)
    for i in range(count):
        assert api.send_message(pair.master.addr, send_header(topic, i % QUEUES), b"m%d" % i).status == \
            SendStatus.SEND_OK
    replicated(pair)
    return topic


def test_offsets_a_consumer_committed_on_the_slave_during_an_outage_reach_the_master(ha_pair, api, namesrv):
    pair = ha_pair("ASYNC_MASTER", slave_conf=SLAVE_SYNC)
    topic = sent_everywhere(api, pair, 200)
    group = unique("ha_group")
    for q in range(QUEUES):
        api.update_consumer_offset(pair.master.addr, group, topic, q, 10)
    wait_until(lambda: committed(api, pair.slave.addr, group, topic) == dict.fromkeys(range(QUEUES), 10),
               REPLICATION_TIMEOUT_S, "the master's offsets on the slave")

    pair.master.kill()
    config = ClientConfig(namesrv, instance_name=unique("inst"), poll_name_server_interval_s=1.0)
    with SyncPullConsumer(group, config) as consumer:  # reads the slave, commits there, stops
        consumer.start()
        progress = {}
        for mq in consumer.fetch_queues(topic):
            _, progress[mq.queue_id] = consume(consumer, mq, consumer.read_offset(mq, from_store=True), up_to=40)
            consumer.update_offset(mq, progress[mq.queue_id])
        assert progress == dict.fromkeys(range(QUEUES), 40)

        def on_slave():
            consumer.persist()
            return committed(api, pair.slave.addr, group, topic) == progress
        wait_until(on_slave, REPLICATION_TIMEOUT_S, "the consumer's offsets committed to the slave")

    pair.master.start_again()
    wait_until(lambda: committed(api, pair.master.addr, group, topic) == progress, REPLICATION_TIMEOUT_S,
               "the master to take the offsets committed on the slave")
    with SyncPullConsumer(group, ClientConfig(namesrv, instance_name=unique("inst"))) as again:
        again.start()  # restarted after the outage: from its progress, nothing read twice
        assert {mq.queue_id: again.read_offset(mq, from_store=True) for mq in again.fetch_queues(topic)} == progress
    assert committed(api, pair.slave.addr, group, topic) == progress  # the master's, taken back


def test_a_reset_on_the_master_is_not_undone_by_its_slave(ha_pair, api, namesrv):
    pair = ha_pair("ASYNC_MASTER", slave_conf=SLAVE_SYNC)
    topic = sent_everywhere(api, pair, 200)
    during, before = unique("ha_outage"), unique("ha_master")  # committed on the slave / only on the master
    api.update_consumer_offset(pair.master.addr, before, topic, 0, 30)
    wait_until(lambda: committed(api, pair.slave.addr, before, topic)[0] == 30, REPLICATION_TIMEOUT_S,
               "the master's offset on the slave")
    pair.master.stop()
    api.update_consumer_offset(pair.slave.addr, during, topic, 0, 40)
    pair.master.start_again()
    wait_until(lambda: committed(api, pair.master.addr, during, topic)[0] == 40, REPLICATION_TIMEOUT_S,
               "the master to take the offset committed on the slave")

    with SyncAdmin(ClientConfig(namesrv, instance_name=unique("inst"))) as admin:
        for group in (during, before):
            assert set(admin.reset_offsets_by_time(group, topic, 0).values()) == {0}
    # the slave takes the reset (its next rounds offer nothing again), and the master keeps it
    wait_until(lambda: committed(api, pair.slave.addr, during, topic)[0] == 0
               and committed(api, pair.slave.addr, before, topic)[0] == 0, REPLICATION_TIMEOUT_S,
               "the master's reset on the slave")
    assert committed(api, pair.master.addr, during, topic)[0] == 0
    assert committed(api, pair.master.addr, before, topic)[0] == 0


def test_a_returning_master_is_offered_the_offsets_as_soon_as_the_slave_reconnects(ha_pair, api):
    pair = ha_pair("ASYNC_MASTER", slave_conf="slaveSynchronizeInterval=600000\n")  # no round in this test's time
    topic = sent_everywhere(api, pair, 20)
    group = unique("ha_group")
    pair.master.kill()
    api.update_consumer_offset(pair.slave.addr, group, topic, 2, 4)
    pair.master.start_again()
    wait_until(lambda: committed(api, pair.master.addr, group, topic)[2] == 4, REPLICATION_TIMEOUT_S,
               "the master to take the offset committed on the slave")
