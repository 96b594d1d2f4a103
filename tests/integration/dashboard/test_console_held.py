"""What the console shows of held and archived messages and of Spark members, in headless chromium against a
real NameServer and broker: pop messages in flight (popped, not acknowledged; gone once acknowledged), the
exact count of undecided half messages, each Spark driver member's queues and their lag, and per queue the
tiered archive's range and bytes and the table's version after a real offload."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from integration.dashboard._browser import Browser, start_console
from servers import run_cli, unique, wait_until

from spark_mq.arrow.queues import TopicQueues
from spark_mq.client.admin import MASTER_ID, SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.simple_consumer import SyncSimpleConsumer
from spark_mq.client.transaction_producer import LocalTransactionState, SyncTransactionProducer
from spark_mq.common.message import Message
from spark_mq.tiered.archive import table_uri

QUEUES = 4
SENT = 8


@pytest.fixture(scope="module")
def admin(cluster):
    with SyncAdmin(ClientConfig(cluster.namesrv)) as a:
        yield a


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("archive"))


@pytest.fixture(scope="module")
def browser(driver, cluster, archive_root, tmp_path_factory):
    console = start_console(cluster.namesrv, tmp_path_factory.mktemp("console") / "console.log",
                            "--archive", archive_root)
    yield Browser(driver, console.addr)
    console.stop_cleanly()


def topic_with_messages(admin: SyncAdmin, namesrv: str, prefix: str) -> str:
    topic = unique(prefix)
    admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    with SyncProducer(unique("held_pg"), ClientConfig(namesrv)) as producer:
        for n in range(SENT):
            producer.send(Message(topic, f"m{n}".encode()))
    return topic


def in_flight(browser: Browser, path: str, group: str) -> int:
    browser.open(path)
    return sum(int(e.text) for e in browser.all(f"#in-flight tr[data-group='{group}'] td.count"))


def test_popped_messages_are_in_flight_until_acknowledged(browser, admin, cluster):
    topic, group = topic_with_messages(admin, cluster.namesrv, "held_pop"), unique("held_pop_g")
    consumer = SyncSimpleConsumer(group, ClientConfig(cluster.namesrv, instance_name=unique("i")), {topic: "*"})
    consumer.start()
    try:
        popped = []
        wait_until(lambda: popped.extend(consumer.receive(SENT, invisible_s=120, wait_s=0.5)) or len(popped) >= 3,
                   what="popped messages")
        assert in_flight(browser, f"/groups/{group}", group) == len(popped)
        assert in_flight(browser, "/controller", group) == len(popped)
        browser.loaded("held")
        held = browser.find(f"#held tr[data-broker='{admin.brokers()[0].broker_name}'] td.pop").text
        assert int(held) == len(popped)
        for message in popped:
            consumer.ack(message)
        assert in_flight(browser, f"/groups/{group}", group) == 0
        assert browser.find("#in-flight").tag_name == "p"  # "no popped message is waiting"
        assert in_flight(browser, "/controller", group) == 0
    finally:
        consumer.shutdown()


def test_only_undecided_half_messages_are_counted(browser, admin, cluster):
    topic = topic_with_messages(admin, cluster.namesrv, "held_tx")
    unknown = LocalTransactionState.UNKNOW
    with SyncTransactionProducer(unique("held_tx_pg"), ClientConfig(cluster.namesrv),
                                 lambda msg, arg: LocalTransactionState.COMMIT_MESSAGE, lambda msg: unknown) as done:
        done.send_message_in_transaction(Message(topic, b"decided"))
    with SyncTransactionProducer(unique("held_tx_pg"), ClientConfig(cluster.namesrv),
                                 lambda msg, arg: unknown, lambda msg: unknown) as open_:
        open_.send_message_in_transaction(Message(topic, b"undecided"))
        (master,) = [b for b in admin.brokers() if b.broker_id == MASTER_ID]
        assert master.half_undecided == 1  # the half topic stores both
        browser.open("/controller")
        assert browser.find(f"#held tr[data-broker='{master.broker_name}'] td.half").text == "1"


def test_a_spark_driver_member_shows_its_queues_and_their_lag(browser, admin, cluster):
    from spark_mq.spark.group_member import DriverGroupMember  # the Spark side: only this test needs it
    from spark_mq.spark.options import SourceOptions

    topic, group = topic_with_messages(admin, cluster.namesrv, "held_spark"), unique("held_spark_g")
    opts = SourceOptions.parse({"namesrv": cluster.namesrv, "topic": topic, "group": group}, streaming=True)
    members = [DriverGroupMember(opts), DriverGroupMember(opts)]
    try:
        route = admin.route(topic)
        queues = TopicQueues(topic, {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas},
                             tuple(sorted((q.broker_name, i) for q in route.queue_datas for i in range(QUEUES))))
        wait_until(lambda: len(admin.members(group).connection_set) == 2, what="both Spark members online")
        allocated = {m.client_id: m.allocation(queues) for m in members}
        assert sorted(map(len, allocated.values())) == [QUEUES // 2, QUEUES // 2]
        lag = {(q.broker_name, q.queue_id): q.lag for q in admin.group_progress(group).queues}
        browser.open(f"/groups/{group}", "group_spark")
        for client_id, keys in allocated.items():
            row = f"#drivers tr[data-client='{client_id}']"
            shown = {tuple(part.split(" ")[1].split(":")) for part in browser.find(f"{row} td.queues").text.split(", ")}
            assert {(b, int(q)) for b, q in shown} == set(keys)
            assert int(browser.find(f"{row} td.lag").text) == sum(lag[k] for k in keys)
    finally:
        for member in members:
            member.close()


def test_a_topics_archive_shows_each_queues_range_bytes_and_the_table_version(browser, admin, cluster,
                                                                               archive_root):
    topic = topic_with_messages(admin, cluster.namesrv, "held_archive")
    browser.open(f"/topics/{topic}")
    assert not browser.all("#archive")  # nothing offloaded yet
    done = run_cli("offload", "--topic", topic, "--root", archive_root, "--all", namesrv=cluster.namesrv)
    assert done.returncode == 0, done.stderr
    table = DeltaTable(table_uri(archive_root, topic))
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    size = {}
    for broker, queue, n in zip(actions["partition.broker_name"], actions["partition.queue_id"],
                                actions["size_bytes"], strict=True):
        size[f"{broker}:{queue}"] = size.get(f"{broker}:{queue}", 0) + n
    browser.open(f"/topics/{topic}", "topic_archive")
    assert int(browser.find("#archive-version").text) == table.version()
    rows = browser.all("#queues tbody tr")
    assert len(rows) == QUEUES
    for stats in admin.topic_stats(topic).queues:
        row = f"#queues tr[data-queue='{stats.broker_name}:{stats.queue_id}']"
        key = f"{stats.broker_name}:{stats.queue_id}"
        if stats.max_offset:
            assert browser.find(f"{row} td.archive-range").text == f"[0, {stats.max_offset})"
            assert int(browser.find(f"{row} td.archive-bytes").text.replace(",", "")) == size[key]
            assert browser.find(f"{row} td.both-tiers").text == f"[0, {stats.max_offset})"  # retention kept them
        else:
            assert browser.find(f"{row} td.archive-range").text == "-"
