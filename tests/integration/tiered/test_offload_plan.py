"""Planning and chunking of :mod:`spark_mq.tiered.offload` against a real broker, in process: the age
boundary, several appends per queue, and the two ways a table and a broker can disagree."""

from __future__ import annotations

import logging
import time

import pyarrow.compute as pc
import pytest

from spark_mq.common.errors import ConfigError
from spark_mq.tiered.archive import ArchiveError, open_archive
from spark_mq.tiered.offload import ColdBoundary, offload_queue, plan_offload, run_offload
from spark_mq.tiered.reader import read_queue_range

from ._support import QUEUES, broker_rows, create_topic, deltalake_rows, produce, watermarks


class Events:
    """An OffloadListener that records what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.pulled_messages = 0

    def queue_started(self, plan) -> None:
        self.events.append(("start", plan.queue_id))

    def pulled(self, plan, messages: int, nbytes: int) -> None:
        self.pulled_messages += messages

    def committed(self, plan, start: int, end: int, written: bool) -> None:
        self.events.append(("commit", plan.queue_id, start, end, written))

    def watermark_recorded(self, plan, offset: int) -> None:
        self.events.append(("watermark", plan.queue_id, offset))

    def queue_done(self, plan, result) -> None:
        self.events.append(("done", plan.queue_id))


def test_older_than_ends_at_the_first_message_stored_since(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, "offload_age")
    produce(c.namesrv, topic, 40)
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(c.namesrv, topic, 40, first=40)
    older = {q: api.search_offset_by_timestamp(c.addr, topic, q, cut_ms) for q in range(QUEUES)}
    assert all(0 < older[q] < api.get_max_offset(c.addr, topic, q) for q in range(QUEUES))

    # "older than 0 ms at cut_ms": every message stored before cut_ms, and none after
    (plan,) = plan_offload(api, [c.namesrv], [topic], str(tmp_path), fmt=None,
                           boundary=ColdBoundary(older_than_ms=0), now_ms=cut_ms)
    assert {q.queue_id: (q.start, q.end) for q in plan.queues} == {q: (0, older[q]) for q in range(QUEUES)}
    run_offload(api, [plan], Events())
    rows = deltalake_rows(tmp_path, topic)
    assert rows.num_rows == sum(older.values())
    assert pc.max(rows.column("store_timestamp")).value < cut_ms

    # an age older than everything: nothing to do
    (plan,) = plan_offload(api, [c.namesrv], [topic], str(tmp_path), fmt=None,
                           boundary=ColdBoundary(older_than_ms=86_400_000))
    assert all(q.messages == 0 for q in plan.queues)
    with pytest.raises(ConfigError, match="not both"):
        ColdBoundary(all=True, older_than_ms=1)


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_small_chunks_make_contiguous_appends(tiered_cluster, api, tmp_path, fmt):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, f"offload_chunks_{fmt}")
    produce(c.namesrv, topic, 160)
    (plan,) = plan_offload(api, [c.namesrv], [topic], str(tmp_path), fmt=fmt, boundary=ColdBoundary(all=True))
    events = Events()
    results = [offload_queue(api, plan.archive, q, events, chunk_bytes=8_000, pull_batch_size=4)
               for q in plan.queues]
    for q, r in zip(plan.queues, results, strict=True):
        assert r.commits > 2 and r.chunks[0][0] == q.start and r.chunks[-1][1] == q.end
        assert all(a[1] == b[0] for a, b in zip(r.chunks, r.chunks[1:], strict=False)), r.chunks
        assert r.watermark == q.end
    # per queue: start, then each commit followed by its watermark, then done
    q0 = [e for e in events.events if e[1] == 0]
    assert q0[0] == ("start", 0) and q0[-1] == ("done", 0)
    assert all(a[0] == "commit" and b == ("watermark", 0, a[3]) for a, b in zip(q0[1:-1:2], q0[2:-1:2], strict=True))
    assert events.pulled_messages == 160
    assert len(plan.archive.data_files()) == sum(r.commits for r in results)
    expected = broker_rows(c.addr, c.broker.name, topic)
    for q in range(QUEUES):  # the Arrow reader of one queue's range, across chunk boundaries
        lo, hi = 3, api.get_max_offset(c.addr, topic, q) - 2
        got = read_queue_range(str(tmp_path), topic, c.broker.name, q, lo, hi)
        want = expected.filter(pc.and_(pc.equal(expected.column("queue_id"), q),
                                       pc.and_(pc.greater_equal(expected.column("queue_offset"), lo),
                                               pc.less(expected.column("queue_offset"), hi))))
        assert got.equals(want)


def test_a_table_ahead_of_the_broker_is_refused(tiered_cluster, api, tmp_path):
    c = tiered_cluster
    source = create_topic(api, c.namesrv, c.addr, "offload_source")
    produce(c.namesrv, source, 8)
    empty = create_topic(api, c.namesrv, c.addr, "offload_empty")
    rows = broker_rows(c.addr, c.broker.name, source)
    q0 = rows.filter(pc.equal(rows.column("queue_id"), 0))
    open_archive(str(tmp_path), empty).append(c.broker.name, 0, 0, q0.num_rows, q0)
    with pytest.raises(ArchiveError, match=r"up to offset 2, past the broker's max offset 0.*check --root"):
        plan_offload(api, [c.namesrv], [empty], str(tmp_path), fmt=None, boundary=ColdBoundary(all=True))


def test_a_watermark_ahead_of_the_table_is_reported(tiered_cluster, api, tmp_path, caplog):
    c = tiered_cluster
    topic = create_topic(api, c.namesrv, c.addr, "offload_moved")
    produce(c.namesrv, topic, 12)
    (plan,) = plan_offload(api, [c.namesrv], [topic], str(tmp_path / "one"), fmt=None,
                           boundary=ColdBoundary(all=True))
    run_offload(api, [plan], Events())
    assert watermarks(api, c.addr, topic) == {q: 3 for q in range(QUEUES)}
    with caplog.at_level(logging.WARNING, logger="spark_mq.tiered.offload"):
        (moved,) = plan_offload(api, [c.namesrv], [topic], str(tmp_path / "two"), fmt=None,
                                boundary=ColdBoundary(all=True))
    assert all(q.messages == 0 for q in moved.queues)
    assert "offsets below 3 are archived, but" in caplog.text and "was --root changed?" in caplog.text
