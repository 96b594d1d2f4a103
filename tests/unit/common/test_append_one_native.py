"""The native one-message append (``native.APPEND_ONE``: a lone message's unit written into the
commitlog file by one call, encoded in a scratch buffer and ``pwrite``n) against the struct encoder and
``MappedFile.append`` it replaces: the same unit bytes over fuzzed
messages and their edges, the same commitlog files, consume queues, index files, queue offsets and put
results from a store fed the sends a broker gets (and batches between them), and a fallback, with nothing
written, wherever it does not apply."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_helpers import tiny_config

from spark_mq.common.errors import MessageValidationError
from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE, MessageBatch, pack_host
from spark_mq.common.one_row import one_row
from spark_mq.common.properties import MAX_PROPERTIES_LENGTH, encode_properties
from spark_mq.common.unit import native
from spark_mq.common.unit.encode import ONE_UNIT_SCRATCH, OneUnitWriter
from spark_mq.common.unit.layout import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG
from spark_mq.store import mapped_file
from spark_mq.store.commitlog import CommitLog
from spark_mq.store.message_store import MessageStore

STORE_HOST = pack_host("172.16.0.9", 10911)
FILE_SIZE = 160 * 1024  # small commitlog files: some units land in a fresh file (the batch path's, both ways)


@pytest.fixture(scope="module")
def append_one():
    """The library's one-message append (loaded: the set-up builds it; switched off, these tests skip)."""
    if native.APPEND_ONE is None:
        pytest.skip(f"the native library is not loaded (not built, or {native.DISABLE_ENV}=0)")
    return native.APPEND_ONE


@contextmanager
def _append_one(function):
    """``native.APPEND_ONE`` set to ``function`` (None: the struct encoder and ``pwrite``) for the block."""
    saved = native.APPEND_ONE
    native.APPEND_ONE = function
    try:
        yield
    finally:
        native.APPEND_ONE = saved


def _one(topic: str, queue_id: int, body, props: bytes, flag: int = 0, born_ts: int = 1_700_000_000_000,
         sys_flag: int = 0, reconsume: int = 0, born_host: bytes = pack_host("10.0.0.1", 5000)) -> MessageBatch:
    """A one-message batch as ``SendProcessor._batch`` makes it (shared one-row columns)."""
    return MessageBatch(topic=topic, queue_id=queue_id, bodies=[body], properties=[props],
                        flags=one_row(flag, np.int32), born_timestamps=np.array([born_ts], dtype=np.int64),
                        sys_flags=one_row(sys_flag, np.int32), reconsume_times=one_row(reconsume, np.int32),
                        born_host=born_host)


def _appended(tmp_path, name: str, function, batches: list[MessageBatch], store_host: bytes = STORE_HOST):
    """Every batch appended to a fresh commitlog with ``function`` as the one-message append: each append's
    (offsets, sizes, end, units), and the files' bytes."""
    log = CommitLog(tmp_path / name, FILE_SIZE)
    log.load()
    results = []
    with _append_one(function):
        for i, b in enumerate(batches):
            r = log.append_batch(b, i * 3, 1_700_000_000_000 + i, store_host)
            results.append((r.physical_offsets.tolist(), r.sizes.tolist(), r.end_offset,
                            None if r.units is None else bytes(r.units)))
    log.files.close()
    return results, [p.read_bytes() for p in sorted((tmp_path / name).iterdir())]


def _assert_same_appends(tmp_path, append_one, batches: list[MessageBatch], store_host: bytes = STORE_HOST):
    fast = _appended(tmp_path, "native", append_one, batches, store_host)
    pure = _appended(tmp_path, "pure", None, batches, store_host)
    assert fast == pure
    return fast


topics = st.one_of(st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True),
                   st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60))
prop_text = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02"), max_size=15)
int32 = st.integers(-(2**31), 2**31 - 1)
sys_flags = st.one_of(st.sampled_from([0, COMPRESSED_FLAG, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG,
                                       BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG, -1]), int32)


@st.composite
def lone_messages(draw) -> MessageBatch:
    props = draw(st.one_of(st.just({}), st.dictionaries(prop_text.filter(bool), prop_text, max_size=5)))
    return _one(draw(topics), draw(st.integers(0, 2**31 - 1)),
                draw(st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"\x00" * 257, b"\xff" * 4096]))),
                encode_properties(props), draw(int32), draw(st.integers(-(2**63), 2**63 - 1)), draw(sys_flags),
                draw(int32), pack_host(draw(st.sampled_from(["10.0.0.1", "255.255.255.255", "0.0.0.0"])),
                                       draw(st.integers(0, 65535))))


@given(messages=st.lists(lone_messages(), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_lone_messages_are_the_struct_encoders_units_byte_for_byte(append_one, tmp_path_factory, messages):
    _assert_same_appends(tmp_path_factory.mktemp("lone"), append_one, messages)


def test_the_largest_and_the_empty_message_and_the_end_of_a_file(append_one, tmp_path):
    rng = np.random.default_rng(5)
    largest_props = encode_properties({"K": "v" * (MAX_PROPERTIES_LENGTH - 3)})
    assert len(largest_props) == MAX_PROPERTIES_LENGTH
    messages = [_one("T" * 127, 2**31 - 1, rng.bytes(30_000), largest_props), _one("T", 0, b"", b""),
                _one("ü-topic", 1, "ünïcode".encode(), encode_properties({"TAGS": "ä", "KEYS": "k ü"}))]
    # enough messages that some meet a file's end: the blank and the fresh file are the batch path's, both ways
    messages += [_one("T", i % 4, rng.bytes(int(rng.integers(0, 2000))), encode_properties({"TAGS": f"t{i}"}))
                 for i in range(250)]
    results, files = _assert_same_appends(tmp_path, append_one, messages)
    assert len(files) >= 2 and len(results) == len(messages)


def test_batches_between_lone_messages_and_hosts_of_other_sizes(append_one, tmp_path):
    batch = MessageBatch.of("T", 2, [b"a" * i for i in range(5)], [encode_properties({"TAGS": "b"})] * 5)
    messages = [_one("T", 0, b"x", b""), batch, _one("T", 0, b"y", b"", born_host=b"\x01\x02\x03\x04"),
                _one("T", 1, b"z", b"", born_host=b"\x01" * 12), batch]
    _assert_same_appends(tmp_path, append_one, messages)
    _assert_same_appends(tmp_path / "short_store_host", append_one, messages, store_host=b"\x7f\x00\x00\x01")


def test_a_body_that_is_not_bytes_takes_the_batch_path(append_one, tmp_path):
    messages = [_one("T", 0, bytearray(b"abc"), b""), _one("T", 0, memoryview(b"defg"), b"P\x01v\x02"),
                _one("T", 0, b"hij", bytearray(b"P\x01v\x02"))]
    _assert_same_appends(tmp_path, append_one, messages)


def test_the_unit_is_pwritten_and_read_back_as_written(append_one, tmp_path):
    log = CommitLog(tmp_path, FILE_SIZE)
    log.load()
    with _append_one(append_one):
        log.append_batch(MessageBatch.of("T", 0, [b"first"]), 0, 1, STORE_HOST)  # a file to write into
        r = log.append_batch(_one("T", 0, b"second", b"A\x01b\x02"), 1, 2, STORE_HOST)
    mf = log.files.last
    assert isinstance(r.units, memoryview)  # the mapping's bytes, which the pwrite wrote
    assert bytes(r.units) == log.read_units(r.physical_offsets, r.sizes)
    assert mf.wrote_position == r.end_offset == log.max_offset()
    log.files.close()
    assert (tmp_path / mf.path.name).read_bytes()[r.physical_offsets.item(0):r.end_offset] == bytes(r.units)


def test_without_pwrite_the_unit_is_copied_into_the_mapping(append_one, tmp_path, monkeypatch):
    monkeypatch.setattr(mapped_file, "_HAS_PWRITE", False)  # the native call writes none of it: the copy does
    rng = np.random.default_rng(9)
    _assert_same_appends(tmp_path, append_one, [_one("T", i % 2, rng.bytes(i * 7), encode_properties({"K": str(i)}))
                                                for i in range(40)])


def test_a_unit_larger_than_the_scratch_takes_the_batch_path(append_one, tmp_path):
    big = _one("T", 0, b"b" * ONE_UNIT_SCRATCH, b"")
    assert OneUnitWriter().append(big, len(big.bodies[0]) + 100, 0, 0, 0, STORE_HOST, -1, 0) is None
    _assert_same_appends(tmp_path, append_one, [_one("T", 0, b"a", b""), big, _one("T", 0, b"c", b"")])


def _store_run(tmp_path, name: str, function, sends: list[MessageBatch]):
    """A store fed ``sends`` (``put_messages`` as the broker's send calls it) with ``function`` as the
    one-message append: the put results, queue ends, key lookups, commitlog and consume queue files, index files."""
    root = tmp_path / name
    with _append_one(function):
        store = MessageStore(tiny_config(root, max_hash_slot_num=997, max_index_num=5000),
                             clock=lambda: 1_700_000_000.0).start()
        results = []
        for k, b in enumerate(sends):
            try:
                r = store.put_messages(b, wait_flush=False)
            except MessageValidationError as e:
                results.append(("refused", str(e)))
                continue
            results.append((r.status, r.queue_offset, r.physical_offsets.tolist(), r.sizes.tolist(),
                            r.store_timestamp, r.store_host, r.end_offset,
                            None if r.units is None else bytes(r.units)))
            if k % 50 == 49:
                store.get_max_offset("T0", 0)  # a read mid-way: dispatch passes of every size
        ends = {(t, q): (store.get_min_offset(t, q), store.get_max_offset(t, q))
                for t in ("T0", "T1") for q in range(3)}
        found = [store.query_by_key("T0", f"key-{i}", 10) for i in range(0, 300, 7)]
        store.shutdown()
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
             if p.is_file() and (p.parent.name == "commitlog" or "consumequeue" in p.parts)}
    index = [p.read_bytes() for p in sorted((root / "index").iterdir())]  # named by the wall clock's time
    return results, ends, found, files, index


def test_a_store_keeps_the_same_commitlog_queues_index_and_results_either_way(append_one, tmp_path):
    rng = np.random.default_rng(13)
    sends = []
    for i in range(300):
        props = encode_properties({"TAGS": f"tag{i % 5}", "KEYS": f"key-{i} other-{i % 3}", "UNIQ_KEY": f"U{i:06d}"})
        if i % 37 == 11:  # a batch now and then
            sends.append(MessageBatch.of(f"T{i % 2}", i % 3, [rng.bytes(40)] * 3, [props] * 3))
        elif i % 61 == 7:  # refused: the same error either way, nothing written
            sends.append(_one(f"T{i % 2}", i % 3, b"x" * (DEFAULT_MAX_MESSAGE_SIZE + 1), props))
        else:
            sends.append(_one(f"T{i % 2}", i % 3, rng.bytes(int(rng.integers(0, 400))), props, flag=i,
                              born_ts=1_700_000_000_000 + i))
    fast = _store_run(tmp_path, "native", append_one, sends)
    pure = _store_run(tmp_path, "pure", None, sends)
    assert fast[0] == pure[0]
    assert any(r[0] == "refused" for r in fast[0])
    assert fast[1:3] == pure[1:3]
    assert sum(map(len, fast[2])) > 10
    assert fast[3].keys() == pure[3].keys() and len(fast[3]) >= 4
    for path, data in fast[3].items():
        assert data == pure[3][path], path
    assert len(fast[4]) >= 1 and fast[4] == pure[4]

