"""The console's pure parts: topic kinds and pages (thousands of topics, one small page), body views,
charts, sessions that forget an idle account and release its clients, the login limit, held messages from
runtime info, client version names, and its config's safe defaults."""

from __future__ import annotations

import asyncio
import json

import pytest

from spark_mq.client.admin import BrokerStatus
from spark_mq.client.config import ClientConfig
from spark_mq.client.ids import client_id, is_spark_driver, spark_driver_instance
from spark_mq.common.errors import ConfigError
from spark_mq.dashboard.auth import Account, LoginLimiter, Sessions
from spark_mq.dashboard.charts import line_chart
from spark_mq.dashboard.clients import ClusterClients
from spark_mq.dashboard.internals import held_of, in_flight_of
from spark_mq.dashboard.messages import HEX_MAX, body_views
from spark_mq.dashboard.sampler import Point
from spark_mq.dashboard.server import DashboardConfig
from spark_mq.dashboard.topics import PAGE_SIZE, TopicKind, kind_of, page_of
from spark_mq.remoting.command import ROCKETMQ_VERSION, version_desc

TOPICS = sorted([f"orders_{i:04d}" for i in range(2_000)] + ["%RETRY%g1", "%DLQ%g1", "TBW102", "SCHEDULE_TOPIC_XXXX",
                                                              "rmq_sys_wheel_timer"])


def test_kinds():
    assert [kind_of(t) for t in ("orders", "%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_wheel_timer")] == [
        TopicKind.NORMAL, TopicKind.RETRY, TopicKind.DLQ, TopicKind.SYSTEM, TopicKind.SYSTEM]


def test_pages_cover_every_matching_topic_once():
    pages = page_of(TOPICS, TopicKind.NORMAL, "", 1).pages
    assert pages == -(-2_000 // PAGE_SIZE)
    seen = [t for n in range(1, pages + 1) for t in page_of(TOPICS, TopicKind.NORMAL, "", n).items]
    assert seen == [t for t in TOPICS if t.startswith("orders_")]
    assert page_of(TOPICS, None, "ORDERS_19", 1).total == 100  # the filter ignores case
    assert page_of(TOPICS, TopicKind.DLQ, "", 1).items == ["%DLQ%g1"]
    assert page_of(TOPICS, None, "", 10_000).number == page_of(TOPICS, None, "", 1).pages  # clamped to the last
    assert page_of([], None, "", 1) == page_of([], None, "", 0)


def test_body_views():
    doc = {"a": [1, 2], "ü": "x"}
    views = body_views(json.dumps(doc).encode())
    assert json.loads(views.json) == doc and views.text == json.dumps(doc)
    binary = body_views(bytes(range(256)) * 40)
    assert binary.text is None and binary.json is None and binary.size == 10_240
    assert binary.hex.splitlines()[1].startswith("00000010  10 11") and len(binary.hex.splitlines()) == HEX_MAX // 16
    assert body_views(b"plain").json is None


def test_chart_draws_each_series_and_escapes_names():
    chart = line_chart([("<in>", [Point(0, 1), Point(10, 5)]), ("out", [Point(0, 0), Point(10, 2)])], "msg/s")
    assert chart.count("<polyline") == 2 and "&lt;in&gt;" in chart and "<in>" not in chart
    assert "Not enough samples" in line_chart([("in", [Point(0, 1)])])


def test_sessions_forget_an_idle_account():
    now = [0.0]
    sessions = Sessions(idle_s=60, clock=lambda: now[0])
    account = Account("ops", "s3cret", admin=False)
    token = sessions.open(account)
    now[0] = 59
    assert sessions.account(token) == account  # used: idle time starts again
    now[0] = 59 + 61
    assert sessions.account(token) is None
    assert sessions.account(None) is None and "s3cret" not in repr(account)


def test_an_accounts_last_session_ending_releases_its_connections():
    now = [0.0]
    forgotten = []
    sessions = Sessions(idle_s=60, clock=lambda: now[0], on_forget=forgotten.append)
    ops, dev = Account("ops", "s1", admin=True), Account("dev", "s2", admin=False)
    first, second, other = sessions.open(ops), sessions.open(ops), sessions.open(dev)
    sessions.close(first)
    assert forgotten == []  # ops still has a session
    now[0] = 30
    assert sessions.account(other) == dev
    now[0] = 61
    assert sessions.account(other) == dev and forgotten == [ops]  # second expired: ops's last
    sessions.close(other)
    assert forgotten == [ops, dev] and sessions.account(second) is None


def test_released_accounts_clients_are_closed_and_opened_again_on_use():
    async def run() -> None:
        clients = ClusterClients(ClientConfig("127.0.0.1:9876"))
        ops = Account("ops", "s1", admin=True)
        first = clients.admin(ops)
        assert clients.open_accounts() == 1
        clients.release(ops)
        assert clients.open_accounts() == 0
        await clients.close()  # waits for the release's close
        assert clients.admin(ops) is not first
        await clients.close()

    asyncio.run(run())


def test_login_failures_are_limited_per_address_within_the_window():
    now = [0.0]
    limiter = LoginLimiter(max_failures=2, window_s=60, clock=lambda: now[0])
    limiter.failed("10.0.0.1")
    assert limiter.wait_s("10.0.0.1") == 0
    now[0] = 10
    limiter.failed("10.0.0.1")
    assert limiter.wait_s("10.0.0.1") == 50  # until the first failure leaves the window
    assert limiter.wait_s("10.0.0.2") == 0  # another address
    now[0] = 60
    assert limiter.wait_s("10.0.0.1") == 0


def test_held_messages_from_runtime_info_and_what_a_broker_does_not_say():
    ours = BrokerStatus("c", "broker-a", 0, "127.0.0.1:1", {"transactionHalfUndecided": "2",
                                                           "popInFlight": '[["g","t",1,3],["h","t",0,1]]'})
    other = BrokerStatus("c", "broker-b", 0, "127.0.0.1:2", {"popInFlight": "not json"})
    held = [held_of(ours), held_of(other)]
    assert held[0].half_undecided == 2 and held[1].half_undecided is None and held[1].in_flight is None
    assert [(f.group, f.queue_id, f.count) for f in in_flight_of(held)] == [("g", 1, 3), ("h", 0, 1)]
    assert [f.count for f in in_flight_of(held, "h")] == [1]


def test_client_versions_by_name():
    assert [version_desc(v) for v in (ROCKETMQ_VERSION, 401, 212, 100, 413)] == [
        "V4_9_7", "V4_9_4", "V4_0_0_SNAPSHOT", "version 100", "version 413"]


def test_the_console_serves_other_machines_only_when_told():
    client = ClientConfig("127.0.0.1:9876")
    assert DashboardConfig(client).host == "127.0.0.1"
    with pytest.raises(ConfigError, match="--allow-insecure-remote"):
        DashboardConfig(client, host="0.0.0.0")
    assert DashboardConfig(client, host="0.0.0.0", allow_insecure_remote=True).host == "0.0.0.0"
    with pytest.raises(ConfigError, match="positive"):
        DashboardConfig(client, sample_interval_s=0)


def test_spark_drivers_are_recognised_by_their_instance_name():
    assert is_spark_driver(client_id(spark_driver_instance(), ip="10.0.0.1"))
    assert not any(is_spark_driver(c) for c in ("10.0.0.1@DEFAULT", "10.0.0.1@spark_mq_x", "10.0.0.1",
                                                 "10.0.0.1@spark_mq_0123456789ABCDEF", "10.0.0.1@1234"))
