"""The web console in a real headless chromium against a real NameServer and brokers: every page loads
with no error in the browser's console and shows what the admin API says of the same cluster; each action
(create a topic, send, reset offsets, resend, delete with confirmation) changes the cluster as the admin
API sees it; a dead broker greys out without breaking the overview."""

from __future__ import annotations

import json
import signal
import time
from urllib.parse import quote

import pytest
from integration.dashboard._browser import Browser, start_console
from servers import Broker, run_cli, unique, wait_until

from spark_mq.client.admin import SyncAdmin
from spark_mq.client.config import ClientConfig
from spark_mq.client.lite_pull_consumer import SyncLitePullConsumer
from spark_mq.client.producer import SyncProducer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import ClientError
from spark_mq.common.message import Message
from spark_mq.common.names import dlq_topic, is_system_topic, retry_topic
from spark_mq.remoting.bodies import MessageQueue
from spark_mq.remoting.headers import ConsumerSendMsgBackRequestHeader

QUEUES = 2
DELAY_LEVEL = 5  # 1 minute: still held when the page is read
TIMER_DELAY_MS = 60_000
SENT = 10
LATER = 5  # sent after the group consumed SENT: its lag


@pytest.fixture(scope="module")
def admin(cluster):
    with SyncAdmin(ClientConfig(cluster.namesrv)) as a:
        yield a


@pytest.fixture(scope="module")
def data(cluster, admin):
    """A topic with SENT + LATER JSON messages (key "k-dash") and a group that consumed the first SENT."""
    topic, group = unique("dash_topic"), unique("dash_group")
    admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    with SyncProducer(unique("dash_pg"), ClientConfig(cluster.namesrv)) as producer:
        for n in range(SENT):
            producer.send(Message(topic, json.dumps({"n": n}).encode(), tags="t", keys="k-dash"))
        done = run_cli("consume", "--topic", topic, "--group", group, "--from", "first", "--max", str(SENT),
                       "--timeout", "5", namesrv=cluster.namesrv)
        assert done.returncode == 0, done.stderr
        for n in range(SENT, SENT + LATER):
            producer.send(Message(topic, json.dumps({"n": n}).encode(), tags="t", keys="k-dash"))
    return topic, group


@pytest.fixture(scope="module")
def console(cluster, tmp_path_factory):
    server = start_console(cluster.namesrv, tmp_path_factory.mktemp("console") / "console.log")
    yield server
    server.stop_cleanly()


@pytest.fixture(scope="module")
def browser(driver, console):
    return Browser(driver, console.addr)


def texts(browser: Browser, css: str) -> list[str]:
    return [e.text for e in browser.all(css)]


def test_overview_shows_the_brokers_and_counts_the_admin_api_gives(browser, admin, data, cluster):
    browser.open("/")
    rows = browser.all("#brokers tbody tr")
    assert {r.get_attribute("data-addr") for r in rows} == {b.addr for b in admin.brokers()}
    assert texts(browser, "#brokers td.role") == [b.role for b in admin.brokers()]
    assert int(browser.find("#topic-count").text) == sum(not is_system_topic(t) for t in admin.list_topics())
    assert cluster.namesrv in browser.find("#namesrvs").text


def test_the_in_out_chart_fills_in_from_the_sampler(browser, data):
    wait_until(lambda: len(browser.open("/").find_elements("css selector", "svg.chart polyline")) == 2,
               what="the overview's chart", timeout=15)
    browser.loaded("overview")


def test_topics_filter_by_kind(browser, data):
    topic, group = data
    browser.open("/topics?kind=retry", "topics")
    listed = texts(browser, "#topics td a")
    assert retry_topic(group) in listed and all(t.startswith("%RETRY%") for t in listed)
    browser.open(f"/topics?kind=normal&q={topic}")
    assert texts(browser, "#topics td a") == [topic]


def test_a_topics_queues_show_the_offsets_the_admin_api_gives(browser, admin, data):
    topic, group = data
    browser.open(f"/topics/{topic}", "topic")
    stats = admin.topic_stats(topic)
    assert [int(x) for x in texts(browser, "#queues td.max")] == [q.max_offset for q in stats.queues]
    assert [int(x) for x in texts(browser, "#queues td.min")] == [q.min_offset for q in stats.queues]
    assert [int(x) for x in texts(browser, "#queues td.archived")] == [q.archived_offset for q in stats.queues]
    assert group in texts(browser, "#readers a")


def test_create_send_and_delete_a_topic(browser, admin):
    name = unique("made_in_console")
    browser.open("/topics")
    browser.submit("#create-topic", {"topic": name, "read_queues": "3", "write_queues": "3"})
    assert admin.route(name) is not None
    assert len(admin.topic_stats(name).queues) == 3
    browser.submit("#send", {"keys": "from-ui", "body": "hello"})
    assert "sent:" in browser.find(".note").text
    assert admin.topic_stats(name).total_messages == 1
    browser.submit("#delete", confirm=False)  # the operator changes their mind: nothing happens
    assert admin.route(name) is not None
    browser.submit("#delete", confirm=True)
    assert "deleted" in browser.find(".note").text
    assert admin.route(name) is None


def test_group_page_shows_lag_and_resets_offsets_to_a_time(browser, admin, data):
    topic, group = data
    browser.open("/groups", "groups")
    assert group in texts(browser, "#groups td a")
    browser.open(f"/groups/{group}", "group")
    progress = admin.group_progress(group, topic)
    assert progress.total_lag == LATER
    assert int(browser.find("#total-lag").text.replace(",", "")) == LATER
    assert [int(x) for x in texts(browser, "#progress td.lag")] == [q.lag for q in progress.queues]
    browser.submit("#reset", {"topic": topic, "time": "0"}, confirm=True)  # back to the first message
    assert "reset" in browser.find(".note").text
    assert admin.group_progress(group, topic).total_lag == SENT + LATER
    assert int(browser.find("#total-lag").text.replace(",", "")) == SENT + LATER
    browser.submit("#progress tbody tr:first-child form.set-offset", {"offset": "1"}, confirm=True)  # one queue
    first = admin.group_progress(group, topic).queues[0]
    assert first.consumer_offset == 1 and admin.group_progress(group, topic).total_lag == SENT + LATER - 1


def test_group_page_shows_online_members_with_versions_and_subscriptions(browser, admin, cluster, data):
    topic, _ = data
    group = unique("dash_online")
    with SyncLitePullConsumer(group, ClientConfig(cluster.namesrv, instance_name=unique("lite"))) as consumer:
        consumer.subscribe(topic, "t || u")
        consumer.start()
        members = wait_until(lambda: admin.members(group).connection_set, what="the member online")
        browser.open(f"/groups/{group}", "group_members")
        assert texts(browser, "#members tbody td:first-child") == [m.client_id for m in members]
        assert texts(browser, "#members tbody td:nth-child(4)") == ["V4_9_7"] * len(members)
        assert texts(browser, "#members tbody td:nth-child(5)") == ["client"] * len(members)  # not a Spark driver
        assert not browser.all(".set-offset")  # members online would overwrite an offset set by hand
        with pytest.raises(ClientError, match="members online"):
            admin.set_offset(group, MessageQueue(topic, admin.topic_stats(topic).queues[0].broker_name, 0), 0)
        assert [r.text for r in browser.all("#subscriptions tbody tr")] == [f"{topic} t || u TAG"]


def test_messages_found_by_time_and_key_viewed_and_resent_to_a_group(browser, admin, data):
    topic, group = data
    browser.open(f"/messages?topic={topic}", "messages")
    assert browser.find("#found-count").text.startswith(f"{SENT + LATER} message(s)")
    browser.open(f"/messages?topic={topic}&key=k-dash")
    assert len(browser.all("#found tbody tr")) == SENT + LATER
    first = admin.query_by_key(topic, "k-dash")[0]
    browser.open(f"/messages?msgid={quote(first.msg_id)}", "message")
    assert json.loads(browser.find("#body-json").text) == json.loads(first.message.body)
    assert browser.find("#offset-msg-id").text == first.msg_id
    done = any(q.queue_id == first.message.queue_id and q.consumer_offset > first.message.queue_offset
               for q in admin.group_progress(group, topic).queues)
    assert f"{group} {'consumed' if done else 'not yet'}" in browser.find("#consumed").text
    before = admin.topic_stats(retry_topic(group)).total_messages if admin.route(retry_topic(group)) else 0
    browser.submit("#resend", {"group": group}, confirm=True)
    assert "resent" in browser.find(".note").text
    assert admin.topic_stats(retry_topic(group)).total_messages == before + 1


def test_dlq_browsed_and_a_dead_message_resent_to_its_group(browser, admin, data):
    topic, group = data
    first = admin.query_by_key(topic, "k-dash")[-1]
    with SyncMQClientAPI() as api:  # the group gives up on it at once (a negative level): into its DLQ
        api.consumer_send_msg_back(admin.master_addrs()[first.broker_name], ConsumerSendMsgBackRequestHeader(
            offset=first.message.physical_offset, group=group, delay_level=-1, origin_msg_id=first.uniq_key,
            origin_topic=topic))
    browser.open("/topics?kind=dlq")
    assert dlq_topic(group) in texts(browser, "#topics td a")
    browser.open(f"/messages?topic={quote(dlq_topic(group))}")
    [dead] = browser.all("#found tbody tr a")
    dead.click()
    browser.loaded("message_dlq")
    assert f"first sent to {topic}" in browser.find("#message").text
    before = admin.topic_stats(retry_topic(group)).total_messages if admin.route(retry_topic(group)) else 0
    browser.submit("#resend", {"group": group}, confirm=True)
    assert admin.topic_stats(retry_topic(group)).total_messages == before + 1
    resent = admin.query_by_key(retry_topic(group), "k-dash")[0].message
    assert resent.body == first.message.body and resent.properties["RETRY_TOPIC"] == topic


def test_delete_a_group_with_confirmation(browser, admin, cluster, data):
    topic, _ = data
    group = unique("dash_doomed")
    with SyncMQClientAPI() as api:
        for broker in admin.master_addrs().values():
            api.update_consumer_offset(broker, group, topic, 0, 1)
    assert topic in admin.groups()[group]
    browser.open(f"/groups/{group}")
    browser.submit("#delete-group", confirm=False)
    assert group in admin.groups()
    browser.submit("#delete-group", confirm=True)
    assert "deleted" in browser.find(".note").text
    assert group not in admin.groups() and group not in texts(browser, "#groups td a")


def test_controller_page_without_a_controller_shows_held_messages(browser, admin, cluster, data):
    topic, _ = data
    with SyncProducer(unique("dash_pg"), ClientConfig(cluster.namesrv)) as producer:
        producer.send(Message(topic, b"later", delay_level=DELAY_LEVEL))
        producer.send(Message(topic, b"at a time", deliver_time_ms=int(time.time() * 1000) + TIMER_DELAY_MS))
    master = wait_until(lambda: next((b for b in admin.brokers() if b.broker_id == 0 and b.timer_pending), None),
                        what="the timer message in the wheel")  # taken from its parking topic in the background
    assert (master.delay_pending, master.timer_pending) == (1, 1)
    browser.open("/controller", "held")
    assert browser.find("#no-controller").is_displayed()
    row = f"#held tr[data-broker='{master.broker_name}']"
    assert (browser.find(f"{row} td.delayed").text, browser.find(f"{row} td.timer").text) == ("1", "1")
    assert browser.find(f"{row} td.half").text == "0"


def test_a_dead_broker_greys_out(browser, cluster, tmp_path_factory):
    """A second broker set whose broker hangs (SIGSTOP: still registered, answering nothing) stays listed,
    greyed, with why; the rest of the page is whole. (A killed broker leaves the NameServers at once.)"""
    other = Broker(cluster.namesrv, tmp_path_factory.mktemp("broker_b"), broker_name=unique("broker_b"))
    try:
        row = f"#brokers tr[data-addr='{other.addr}']"
        wait_until(lambda: browser.open("/").find_elements("css selector", row), what="broker b on the overview")
        assert "dead" not in browser.find(row).get_attribute("class")
        other.server.signal(signal.SIGSTOP)
        try:
            browser.open("/", "overview_dead_broker")
        finally:
            other.server.signal(signal.SIGCONT)
        dead = browser.find(row)  # the page as it was while the broker hung
        assert "dead" in dead.get_attribute("class") and "down" in dead.text
        assert browser.all("#brokers td.role")  # the live broker is still shown whole
    finally:
        other.stop_if_running()
