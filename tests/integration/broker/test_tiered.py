"""Tiered storage at a real broker: UPDATE_TIERED_OFFSET / QUERY_TIERED_OFFSET through the client
API (blocking and async), refusals that leave the broker serving, the cold offset over small
commitlog files, watermarks across a restart and a topic deletion, Admin and ``spark-mq admin
topic stats``, and retention that waits for the archive."""

from __future__ import annotations

import asyncio
import json

import pytest
from servers import Broker, unique, wait_until

from spark_mq.cli import main as cli_main
from spark_mq.client.admin import SyncAdmin
from spark_mq.client.api import MQClientAPI
from spark_mq.client.config import ClientConfig
from spark_mq.client.results import TieredOffset
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import MessageBatch
from spark_mq.common.message_id import parse_offset_msg_id
from spark_mq.remoting.bodies import MessageQueue
from spark_mq.remoting.client import SyncRemotingClient
from spark_mq.remoting.codes import RequestCode, ResponseCode
from spark_mq.remoting.command import RemotingCommand

from .test_admin import scrape

FILE = 64 * 1024
SMALL_FILES = f"mapedFileSizeCommitLog={FILE}\nmaxMessageSize=8192\n"
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


@pytest.fixture(scope="module")
def broker_conf() -> str:
    return SMALL_FILES


def send(api, addr: str, topic: str, queue_id: int, count: int, size: int = 100) -> list[int]:
    """Store ``count`` messages of ``size`` bytes in one queue; returns their commitlog offsets."""
    result = api.send_batch(addr, MessageBatch.of(topic, queue_id, [b"t" * size] * count), "tiered_producer")
    return [parse_offset_msg_id(i)[1] for i in result.offset_msg_ids]


def commitlog_files(broker: Broker) -> list[int]:
    """Start offsets of the broker's commitlog files on disk."""
    folder = broker.store / "commitlog"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def saved_offsets(broker: Broker) -> dict:
    return json.loads((broker.store / "config" / "tieredOffset.json").read_text())["offsetTable"]


def refused(call, code: int, text: str) -> None:
    with pytest.raises(MQClientError) as e:
        call()
    assert e.value.code == code and text in str(e.value), str(e.value)


def test_update_and_query_round_trip(broker, api):
    topic = unique("Tiered")
    api.create_topic(broker.addr, topic, 2, 2)
    assert api.query_tiered_offset(broker.addr, topic, 0) == TieredOffset(0, 0, 0, 0)
    phys = send(api, broker.addr, topic, 0, 10)
    active = commitlog_files(broker)[-1]
    cold = sum(p < active for p in phys)
    assert api.query_tiered_offset(broker.addr, topic, 0) == TieredOffset(0, cold, 0, 10)

    api.update_tiered_offset(broker.addr, topic, 0, 4)
    api.update_tiered_offset(broker.addr, topic, 0, 4)  # the same again: accepted, nothing changes
    assert api.query_tiered_offset(broker.addr, topic, 0) == TieredOffset(4, cold, 0, 10)
    assert api.query_tiered_offset(broker.addr, topic, 1) == TieredOffset(0, 0, 0, 0)

    async def through_async_api() -> TieredOffset:
        async with MQClientAPI() as a:
            await a.update_tiered_offset(broker.addr, topic, 0, 10)  # up to the max offset: all archived
            return await a.query_tiered_offset(broker.addr, topic, 0)

    assert asyncio.run(through_async_api()) == TieredOffset(10, cold, 0, 10)
    assert saved_offsets(broker)[topic] == {"0": 10}


def test_bad_updates_and_queries_are_refused_and_the_broker_keeps_serving(broker, api):
    topic = unique("Refused")
    api.create_topic(broker.addr, topic, 2, 2)
    send(api, broker.addr, topic, 0, 10)
    api.update_tiered_offset(broker.addr, topic, 0, 6)
    bad = ResponseCode.INVALID_PARAMETER
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 0, 5), bad, "is 6 already and never moves back")
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 0, 11), bad, "past the queue's max offset 10")
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 1, 1), bad, "past the queue's max offset 0")
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 0, -1), bad, "is negative")
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 2, 0), bad, "queueId 2 is not a queue of topic")
    refused(lambda: api.query_tiered_offset(broker.addr, topic, -1), bad, "queueId -1 is not a queue of topic")
    missing = unique("NoSuchTopic")
    refused(lambda: api.update_tiered_offset(broker.addr, missing, 0, 0), ResponseCode.TOPIC_NOT_EXIST, missing)
    refused(lambda: api.query_tiered_offset(broker.addr, missing, 0), ResponseCode.TOPIC_NOT_EXIST, missing)
    with SyncRemotingClient() as raw:  # a header without its offset
        resp = raw.invoke(broker.addr, RemotingCommand.request(RequestCode.UPDATE_TIERED_OFFSET,
                                                               {"topic": topic, "queueId": "0"}))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "'offset'" in resp.remark
    assert broker.server.alive()
    assert api.query_tiered_offset(broker.addr, topic, 0).offset == 6  # nothing refused was recorded


def test_cold_offset_over_several_commitlog_files(broker, api):
    topic = unique("Cold")
    api.create_topic(broker.addr, topic, 3, 3)
    phys: dict[int, list[int]] = {0: [], 1: []}
    while phys[0][-1:] == [] or phys[0][-1] // FILE - phys[0][0] // FILE < 2:  # queues 0 and 1 over 3 files
        for q in (0, 1):
            phys[q] += send(api, broker.addr, topic, q, 4, 1500)
    last_of_q0 = phys[0][-1] // FILE
    while phys[1][-1] // FILE == last_of_q0:  # then queue 1 alone, into a new file
        phys[1] += send(api, broker.addr, topic, 1, 4, 1500)
    active = commitlog_files(broker)[-1]
    assert active == phys[1][-1] // FILE * FILE and len(commitlog_files(broker)) >= 4

    q0 = api.query_tiered_offset(broker.addr, topic, 0)
    assert q0 == TieredOffset(0, len(phys[0]), 0, len(phys[0]))  # none in the active file: cold up to its max
    q1 = api.query_tiered_offset(broker.addr, topic, 1)
    cold = sum(p < active for p in phys[1])
    assert q1 == TieredOffset(0, cold, 0, len(phys[1])) and 0 < cold < len(phys[1])
    assert phys[1][cold - 1] < active <= phys[1][cold]
    assert api.query_tiered_offset(broker.addr, topic, 2) == TieredOffset(0, 0, 0, 0)


def test_watermarks_survive_a_restart(broker, make_api):
    api = make_api()
    topic = unique("Restarted")
    api.create_topic(broker.addr, topic, 2, 2)
    send(api, broker.addr, topic, 0, 5)
    send(api, broker.addr, topic, 1, 3)
    api.update_tiered_offset(broker.addr, topic, 0, 5)
    api.update_tiered_offset(broker.addr, topic, 1, 2)
    assert saved_offsets(broker)[topic] == {"0": 5, "1": 2}  # persisted before the answer

    broker.restart()
    api = make_api()
    q0 = api.query_tiered_offset(broker.addr, topic, 0)
    assert (q0.offset, q0.min_offset, q0.max_offset) == (5, 0, 5)
    assert api.query_tiered_offset(broker.addr, topic, 1).offset == 2
    refused(lambda: api.update_tiered_offset(broker.addr, topic, 1, 1), ResponseCode.INVALID_PARAMETER,
            "never moves back")


def test_deleting_a_topic_drops_its_watermarks(broker, api):
    topic, other = unique("Deleted"), unique("Kept")
    for t in (topic, other):
        api.create_topic(broker.addr, t, 1, 1)
        send(api, broker.addr, t, 0, 3)
        api.update_tiered_offset(broker.addr, t, 0, 3)
    api.delete_topic_in_broker(broker.addr, topic)
    assert topic not in saved_offsets(broker) and saved_offsets(broker)[other] == {"0": 3}
    refused(lambda: api.query_tiered_offset(broker.addr, topic, 0), ResponseCode.TOPIC_NOT_EXIST, topic)
    api.create_topic(broker.addr, topic, 1, 1)  # created again: its offsets start from 0, so do the watermarks
    assert api.query_tiered_offset(broker.addr, topic, 0) == TieredOffset(0, 0, 0, 0)


def test_admin_and_topic_stats_show_archived_offsets(broker, namesrv, api, capsys):
    topic = unique("AdminTiered")
    with SyncAdmin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(topic, broker_addr=broker.addr, read_queue_nums=2, write_queue_nums=2)
        send(api, broker.addr, topic, 0, 6)
        api.update_tiered_offset(broker.addr, topic, 0, 4)
        stats = admin.topic_stats(topic)
        assert [(q.queue_id, q.max_offset, q.archived_offset) for q in stats.queues] == [(0, 6, 4), (1, 0, 0)]
        tiered = admin.tiered_offsets(topic)
    assert sorted(tiered) == [MessageQueue(topic, broker.name, 0), MessageQueue(topic, broker.name, 1)]
    assert tiered[MessageQueue(topic, broker.name, 0)] == api.query_tiered_offset(broker.addr, topic, 0)
    assert tiered[MessageQueue(topic, broker.name, 0)].offset == 4

    assert cli_main(["admin", "topic", "stats", "--namesrv", namesrv, "--topic", topic]) == 0
    out = capsys.readouterr().out
    assert "archived to" in out
    row = next(line for line in out.splitlines() if f"{broker.name} " in line and " 6 " in line)
    assert row.split("│")[-2].strip() == "4", out


def test_retention_deletes_files_only_once_every_queue_is_archived(namesrv, tmp_path, make_api):
    # every non-active file is expired at once and retention runs every 100 ms
    conf = (f"{SMALL_FILES}tieredStoreEnable=true\nfileReservedTime=0\ndeleteWhen={EVERY_HOUR}\n"
            "cleanResourceInterval=100\n")
    b = Broker(namesrv, tmp_path / "tiered", conf, broker_name=unique("broker_tiered"), metrics=True, verbose=False)
    try:
        api = make_api()
        topic = unique("Retained")
        api.create_topic(b.addr, topic, 2, 2)
        phys: dict[int, list[int]] = {0: [], 1: []}
        while len(commitlog_files(b)) < 4:
            for q in (0, 1):
                phys[q] += send(api, b.addr, topic, q, 4, 1500)
        files = commitlog_files(b)

        def kept() -> float:
            return scrape(b.metrics_url).get(("spark_mq_retention_unarchived_refusals_total",
                                               (("trigger", "expiry"),)), 0)

        seen = wait_until(kept, what="a retention run keeping unarchived files")
        api.update_tiered_offset(b.addr, topic, 0, api.query_tiered_offset(b.addr, topic, 0).max_offset)
        wait_until(lambda: kept() >= seen + 2, what="retention runs with queue 1 still unarchived")
        assert commitlog_files(b) == files  # queue 1 still holds unarchived messages in every file
        assert api.get_min_offset(b.addr, topic, 0) == 0

        cold = api.query_tiered_offset(b.addr, topic, 1).cold_offset
        api.update_tiered_offset(b.addr, topic, 1, cold)
        wait_until(lambda: commitlog_files(b) == files[-1:], what="the archived files deleted")
        active = files[-1]
        # the queues' minimums move up right after the files go (the same retention run, after the deletion):
        # a look in between still sees the old ones
        expected = [sum(p < active for p in phys[q]) for q in (0, 1)]
        wait_until(lambda: [api.get_min_offset(b.addr, topic, q) for q in (0, 1)] == expected,
                   what=f"the queues' minimum offsets at {expected}")
    finally:
        b.stop_if_running()
