"""MessageStore round trips on tiny files: puts, reads by queue offset, time, key and id, tag
filters, reopen, and bad input rejected before anything is written."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from unit_helpers import FakeClock, KiB, tiny_config

from spark_mq.common.config import SYNC_FLUSH
from spark_mq.common.errors import MessageValidationError, StoreLockedError, StoreNotWritableError
from spark_mq.common.java_hash import java_hash
from spark_mq.common.message import FEW_MESSAGES, Message, MessageBatch
from spark_mq.common.properties import MAX_PROPERTIES_LENGTH
from spark_mq.common.unit.decode import StoredMessage, decode_message
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetResult, GetStatus, PutStatus

TOPIC = "TopicTest"


def decoded(res: GetResult) -> list[StoredMessage]:
    return [decode_message(res.data[s : s + n]) for s, n in zip(res.unit_starts().tolist(), res.sizes.tolist(),
                                                                 strict=True)]


def read_all(store: MessageStore, topic: str, qid: int, page: int = 1000, **kw) -> list[StoredMessage]:
    """Follow next_begin_offset from the queue's minimum until nothing new is left."""
    out, offset = [], store.get_min_offset(topic, qid)
    while True:
        res = store.get_messages(topic, qid, offset, page, **kw)
        if res.status != GetStatus.FOUND:
            assert res.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MATCHED_MESSAGE)
            if res.status == GetStatus.OFFSET_OVERFLOW_ONE:
                return out
        assert res.next_begin_offset > offset
        out += decoded(res)
        offset = res.next_begin_offset


def bodies(rng: random.Random, n: int, lo: int = 0, hi: int = 3000) -> list[bytes]:
    return [rng.randbytes(rng.randrange(lo, hi)) for _ in range(n)]


def state(store: MessageStore, topic: str = TOPIC, qids=range(4)) -> tuple:
    return store.commitlog.max_offset(), [store.get_max_offset(topic, q) for q in qids]


# -- puts and reads by queue offset -------------------------------------------------------------
def test_single_and_batch_puts_across_files(make_store):
    rng = random.Random(1)
    store = make_store()
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    for i, body in enumerate(bodies(rng, 40, 500, 2500)):
        res = store.put_message(Message(TOPIC, body, tags="A", keys=[f"s{i}"]), 0)
        assert res.status == PutStatus.PUT_OK and res.count == 1
        assert res.queue_offset == len(sent[0])
        sent[0].append(body)
    for qid in (0, 1, 0):
        batch_bodies = bodies(rng, rng.randrange(50, 150))
        res = store.put_messages(MessageBatch.of(TOPIC, qid, batch_bodies))
        assert res.status == PutStatus.PUT_OK
        assert res.queue_offset == len(sent[qid]) and res.count == len(batch_bodies)
        assert np.all(np.diff(res.physical_offsets) > 0)
        sent[qid] += batch_bodies
    assert len(list((store.root / "commitlog").iterdir())) >= 5
    assert store.queue_ids(TOPIC) == [0, 1]

    for qid, expect in sent.items():
        assert (store.get_min_offset(TOPIC, qid), store.get_max_offset(TOPIC, qid)) == (0, len(expect))
        res = store.get_messages(TOPIC, qid, 0, 10_000, max_bytes=1 << 30)
        assert res.status == GetStatus.FOUND
        assert res.next_begin_offset == len(expect)
        assert res.queue_offsets.tolist() == list(range(len(expect)))
        msgs = decoded(res)
        assert [m.body for m in msgs] == expect
        assert [m.queue_offset for m in msgs] == list(range(len(expect)))
        assert {m.topic for m in msgs} == {TOPIC} and {m.queue_id for m in msgs} == {qid}
        # paging by next_begin_offset gives the same messages
        assert [m.body for m in read_all(store, TOPIC, qid, page=7)] == expect


def test_get_from_the_middle_and_next_begin_offset(make_store):
    store = make_store()
    store.put_messages(MessageBatch.of(TOPIC, 2, [b"m%d" % i for i in range(30)]))
    res = store.get_messages(TOPIC, 2, 10, 5)
    assert res.status == GetStatus.FOUND
    assert [m.body for m in decoded(res)] == [b"m10", b"m11", b"m12", b"m13", b"m14"]
    assert res.next_begin_offset == 15 and (res.min_offset, res.max_offset) == (0, 30)
    res = store.get_messages(TOPIC, 2, 27, 10)
    assert res.count == 3 and res.next_begin_offset == 30


def test_max_bytes_limits_a_get_but_always_makes_progress(make_store):
    store = make_store()
    res = store.put_messages(MessageBatch.of(TOPIC, 0, [bytes(1000)] * 10))
    unit = int(res.sizes[0])
    got = store.get_messages(TOPIC, 0, 0, 10, max_bytes=unit * 5 // 2)
    assert got.count == 2 and got.next_begin_offset == 2 and len(got.data) == 2 * unit
    got = store.get_messages(TOPIC, 0, 3, 10, max_bytes=10)
    assert got.count == 1 and got.next_begin_offset == 4


def test_get_statuses(make_store):
    clock = FakeClock(time.time())
    store = make_store(clock=clock)
    store.put_messages(MessageBatch.of(TOPIC, 0, [b"x"] * 5))

    res = store.get_messages("NoSuchTopic", 0, 0, 10)
    assert res.status == GetStatus.NO_MATCHED_LOGIC_QUEUE and res.count == 0
    assert store.get_messages(TOPIC, 3, 0, 10).status == GetStatus.NO_MATCHED_LOGIC_QUEUE

    res = store.get_messages(TOPIC, 0, 5, 10)
    assert (res.status, res.next_begin_offset, res.count) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, 0)
    res = store.get_messages(TOPIC, 0, 9, 10)
    assert (res.status, res.next_begin_offset, res.count) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5, 0)

    res = store.get_messages(TOPIC, 0, 0, 10, tag_codes={java_hash("NoSuchTag")})
    assert (res.status, res.next_begin_offset, res.count) == (GetStatus.NO_MATCHED_MESSAGE, 5, 0)

    # retention deletes old commitlog files: their queue offsets are now too small
    store.put_messages(MessageBatch.of(TOPIC, 0, [bytes(2000)] * 200))
    clock.advance(100 * 3600)  # past fileReservedTime (72 h)
    store.retention.request_delete()
    assert store.retention.run_once().deleted_files > 0
    lo = store.get_min_offset(TOPIC, 0)
    assert 0 < lo < store.get_max_offset(TOPIC, 0)
    res = store.get_messages(TOPIC, 0, 0, 10)
    assert (res.status, res.next_begin_offset, res.min_offset) == (GetStatus.OFFSET_TOO_SMALL, lo, lo)
    res = store.get_messages(TOPIC, 0, lo, 10)
    assert res.status == GetStatus.FOUND and res.queue_offsets[0] == lo
    assert decoded(res)[0].queue_offset == lo



def _end_answer(res: GetResult | None) -> tuple | None:
    return None if res is None else (res.status, res.next_begin_offset, res.min_offset, res.max_offset, res.count)


def test_at_queue_end_answers_as_a_read_at_the_end_would(make_store):
    """A consumer's next pull (at the queue's end) is answered without a read: the same answer as the read."""
    clock = FakeClock(time.time())
    store = make_store(clock=clock)
    assert store.at_queue_end(TOPIC, 0, 0) is None  # nothing stored: read (the read says which status)
    store.put_messages(MessageBatch.of(TOPIC, 0, [b"x"] * 5))
    assert store.get_max_offset(TOPIC, 0) == 5  # the queue exists once its first messages are dispatched
    store.put_messages(MessageBatch.of(TOPIC, 0, [b"x"] * 3))  # its end is the last put's, dispatched or not
    end = store.at_queue_end(TOPIC, 0, 8)
    assert _end_answer(end) == (GetStatus.OFFSET_OVERFLOW_ONE, 8, 0, 8, 0)
    assert _end_answer(end) == _end_answer(store.get_messages(TOPIC, 0, 8, 10))
    for offset in (0, 5, 7, 9):  # messages to read, or an offset past the end: the read answers
        assert store.at_queue_end(TOPIC, 0, offset) is None
    assert store.at_queue_end(TOPIC, 1, 5) is None and store.at_queue_end("NoSuchTopic", 0, 5) is None

    # retention moved the queue's minimum: the answer carries it as the read's does
    store.put_messages(MessageBatch.of(TOPIC, 0, [bytes(2000)] * 200))
    clock.advance(100 * 3600)  # past fileReservedTime (72 h)
    store.retention.request_delete()
    assert store.retention.run_once().deleted_files > 0
    end = store.at_queue_end(TOPIC, 0, 208)
    assert end is not None and end.min_offset > 0
    assert _end_answer(end) == _end_answer(store.get_messages(TOPIC, 0, 208, 10))

# -- tags ---------------------------------------------------------------------------------------
def test_tag_filter(make_store):
    rng = random.Random(4)
    store = make_store()
    tags = [rng.choice(["A", "B", "C", None, "标签"]) for _ in range(700)]
    msgs = [Message(TOPIC, f"{i}".encode(), tags=t) for i, t in enumerate(tags)]
    for chunk in range(0, 700, 100):
        store.put_messages(MessageBatch.from_messages(msgs[chunk : chunk + 100], 1))
    for wanted in ({"A"}, {"B", "标签"}, {"C"}):
        codes = {java_hash(t) for t in wanted}
        got = read_all(store, TOPIC, 1, page=16, tag_codes=codes)
        assert [m.body for m in got] == [f"{i}".encode() for i, t in enumerate(tags) if t in wanted]
        assert all(m.tags in wanted for m in got)
    res = store.get_messages(TOPIC, 1, 0, 3, tag_codes={java_hash("A")})
    first_a = [i for i, t in enumerate(tags) if t == "A"][:3]
    assert res.queue_offsets.tolist() == first_a
    assert res.next_begin_offset == first_a[-1] + 1


def test_properties_without_trailing_separator_are_dispatched(make_store):
    """RocketMQ 5 omits the final \\x02: tags and keys must still be found."""
    store = make_store()
    store.put_messages(MessageBatch.of(TOPIC, 0, [b"a", b"b", b"c"],
                                       [b"TAGS\x01X", b"KEYS\x01k1 k2\x02TAGS\x01Y", b""]))
    res = store.get_messages(TOPIC, 0, 0, 10, tag_codes={java_hash("X")})
    assert [m.body for m in decoded(res)] == [b"a"]
    res = store.get_messages(TOPIC, 0, 0, 10, tag_codes={java_hash("Y")})
    assert [m.body for m in decoded(res)] == [b"b"]
    assert [decode_message(u).body for u in store.query_by_key(TOPIC, "k2")] == [b"b"]


# -- by time, key and id ------------------------------------------------------------------------
def test_offset_in_queue_by_time(make_store):
    clock = FakeClock(1_700_000_000.0)
    store = make_store(clock=clock)
    stamps = []
    for i in range(120):
        res = store.put_message(Message(TOPIC, b"%d" % i), 0)
        stamps.append(res.store_timestamp)
        assert res.store_timestamp == int(clock() * 1000)
        clock.advance(random.Random(i).choice([0, 0.001, 0.25, 3]))
    assert store.get_earliest_store_time(TOPIC, 0) == stamps[0]
    for ts in [stamps[0] - 1, *stamps, *(s + 1 for s in stamps), stamps[-1] + 10_000]:
        want = next((i for i, s in enumerate(stamps) if s >= ts), len(stamps))
        assert store.get_offset_in_queue_by_time(TOPIC, 0, ts) == want
    assert store.get_offset_in_queue_by_time("NoSuchTopic", 0, 0) == 0


def test_store_time_never_goes_back_when_the_clock_does(make_store):
    clock = FakeClock(1_700_000_000.0)
    store = make_store(clock=clock)
    first = store.put_message(Message(TOPIC, b"a"), 0).store_timestamp
    clock.advance(-60)
    assert store.put_message(Message(TOPIC, b"b"), 0).store_timestamp >= first


def _keyed_store(make_store, clock):
    """Messages whose KEYS and UNIQ_KEY repeat across time, in two topics."""
    store = make_store(clock=clock)
    rng = random.Random(11)
    sent = []  # (topic, keys, uniq, body, store ts, msg id)
    for i in range(300):
        topic = rng.choice([TOPIC, "Other"])
        keys = [f"k{rng.randrange(20)}" for _ in range(rng.randrange(3))]
        uniq = f"U{rng.randrange(40)}"
        body = b"body-%d" % i
        if i % 2:
            res = store.put_message(Message(topic, body, keys=keys), rng.randrange(2), uniq_key=uniq)
        else:
            batch = MessageBatch.from_messages([Message(topic, body, keys=keys)], rng.randrange(2), [uniq])
            res = store.put_messages(batch)
        sent.append((topic, keys, uniq, body, res.store_timestamp, res.msg_ids()[0]))
        clock.advance(rng.choice([0, 0.3, 0.7, 1.9]))
    return store, sent


def _expected_by_key(sent, topic, key, begin=0, end=2**62, max_num=64):
    hits = [s[3] for s in reversed(sent) if s[0] == topic and (key in s[1] or key == s[2]) and begin <= s[4] <= end]
    return hits[:max_num]


def test_query_by_key_from_keys_and_uniq_key(make_store):
    store, sent = _keyed_store(make_store, FakeClock(1_700_000_000.123))
    for topic in (TOPIC, "Other"):
        for key in [f"k{i}" for i in range(20)] + [f"U{i}" for i in range(40)] + ["absent"]:
            got = [decode_message(u) for u in store.query_by_key(topic, key, max_num=1000)]
            assert [m.body for m in got] == _expected_by_key(sent, topic, key, max_num=1000), (topic, key)
            assert all(m.topic == topic for m in got)
            got = store.query_by_key(topic, key, max_num=2)
            assert [decode_message(u).body for u in got] == _expected_by_key(sent, topic, key, max_num=2)


def test_query_by_key_time_window(make_store):
    store, sent = _keyed_store(make_store, FakeClock(1_700_000_000.123))
    stamps = sorted({s[4] for s in sent})
    rng = random.Random(12)
    for _ in range(60):
        # windows whose edges are exact store times, or a millisecond either side of one
        begin = rng.choice(stamps) + rng.choice([-1, 0, 1])
        end = max(begin, rng.choice(stamps) + rng.choice([-1, 0, 1]))
        for key in ("k3", "k7", "U5", "U17"):
            got = [decode_message(u).body for u in store.query_by_key(TOPIC, key, 1000, begin, end)]
            assert got == _expected_by_key(sent, TOPIC, key, begin, end, 1000), (key, begin, end)


def test_look_message_by_id(make_store):
    store, sent = _keyed_store(make_store, FakeClock())
    for topic, _keys, _uniq, body, ts, msg_id in sent:
        m = decode_message(store.look_message_by_id(msg_id))
        assert (m.topic, m.body, m.store_timestamp) == (topic, body, ts)
    res = store.put_messages(MessageBatch.of(TOPIC, 3, [b"x", b"y", b"z"]))
    ids = res.msg_ids()
    assert len(set(ids)) == 3 and all(len(i) == 32 and i == i.upper() for i in ids)
    assert [decode_message(store.look_message_by_id(i)).body for i in ids] == [b"x", b"y", b"z"]
    # an id of another broker, or past the end, finds nothing
    other_host = "0A000001" + ids[0][8:]
    assert store.look_message_by_id(other_host) is None
    assert store.look_message_by_id(ids[0][:16] + f"{10**12:016X}") is None
    with pytest.raises(MessageValidationError, match="32 hex"):
        store.look_message_by_id("not-an-id")


# -- reopen -------------------------------------------------------------------------------------
def _snapshot(store: MessageStore, sent) -> dict:
    snap = {}
    for topic in (TOPIC, "Other"):
        for qid in store.queue_ids(topic):
            res = store.get_messages(topic, qid, 0, 10_000, max_bytes=1 << 30)
            snap[(topic, qid)] = (res.status, res.data, res.queue_offsets.tolist(), res.next_begin_offset,
                                  store.get_min_offset(topic, qid), store.get_max_offset(topic, qid))
            snap[(topic, qid, "A")] = store.get_messages(topic, qid, 0, 50, tag_codes={java_hash("A")}).data
            snap[(topic, qid, "time")] = [store.get_offset_in_queue_by_time(topic, qid, s[4]) for s in sent[::10]]
        for key in ("k1", "k2", "U3", "U9"):
            snap[(topic, key)] = store.query_by_key(topic, key, 100)
            snap[(topic, key, "window")] = store.query_by_key(topic, key, 100, sent[50][4], sent[200][4])
    snap["ids"] = [store.look_message_by_id(s[5]) for s in sent]
    snap["commitlog"] = (store.commitlog.min_offset(), store.commitlog.max_offset())
    return snap


def test_reopen_after_shutdown_gives_identical_results(make_store, tmp_path):
    clock = FakeClock()
    store, sent = _keyed_store(make_store, clock)
    before = _snapshot(store, sent)
    assert len(before[(TOPIC, "k1")]) > 0
    store.shutdown()
    assert not (store.root / "abort").exists()
    again = make_store(clock=clock)
    assert again.recovery is not None and not again.recovery.abnormal
    assert _snapshot(again, sent) == before
    # and it keeps going where it stopped
    res = again.put_message(Message(TOPIC, b"after"), 0)
    assert res.queue_offset == before[(TOPIC, 0)][5]
    assert decode_message(again.look_message_by_id(res.msg_ids()[0])).body == b"after"


# -- bad input ----------------------------------------------------------------------------------
def _bad_batches():
    ok = MessageBatch.of(TOPIC, 0, [b"a", b"b"])
    short_flags = MessageBatch.of(TOPIC, 0, [b"a", b"b"])
    short_flags.flags = np.zeros(1, dtype=np.int32)
    short_props = MessageBatch.of(TOPIC, 0, [b"a", b"b"], [b""])
    return [
        ("oversized body", MessageBatch.of(TOPIC, 0, [b"a", bytes(16 * KiB + 1)]), "maxMessageSize"),
        ("empty topic", MessageBatch.of("", 0, [b"a"]), "empty"),
        ("128-byte topic", MessageBatch.of("t" * 128, 0, [b"a"]), "128 bytes"),
        ("space in topic", MessageBatch.of("a b", 0, [b"a"]), "illegal characters"),
        ("slash in topic", MessageBatch.of("a/b", 0, [b"a"]), "illegal characters"),
        ("non-ascii topic", MessageBatch.of("主题", 0, [b"a"]), "illegal characters"),
        ("long properties", MessageBatch.of(TOPIC, 0, [b"a"], [b"p\x01" + b"x" * 32766 + b"\x02"]), "32767"),
        ("columns: flags", short_flags, "different lengths"),
        ("columns: properties", short_props, "different lengths"),
        ("no messages", MessageBatch.of(TOPIC, 0, []), "at least one"),
        ("queue id", MessageBatch.of(TOPIC, -1, [b"a"]), "queue id"),
        ("good batch for contrast", ok, None),
    ]


@pytest.mark.parametrize(("what", "batch", "error"), _bad_batches(), ids=[b[0] for b in _bad_batches()])
def test_bad_input_is_rejected_and_nothing_is_written(make_store, what, batch, error):
    store = make_store()
    store.put_messages(MessageBatch.of(TOPIC, 0, [b"before"] * 3))
    before = state(store)
    if error is None:
        store.put_messages(batch)
        assert state(store) != before
        return
    with pytest.raises(MessageValidationError, match=error):
        store.put_messages(batch)
    assert state(store) == before
    assert [m.body for m in read_all(store, TOPIC, 0)] == [b"before"] * 3


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message(TOPIC, bytes(16 * KiB + 1)), "maxMessageSize"),
        (Message("", b"x"), "empty"),
        (Message("x" * 128, b"x"), "over the 127"),
        (Message("bad topic!", b"x"), "illegal characters"),
        (Message(TOPIC, b"x", properties={"p": "v" * 33_000}), "32767"),
    ],
)
def test_bad_single_message_is_rejected(make_store, message, error):
    store = make_store()
    before = state(store)
    with pytest.raises(MessageValidationError, match=error):
        store.put_message(message, 0)
    assert state(store) == before


def test_properties_with_separators_are_rejected(make_store):
    store = make_store()
    with pytest.raises(ValueError, match="illegal"):
        store.put_message(Message(TOPIC, b"x", properties={"a": "b\x02c"}), 0)
    assert state(store) == (0, [0, 0, 0, 0])


def test_a_batch_of_mixed_topics_is_rejected():
    with pytest.raises(MessageValidationError, match="same topic"):
        MessageBatch.from_messages([Message("A", b"1"), Message("B", b"2")], 0)


def test_default_max_message_size_is_4_mib(make_store):
    store = make_store(maped_file_size_commit_log=8 * 1024 * KiB, max_message_size=4 * 1024 * KiB)
    with pytest.raises(MessageValidationError, match="maxMessageSize 4194304"):
        store.put_message(Message(TOPIC, bytes(4 * 1024 * KiB + 1)), 0)
    assert state(store) == (0, [0, 0, 0, 0])
    assert store.put_message(Message(TOPIC, bytes(4 * 1024 * KiB)), 0).status == PutStatus.PUT_OK


@pytest.mark.parametrize("n", [1, 3, FEW_MESSAGES, FEW_MESSAGES + 1, 40])
def test_a_batch_with_one_message_over_a_limit_is_refused_naming_it(make_store, n):
    """Checked without numpy up to FEW_MESSAGES messages, with it beyond: the same answer either way."""
    store = make_store(max_message_size=4 * KiB)
    bodies, props = [b"x"] * n, [b"a\x01b\x02"] * n
    bodies[-1] = bytes(4 * KiB + 1)
    with pytest.raises(MessageValidationError, match=f"message {n - 1} body is {4 * KiB + 1} bytes, over maxMess"):
        store.put_messages(MessageBatch.of(TOPIC, 0, bodies, props))
    bodies[-1], props[-1] = bytes(4 * KiB), b"k\x01" + b"v" * (MAX_PROPERTIES_LENGTH - 1)
    with pytest.raises(MessageValidationError, match=f"message {n - 1} properties are {MAX_PROPERTIES_LENGTH + 1} "):
        store.put_messages(MessageBatch.of(TOPIC, 0, bodies, props))
    assert state(store) == (0, [0, 0, 0, 0])
    props[-1] = props[-1][:-1]  # at both limits: stored
    assert store.put_messages(MessageBatch.of(TOPIC, 0, bodies, props)).status == PutStatus.PUT_OK
    assert store.get_max_offset(TOPIC, 0) == n


def test_a_valid_message_too_large_for_a_commitlog_file_is_a_validation_error(make_store):
    """maxMessageSize bounds the body; with properties the unit can still outgrow a tiny file."""
    store = make_store(max_message_size=60 * KiB)
    store.put_message(Message(TOPIC, b"x"), 0)
    before = state(store)
    big = Message(TOPIC, bytes(60 * KiB), properties={"p": "v" * 20_000})
    with pytest.raises(MessageValidationError, match="cannot fit"):
        store.put_message(big, 0)
    assert state(store) == before


# -- visibility ---------------------------------------------------------------------------------
def test_a_put_is_readable_as_soon_as_it_returns(make_store):
    """Reads must wait for a dispatch the background thread has already started."""
    store = make_store(maped_file_size_commit_log=16 * 1024 * KiB, maped_file_size_consume_queue=20 * 100_000,
                       max_hash_slot_num=1000, max_index_num=100_000)
    rng = random.Random(13)
    batch = MessageBatch.of(TOPIC, 0, [b"x" * 10] * 1000, [b"TAGS\x01a\x02KEYS\x01k1 k2\x02"] * 1000)
    total, missed = 0, []
    for i in range(60):
        store.put_messages(batch)
        total += len(batch)
        time.sleep(rng.random() * 0.002)  # let the background dispatcher start on it, or not
        if store.get_max_offset(TOPIC, 0) != total:
            missed.append(i)
    assert missed == []


# -- lifecycle ----------------------------------------------------------------------------------
def test_second_store_on_the_same_directory_is_refused(make_store, tmp_path):
    store = make_store()
    store.put_message(Message(TOPIC, b"x"), 0)
    with pytest.raises(StoreLockedError, match="in use"):
        MessageStore(tiny_config(tmp_path / "store"), disk_ratio=lambda _p: 0.1).start()
    # the first store is unaffected
    assert store.put_message(Message(TOPIC, b"y"), 0).queue_offset == 1
    store.shutdown()
    again = make_store()
    assert again.get_max_offset(TOPIC, 0) == 2


def test_put_before_start_is_refused(tmp_path):
    store = MessageStore(tiny_config(tmp_path / "store"))
    with pytest.raises(StoreNotWritableError, match="start"):
        store.put_message(Message(TOPIC, b"x"), 0)


def test_sync_flush_put_returns_put_ok(make_store):
    store = make_store(flush_disk_type=SYNC_FLUSH)
    res = store.put_messages(MessageBatch.of(TOPIC, 0, [b"a"] * 10))
    assert res.status == PutStatus.PUT_OK
    assert store.commitlog.flushed_offset() >= int(res.physical_offsets[-1] + res.sizes[-1])
    assert store.put_message(Message(TOPIC, b"b"), 1).status == PutStatus.PUT_OK
