"""A broker whose store fills its disk (a small tmpfs, mounted by the test: root only).

Finding 2 of issue 18: the store's files were created sparse and written through mmap, so the
first page fault past the free space killed the broker with SIGBUS. Now a put that cannot be
stored is refused with SERVICE_NOT_AVAILABLE and a "disk full" remark, the broker keeps serving
every acknowledged message, starts again on the full disk and takes writes once space returns.

Finding 3: forced clean-up (diskSpaceCleanForciblyRatio) deleted acknowledged messages no
consumer group had read. Now writes are refused instead, unless cleanUnconsumedForcibly=true,
which deletes them and reports how many per topic and group (log line and metric).
"""

from __future__ import annotations

import contextlib
import re

import pytest
from servers import Broker, small_tmpfs, unique, wait_until

from spark_mq.client.results import PullStatus
from spark_mq.common.errors import MQClientError
from spark_mq.common.message import MessageBatch
from spark_mq.remoting.codes import ResponseCode

from ._support import pull_header
from .test_admin import scrape

DISK = 64 * 1024 * 1024
FILLER = 30 * 1024 * 1024  # freed by the test to give the broker its space back; the rest takes ~16,000 messages
BODY = 1024
BATCH = 32
QUEUES = 2
# 1 MiB commitlog files, small consume queue and index files; the ratio checks stay out of the
# way (finding 2 is about the disk really filling up), retention looks every 200 ms
SMALL_DISK_CONF = """\
mapedFileSizeCommitLog=1048576
mapedFileSizeConsumeQueue=24000
maxHashSlotNum=1000
maxIndexNum=4000
maxMessageSize=65536
cleanResourceInterval=200
"""
FULL_DISK_CONF = SMALL_DISK_CONF + "diskMaxUsedSpaceRatio=100\ndiskSpaceCleanForciblyRatio=1.0\n" \
                                   "diskSpaceWarningLevelRatio=1.0\n"
# forced clean-up past half the disk; a filler takes 24 MiB of the 64, so ~8 MiB of messages pass it
FORCED_CLEAN_CONF = SMALL_DISK_CONF + "diskMaxUsedSpaceRatio=100\ndiskSpaceCleanForciblyRatio=0.5\n"
FORCED_FILLER = 24 * 1024 * 1024


@pytest.fixture
def disk_broker(tmp_path, namesrv):
    """``start(filler, conf)`` starts a broker whose store is a fresh 64 MiB tmpfs, ``filler`` bytes
    of it taken by ``store / "filler"``. After the test a broker still running is killed and the
    tmpfs unmounted. Skips where mounting is not allowed."""
    brokers: list[Broker] = []
    with contextlib.ExitStack() as mounts:

        def start(filler: int, conf: str, metrics: bool = False) -> Broker:
            store = mounts.enter_context(small_tmpfs(tmp_path / "store", DISK))
            with open(store / "filler", "wb") as f:
                f.write(b"\xff" * filler)
            brokers.append(Broker(namesrv, tmp_path, conf, metrics=metrics, verbose=False))
            return brokers[-1]

        yield start
        for b in brokers:
            b.server.kill()


def topic_with_group(api, broker: Broker, prefix: str) -> tuple[str, str]:
    """A new topic of ``QUEUES`` queues and a group that has committed offset 0 on each (consumed nothing)."""
    topic, group = unique(prefix), unique(f"{prefix}_group")
    api.create_topic(broker.addr, topic, QUEUES, QUEUES)
    for q in range(QUEUES):
        api.update_consumer_offset(broker.addr, group, topic, q, 0)
    return topic, group


def send(api, addr: str, topic: str, queue_id: int, seq: int):
    bodies = [f"{seq + i:08d}".encode().ljust(BODY, b".") for i in range(BATCH)]
    return api.send_batch(addr, MessageBatch.of(topic, queue_id, bodies), "disk_producer")


def produce_until_refused(api, broker: Broker, topic: str, limit: int = 1 << 30
                          ) -> tuple[dict[int, int], MQClientError]:
    """Send batches round-robin over the queues until a send is refused; returns the messages
    acknowledged per queue and the refusal (fails if ``limit`` bytes go in without one)."""
    acked, refusal = produce(api, broker, topic, limit)
    if refusal is None:
        pytest.fail(f"{limit} bytes were acknowledged and no send was refused")
    return acked, refusal


def produce(api, broker: Broker, topic: str, limit: int) -> tuple[dict[int, int], MQClientError | None]:
    """Send up to ``limit`` bytes in batches round-robin over the queues, stopping at the first
    refusal; returns the messages acknowledged per queue and the refusal, if any."""
    acked = dict.fromkeys(range(QUEUES), 0)
    sent = 0
    while sent < limit:
        q = (sent // (BATCH * BODY)) % QUEUES
        try:
            result = send(api, broker.addr, topic, q, acked[q])
        except MQClientError as e:
            return acked, e
        assert result.queue_offset == acked[q]
        acked[q] += BATCH
        sent += BATCH * BODY
    return acked, None


def pull_all(api, addr: str, group: str, topic: str, queue_id: int, count: int) -> list[bytes]:
    """Pull ``[0, count)`` of one queue; every message must be there, in order."""
    bodies: list[bytes] = []
    offset = 0
    while offset < count:
        r = api.pull_message(addr, pull_header(group, topic, queue_id, offset, max_nums=256))
        assert r.status == PullStatus.FOUND, f"queue {queue_id} at {offset} of {count}: {r.status}"
        got = r.messages()
        bodies += [m.body for m in got]
        offset = r.next_begin_offset
    assert [b[:8] for b in bodies] == [f"{i:08d}".encode() for i in range(count)]
    return bodies


def assert_refused_disk_full(e: MQClientError) -> None:
    assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE, e
    assert "disk full" in str(e), e


def test_a_full_disk_refuses_writes_and_keeps_every_acknowledged_message(disk_broker, make_api):
    broker = disk_broker(FILLER, FULL_DISK_CONF, metrics=True)
    api = make_api(timeout=10.0)
    topic, group = topic_with_group(api, broker, "DiskFull")

    acked, refusal = produce_until_refused(api, broker, topic)
    assert broker.server.alive(), broker.log()[-3000:]
    assert_refused_disk_full(refusal)
    assert sum(acked.values()) > 10_000, acked  # the disk really filled up with messages
    with pytest.raises(MQClientError) as again:  # still refused, still serving
        send(api, broker.addr, topic, 0, acked[0])
    assert_refused_disk_full(again.value)
    for q in range(QUEUES):
        pull_all(api, broker.addr, group, topic, q, acked[q])
    stats = api.get_topic_stats_info(broker.addr, topic)  # admin requests keep working
    assert sorted(o.max_offset for o in stats.offset_table.values()) == sorted(acked.values())
    api.update_consumer_offset(broker.addr, group, topic, 0, 5)
    assert api.query_consumer_offset(broker.addr, group, topic, 0) == 5
    assert "disk full" in broker.log()
    writable = ("spark_mq_store_writable", ())
    assert scrape(broker.metrics_url)[writable] == 0

    # a restart on the full disk: it starts read-only, serves pulls, refuses writes
    broker.server.stop_cleanly(broker.store)
    broker.server = broker._start(broker.server.port)
    assert "starting read-only: disk full" in broker.log()
    for q in range(QUEUES):
        pull_all(api, broker.addr, group, topic, q, acked[q])
    with pytest.raises(MQClientError) as after_restart:
        send(api, broker.addr, topic, 1, acked[1])
    assert_refused_disk_full(after_restart.value)

    # space comes back: writes are accepted again, and read back
    (broker.store / "filler").unlink()

    def accepted() -> bool:
        try:
            send(api, broker.addr, topic, 1, acked[1])
        except MQClientError as e:
            assert_refused_disk_full(e)
            return False
        return True

    wait_until(accepted, timeout=15, what="a send accepted once space was freed")
    assert scrape(broker.metrics_url)[writable] == 1
    acked[1] += BATCH
    pull_all(api, broker.addr, group, topic, 1, acked[1])
    assert broker.server.alive()
    broker.stop()


def commitlog_files(broker: Broker) -> list[str]:
    return sorted(p.name for p in (broker.store / "commitlog").iterdir() if p.name.isdigit())


def test_forced_clean_up_refuses_writes_rather_than_delete_unconsumed_messages(disk_broker, make_api):
    broker = disk_broker(FORCED_FILLER, FORCED_CLEAN_CONF)
    api = make_api(timeout=10.0)
    topic, group = topic_with_group(api, broker, "Unconsumed")  # a group that has consumed nothing yet

    acked, refusal = produce_until_refused(api, broker, topic, limit=30 * 1024 * 1024)
    assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE, refusal
    assert "diskSpaceCleanForciblyRatio" in str(refusal) and f"{topic}@{group}" in str(refusal), refusal
    assert commitlog_files(broker)[0] == "0" * 20  # nothing deleted
    for q in range(QUEUES):  # every acknowledged message is there for the group, from offset 0
        pull_all(api, broker.addr, group, topic, q, acked[q])

    # once the group has consumed, forced clean-up deletes the oldest files and writes resume
    for q in range(QUEUES):
        api.update_consumer_offset(broker.addr, group, topic, q, acked[q])

    def accepted() -> bool:
        try:
            send(api, broker.addr, topic, 0, acked[0])
        except MQClientError as e:
            assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE, e
            return False
        return True

    wait_until(accepted, timeout=15, what="writes accepted once the group consumed")
    assert commitlog_files(broker)[0] != "0" * 20
    assert "refusing writes" in broker.log() and "accepting writes again" in broker.log()
    broker.stop()


def test_clean_unconsumed_forcibly_deletes_them_and_counts_them(disk_broker, make_api):
    broker = disk_broker(FORCED_FILLER, FORCED_CLEAN_CONF + "cleanUnconsumedForcibly=true\n", metrics=True)
    api = make_api(timeout=10.0)
    topic, group = topic_with_group(api, broker, "Forced")

    produce(api, broker, topic, limit=16 * 1024 * 1024)  # 8 MiB past the ratio: files must go
    key = ("spark_mq_retention_unconsumed_deleted_total", (("group", group), ("topic", topic)))
    deleted = wait_until(lambda: scrape(broker.metrics_url).get(key), timeout=15, what="unconsumed deletions counted")
    logged = wait_until(lambda: [int(n) for n in re.findall(rf"{topic}@{group}: (\d+)", broker.log())],
                        what="the deletion log line")
    assert sum(logged) >= deleted > 0
    lost = wait_until(lambda: api.get_min_offset(broker.addr, topic, 0) + api.get_min_offset(broker.addr, topic, 1),
                      what="queue minimums past the deleted files")
    assert lost > 0
    assert broker.server.alive()
    broker.stop()
