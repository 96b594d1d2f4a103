"""Damaged store files after a clean stop or a SIGKILL, against real broker processes (issue 18,
finding 6): a start checks the units of the last commitlog files and every consume queue
against the commitlog, so a damaged unit is never served, a consume queue that lost entries is
rebuilt without handing its queue offsets out twice, and one damaged unit in the middle of a
crash's unflushed region costs that unit only.

Each test fills a broker through the client API, stops it (cleanly or by SIGKILL), damages the
files on disk by hand, starts it again on the same store and reads everything back with pulls.
"""

from __future__ import annotations

import os
import threading
import urllib.request
import zlib
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import Broker, unique, wait_until

from spark_mq.client.results import PullStatus, SendStatus
from spark_mq.common.message import Message, MessageBatch
from spark_mq.common.unit.chain import walk_units
from spark_mq.common.unit.decode import decode_message
from spark_mq.common.unit.layout import HEADER_SIZE, field_offset
from spark_mq.store.consume_queue import ENTRY_SIZE
from spark_mq.store.mapped_file import file_name

from ._support import pull_header

GROUP = "itest_corruption"
BODY_FILL = 200
QUEUE_OFFSET_AT = field_offset("queue_offset")
# 256 KiB commitlog files: a few thousand messages span several
SMALL_FILES = "mapedFileSizeCommitLog=262144\nmaxMessageSize=65536\n"


def body(seq: int) -> bytes:
    return f"{seq:08d}|".encode() + bytes((seq + i) & 0xFF for i in range(BODY_FILL))


def seq_of(data: bytes) -> int:
    return int(data[:8])


def send(api, addr: str, topic: str, queue_id: int, seqs: range) -> list[int]:
    """Send ``seqs`` in batches of 100; returns the queue offset of each."""
    offsets = []
    for lo in range(seqs.start, seqs.stop, 100):
        chunk = range(lo, min(lo + 100, seqs.stop))
        res = api.send_batch(addr, MessageBatch.from_messages([Message(topic, body(s)) for s in chunk], queue_id),
                             GROUP)
        assert res.status == SendStatus.SEND_OK
        offsets += range(res.queue_offset, res.queue_offset + len(chunk))
    return offsets


def drain(api, addr: str, topic: str, queue_id: int) -> list[tuple[int, int, bool]]:
    """Everything a consumer pulls from offset 0: (queue offset, seq, body CRC right)."""
    out = []
    offset = 0
    while True:
        res = api.pull_message(addr, pull_header(GROUP, topic, queue_id, offset))
        if res.status == PullStatus.FOUND:
            for m in res.messages(check_crc=False):
                out.append((m.queue_offset, seq_of(m.body), m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF))
        elif res.next_begin_offset <= offset:
            return out
        assert res.next_begin_offset > offset or res.status == PullStatus.FOUND, res
        offset = res.next_begin_offset


def units_on_disk(store: Path) -> dict[int, tuple[Path, int]]:
    """seq -> (commitlog file, position) of every unit, found by walking the files."""
    out = {}
    for path in sorted((store / "commitlog").iterdir()):
        data = path.read_bytes()
        walk = walk_units(memoryview(data), 0, len(data), check_crc=False)
        for pos in walk.starts.tolist():
            end = pos + int.from_bytes(data[pos:pos + 4], "big")
            out[seq_of(decode_message(data[pos:end]).body)] = (path, pos)
    return out


def flip(path: Path, pos: int, mask: int = 0x5A) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def corrupt_units_metric(broker: Broker) -> float:
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "spark_mq_store_corrupt_units_total":
                return s.value
    raise AssertionError("spark_mq_store_corrupt_units_total is not exported")


def served_problems(got: list[tuple[int, int, bool]], expected: dict[int, int]) -> list[str]:
    """What is wrong with a drain against ``expected`` (queue offset -> seq): damaged units served,
    messages missing, served at the wrong offset or twice."""
    problems = [f"seq {s} served with a wrong body CRC" for _, s, ok in got if not ok]
    seen: dict[int, int] = {}
    for offset, seq, _ in got:
        if seq in seen:
            problems.append(f"seq {seq} served twice (offsets {seen[seq]} and {offset})")
        seen[seq] = offset
        if expected.get(offset) != seq:
            problems.append(f"offset {offset} serves seq {seq}, acknowledged as {expected.get(offset)}")
    missing = sorted(set(expected.values()) - set(seen))
    if missing:
        problems.append(f"{len(missing)} acknowledged messages missing, e.g. {missing[:5]}")
    return problems


@pytest.fixture
def start_broker(namesrv, tmp_path):
    """``start_broker(conf)``: a broker with metrics on its own store; all stopped after the test."""
    made: list[Broker] = []

    def start(conf: str = SMALL_FILES) -> Broker:
        made.append(Broker(namesrv, tmp_path / f"b{len(made)}", conf, metrics=True, verbose=False))
        return made[-1]

    yield start
    for b in made:
        b.stop_if_running()


def fill_and_stop(broker: Broker, api, prefix: str, queue_id: int, count: int):
    """Send ``count`` messages to a new topic's queue, stop the broker cleanly; returns the topic,
    the queue offsets and where each unit lies on disk."""
    topic = unique(prefix)
    offsets = send(api, broker.addr, topic, queue_id, range(count))
    broker.stop()
    return topic, offsets, units_on_disk(broker.store)


def test_flipped_body_bytes_after_a_clean_stop_are_never_served(start_broker, make_api):
    broker, api = start_broker(), make_api()
    topic, offsets, where = fill_and_stop(broker, api, "CorruptBody", 0, 3000)
    files = sorted({p for p, _ in where.values()})
    assert len(files) >= 3
    in_last = [s for s, (p, _) in where.items() if p == files[-1]]
    in_older = [s for s, (p, _) in where.items() if p == files[-2]]
    victims = {in_older[len(in_older) // 2], in_last[len(in_last) // 3], in_last[2 * len(in_last) // 3]}
    for s in victims:
        path, pos = where[s]
        flip(path, pos + HEADER_SIZE + 20)  # a body byte

    broker.start_again()
    expected = {o: s for o, s in zip(offsets, range(3000), strict=True) if s not in victims}
    assert served_problems(drain(api, broker.addr, topic, 0), expected) == []
    assert corrupt_units_metric(broker) == 3
    # reads found them while the start-up check ran in the background, or that check did first
    wait_until(lambda: "3 entries without an intact unit quarantined" in broker.log(), 30,
               "the start-up check's report")
    # the damaged units keep their queue offsets: a new message gets a fresh one
    assert send(api, broker.addr, topic, 0, range(5000, 5001)) == [3000]


def test_flipped_queue_offset_byte_is_never_served_with_a_wrong_offset(start_broker, make_api):
    broker, api = start_broker(), make_api()
    topic, offsets, where = fill_and_stop(broker, api, "CorruptQoff", 1, 1000)
    victim = 600
    path, pos = where[victim]
    flip(path, pos + QUEUE_OFFSET_AT + 6, 0x01)  # QUEUEOFFSET 600 becomes 856 in the unit

    broker.start_again()
    expected = {o: s for o, s in zip(offsets, range(1000), strict=True) if s != victim}
    assert served_problems(drain(api, broker.addr, topic, 1), expected) == []
    assert corrupt_units_metric(broker) == 1


def test_zeroed_consume_queue_tail_is_rebuilt_and_no_offset_is_reused(start_broker, make_api):
    broker, api = start_broker("mapedFileSizeConsumeQueue=6000000\n"), make_api()  # one consume queue file
    topic, offsets, _ = fill_and_stop(broker, api, "CorruptCq", 2, 4000)
    assert offsets == list(range(4000))
    cq_file = broker.store / "consumequeue" / topic / "2" / file_name(0)
    with open(cq_file, "r+b") as f:  # the second half of the entries
        f.seek(2000 * ENTRY_SIZE)
        f.write(bytes(2000 * ENTRY_SIZE))
        os.fsync(f.fileno())

    broker.start_again()
    assert served_problems(drain(api, broker.addr, topic, 2), dict(enumerate(range(4000)))) == []
    # new sends get fresh queue offsets: none is claimed by two messages
    new = send(api, broker.addr, topic, 2, range(10_000, 10_025))
    assert new == list(range(4000, 4025))
    everything = {**dict(enumerate(range(4000))), **dict(zip(new, range(10_000, 10_025), strict=True))}
    assert served_problems(drain(api, broker.addr, topic, 2), everything) == []


def test_one_damaged_unit_after_a_sigkill_costs_only_that_unit(start_broker, make_api):
    # the checkpoint stays where the start put it: everything sent is in the unflushed region
    broker = start_broker(SMALL_FILES + "flushIntervalConsumeQueue=3600000\n")
    topic = unique("CorruptKill")
    acked: dict[tuple[int, int], int] = {}  # (queue, offset) -> seq, as acknowledged
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer(queue_id: int) -> None:
        api = make_api()
        seq = queue_id * 1_000_000
        try:
            while not stop.is_set():
                for o, s in zip(send(api, broker.addr, topic, queue_id, range(seq, seq + 20)),
                                range(seq, seq + 20), strict=True):
                    acked[(queue_id, o)] = s
                seq += 20
        except BaseException as e:  # the kill cuts sends short
            if not stop.is_set():
                errors.append(e)

    threads = [threading.Thread(target=producer, args=(q,)) for q in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 3000 or errors, 60, "3,000 acknowledged messages")
    stop.set()
    broker.kill()  # under load: the producers are still sending
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert (broker.store / "abort").exists()

    where = units_on_disk(broker.store)
    by_phys = sorted(acked.values(), key=lambda s: (where[s][0].name, where[s][1]))
    victim = by_phys[len(by_phys) // 2]  # a unit in the middle, with acknowledged units behind it
    path, pos = where[victim]
    flip(path, pos + HEADER_SIZE + 30)

    broker.start_again()
    api = make_api()
    for q in range(2):
        expected = {o: s for (qq, o), s in acked.items() if qq == q and s != victim}
        got = [g for g in drain(api, broker.addr, topic, q)
               if g[0] in expected or g[1] == victim]  # sends the kill cut short may be stored unacknowledged
        assert served_problems(got, expected) == [], f"queue {q}"
    assert corrupt_units_metric(broker) == 1


def test_an_intact_store_restarts_with_nothing_quarantined(start_broker, make_api):
    """The checks find nothing in an intact store: no unit quarantined, everything served in order."""
    broker, api = start_broker(), make_api()
    topic, offsets, _ = fill_and_stop(broker, api, "Intact", 0, 2000)
    broker.start_again()
    got = drain(api, broker.addr, topic, 0)
    assert served_problems(got, dict(zip(offsets, range(2000), strict=True))) == []
    assert np.array_equal([g[0] for g in got], np.arange(2000))
    assert corrupt_units_metric(broker) == 0


def test_damaged_units_older_than_the_checked_files_are_dropped_by_the_pull(start_broker, make_api):
    """Start-up checks the last checkCRCOnRecoverFiles files only; a read of older units checks
    them itself (header against the consume queue entry, and body CRC) and leaves damaged ones out."""
    broker, api = start_broker(SMALL_FILES + "checkCRCOnRecoverFiles=1\n"), make_api()
    topic, offsets, where = fill_and_stop(broker, api, "CorruptOld", 3, 3000)
    first = sorted({p for p, _ in where.values()})[0]
    in_first = sorted(s for s, (p, _) in where.items() if p == first)
    body_victim, qoff_victim = in_first[100], in_first[200]
    flip(where[body_victim][0], where[body_victim][1] + HEADER_SIZE + 20)
    flip(where[qoff_victim][0], where[qoff_victim][1] + QUEUE_OFFSET_AT + 7, 0x01)

    broker.start_again()
    expected = {o: s for o, s in zip(offsets, range(3000), strict=True) if s not in (body_victim, qoff_victim)}
    for _ in range(2):  # a second consumer pass counts nothing twice
        assert served_problems(drain(api, broker.addr, topic, 3), expected) == []
    assert corrupt_units_metric(broker) == 2
    assert broker.log().count("is damaged: not served") == 2
