"""The native library (native.c through ctypes) against the pure-Python/numpy paths it replaces: the
unit encoder writes the same bytes, byte for byte, over fuzzed batches and their edges (and the store
the same commitlog with either); the dispatch info of property strings is the same as the numpy
scan's and the plain-Python one's. The library is used only when built from this native.c and not
switched off."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.message import DEFAULT_MAX_MESSAGE_SIZE, MessageBatch, pack_host
from spark_mq.common.properties import MAX_PROPERTIES_LENGTH, encode_properties
from spark_mq.common.unit import encode, native
from spark_mq.common.unit.layout import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG
from spark_mq.store import dispatch
from spark_mq.store.commitlog import CommitLog

STORE_HOST = pack_host("172.16.0.9", 10911)


@pytest.fixture(scope="module")
def lib():
    """The native library, built here when the set-up has not (a machine without a C compiler skips)."""
    if native._LIB is not None:
        return native._LIB
    if os.environ.get(native.DISABLE_ENV) == "0":
        pytest.skip(f"{native.DISABLE_ENV}=0: the native library is switched off")
    try:
        native.build()
    except RuntimeError as e:
        pytest.skip(f"the native library cannot be built here: {e}")
    loaded = native._load()
    assert loaded is not None, "built, but it does not load"
    return loaded


@pytest.fixture(scope="module")
def library(lib):
    """The native encoder."""
    return lib.spark_mq_encode_batch


@contextmanager
def _native(name: str, function):
    """``native.<name>`` set to ``function`` (None: the pure-Python path) for the block."""
    saved = getattr(native, name)
    setattr(native, name, function)
    try:
        yield
    finally:
        setattr(native, name, saved)


def _encoder(encoder):
    return _native("ENCODER", encoder)


def _both(library, batch: MessageBatch, *args) -> tuple[encode.EncodedBatch, encode.EncodedBatch]:
    """The batch encoded with the library (as the commitlog asks: a view) and without it."""
    with _encoder(library):
        fast = encode.encode_batch(batch, *args, view=True)
    with _encoder(None):
        pure = encode.encode_batch(batch, *args, view=True)
    assert type(pure.data) is bytes
    # the native encoder ran (a view of its buffer) unless the bodies average more than it takes
    native_ran = sum(map(len, batch.bodies)) <= len(batch) * encode.NATIVE_MAX_MEAN_BODY
    assert isinstance(fast.data, memoryview) == native_ran
    return fast, pure


def _assert_same(fast: encode.EncodedBatch, pure: encode.EncodedBatch) -> None:
    assert bytes(fast.data) == bytes(pure.data)
    assert fast.physical_offsets.tolist() == pure.physical_offsets.tolist()
    assert fast.sizes.tolist() == pure.sizes.tolist()


# topics as a user may name them, and as the encoder takes any string (UTF-8, up to 255 bytes)
topics = st.one_of(st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True),
                   st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60))
prop_text = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02"), max_size=15)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
sys_flags = st.one_of(st.sampled_from([0, COMPRESSED_FLAG, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG,
                                       BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG, -1]), int32)
bodies = st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"\x00" * 257, b"\xff" * 1024]))


@st.composite
def batches(draw) -> MessageBatch:
    n = draw(st.integers(2, 40))  # a lone message takes the struct path, not either batch encoder
    properties = draw(st.lists(st.one_of(st.just({}), st.dictionaries(prop_text.filter(bool), prop_text, max_size=4)),
                               min_size=n, max_size=n))
    batch = MessageBatch.of(
        draw(topics), draw(st.integers(0, 2**31 - 1)), draw(st.lists(bodies, min_size=n, max_size=n)),
        [encode_properties(p) for p in properties],
        born_host=pack_host(draw(st.sampled_from(["10.0.0.1", "255.255.255.255", "0.0.0.0"])),
                            draw(st.integers(0, 65535))),
    )
    batch.flags = np.array(draw(st.lists(int32, min_size=n, max_size=n)), dtype=np.int32)
    batch.born_timestamps = np.array(draw(st.lists(int64, min_size=n, max_size=n)), dtype=np.int64)
    batch.sys_flags = np.array(draw(st.lists(sys_flags, min_size=n, max_size=n)), dtype=np.int32)
    batch.reconsume_times = np.array(draw(st.lists(int32, min_size=n, max_size=n)), dtype=np.int32)
    return batch


@given(batch=batches(), physical_offset=st.integers(0, 2**50), queue_offset=st.integers(0, 2**50),
       store_ts=st.integers(0, 2**45))
@settings(max_examples=100, deadline=None)
def test_native_and_pure_encoders_write_the_same_bytes(library, batch, physical_offset, queue_offset,
                                                        store_ts):
    _assert_same(*_both(library, batch, physical_offset, queue_offset, store_ts, STORE_HOST))


def test_the_largest_bodies_and_properties_and_empty_ones(library):
    rng = np.random.default_rng(7)
    big = rng.bytes(DEFAULT_MAX_MESSAGE_SIZE)
    props = [b"", encode_properties({"K": "v" * (MAX_PROPERTIES_LENGTH - 3)}), b""]
    assert len(props[1]) == MAX_PROPERTIES_LENGTH
    empties = DEFAULT_MAX_MESSAGE_SIZE // encode.NATIVE_MAX_MEAN_BODY  # with the big body, a mean the library takes
    batch = MessageBatch.of("T" * 127, 2**31 - 1, [big, b"", big[:1], *[b""] * empties], props + [b""] * empties)
    fast, pure = _both(library, batch, 2**62, 2**62, 2**62, STORE_HOST)
    _assert_same(fast, pure)
    assert isinstance(fast.data, memoryview)
    assert int.from_bytes(bytes(fast.data[8:12]), "big") == zlib.crc32(big) & 0x7FFFFFFF
    # every body empty, no properties: the smallest units
    _assert_same(*_both(library, MessageBatch.of("T", 0, [b""] * 5), 0, 0, 0, STORE_HOST))
    with _encoder(library):  # bytes unless a view is asked for (the commitlog)
        assert type(encode.encode_batch(MessageBatch.of("T", 0, [b"a", b"b"]), 0, 0, 0, STORE_HOST).data) is bytes


@pytest.mark.parametrize("mean_body", [encode.NATIVE_MAX_MEAN_BODY, encode.NATIVE_MAX_MEAN_BODY + 1, 1024])
def test_batches_either_side_of_the_native_encoders_mean_body_give_the_same_bytes(library, mean_body):
    rng = np.random.default_rng(mean_body)
    sizes = rng.integers(0, mean_body, 64)
    sizes[-1] = 64 * mean_body - sizes[:-1].sum()  # exactly that mean
    batch = MessageBatch.of("T", 1, [rng.bytes(int(s)) for s in sizes])
    _assert_same(*_both(library, batch, 10, 20, 30, STORE_HOST))


def test_columns_of_other_types_and_slices_give_the_same_bytes(library):
    n = 12
    batch = MessageBatch.of("T", 3, [bytes([i]) * i for i in range(n)], [b"a\x01b\x02"] * n)
    batch.flags = np.arange(n, dtype=">i8") * 7  # big-endian and wider than the field: cast as numpy does
    batch.born_timestamps = np.arange(n, dtype=np.int32)
    batch.sys_flags = np.arange(n * 2, dtype=np.int64)[::2]  # not contiguous
    batch.reconsume_times = np.full(n, -1, dtype=np.int16)
    _assert_same(*_both(library, batch, 5, 6, 7, STORE_HOST))
    _assert_same(*_both(library, batch.slice(3, 9), 5, 6, 7, STORE_HOST))


def test_bodies_whose_lengths_do_not_count_bytes_are_refused_not_overrun(library):
    wide = memoryview(np.arange(4, dtype=np.int32))  # len() 4, 16 bytes
    with _encoder(library), pytest.raises(ValueError, match="do not add up"):
        encode.encode_batch(MessageBatch.of("T", 0, [b"abc", wide]), 0, 0, 1, STORE_HOST)


def test_the_store_writes_the_same_commitlog_with_either_encoder(library, tmp_path):
    rng = np.random.default_rng(3)
    batches = [MessageBatch.of("T", q % 3, [rng.bytes(int(s)) for s in rng.integers(0, 300, int(n))],
                               [encode_properties({"TAGS": f"t{q}", "KEYS": f"k{q}"})] * int(n))
               for q, n in enumerate(rng.integers(1, 50, 40))]
    files = {}
    for name, encoder in (("native", library), ("pure", None)):
        log = CommitLog(tmp_path / name, 64 * 1024)  # small files: batches are split at their ends
        log.load()
        with _encoder(encoder):
            offsets = [log.append_batch(b, i * 100, 1_700_000_000_000 + i, STORE_HOST).physical_offsets.tolist()
                       for i, b in enumerate(batches)]
        log.files.close()
        files[name] = (offsets, [p.read_bytes() for p in sorted((tmp_path / name).iterdir())])
    assert len(files["native"][1]) > 2
    assert files["native"] == files["pure"]


def test_switched_off_by_the_environment_or_used_when_built():
    code = "from spark_mq.common.unit import native; print(native.ENCODER is not None)"
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    off = subprocess.run([sys.executable, "-c", code], env={**env, native.DISABLE_ENV: "0"}, capture_output=True,
                         text=True, check=True)
    assert off.stdout.strip() == "False"
    on = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in env.items() if k != native.DISABLE_ENV},
                        capture_output=True, text=True, check=True)
    assert on.stdout.strip() == str(native.LIBRARY.exists())


def test_a_library_built_from_another_source_is_not_used(monkeypatch, tmp_path, caplog):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler here")
    other = tmp_path / "native.c"
    other.write_text(native.SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", other)
    monkeypatch.setattr(native, "LIBRARY", tmp_path / "libspark_mq_units.so")
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)  # the switch would refuse any library
    native.build()
    assert native._load() is not None
    built = native.LIBRARY.stat().st_mtime_ns
    native.build()  # nothing changed: nothing rebuilt
    assert native.LIBRARY.stat().st_mtime_ns == built
    other.write_text(other.read_text() + "/* changed again */\n")
    assert native._load() is None
    assert "built from another native.c" in caplog.text
    native.build()  # rebuilt (this process keeps the old one loaded: the dynamic loader reuses a path's library)
    assert native.source_digest().encode() in native.LIBRARY.read_bytes()


# -- dispatch info: tag codes and index keys of property strings ---------------------------------
names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "TAG", "KEYSX", "a", "UNIQ"])
ascii_values = st.text(st.sampled_from("ab Z09-_ \x01#"), max_size=12)
any_values = st.one_of(ascii_values, st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x02"),
                                              max_size=6))


@st.composite
def property_strings(draw, values=ascii_values) -> bytes:
    pairs = draw(st.lists(st.tuples(names, values), max_size=6))  # names repeat: the last one counts
    text = "".join(f"{n}\x01{v}\x02" for n, v in pairs)
    if text and draw(st.booleans()):
        text = text[:-1]  # RocketMQ 5 writes no final separator
    return text.encode()


def _infos(lib, strings: list[bytes], prefix) -> tuple:
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    with _native("DISPATCH_INFO", lib.spark_mq_dispatch_info):
        fast = dispatch.joined_dispatch_info(strings, lengths, prefix)
    with _native("DISPATCH_INFO", None):
        numpy_scan = dispatch.joined_dispatch_info(strings, lengths, prefix)
    return fast, numpy_scan


def _assert_same_info(a, b) -> None:
    for field in ("tag_codes", "key_rows", "key_hashes"):
        assert getattr(a, field).tolist() == getattr(b, field).tolist(), field
        assert getattr(a, field).dtype == getattr(b, field).dtype, field


@given(strings=st.lists(property_strings(), min_size=1, max_size=30), per_row=st.booleans(),
       prefix=st.integers(-(2**31), 2**31 - 1))
@settings(max_examples=150, deadline=None)
def test_native_dispatch_info_is_the_numpy_scans(lib, strings, per_row, prefix):
    prefixes = np.arange(prefix, prefix + len(strings), dtype=np.int64) if per_row else prefix
    fast, numpy_scan = _infos(lib, strings, prefixes)
    _assert_same_info(fast, numpy_scan)
    if not per_row:  # the plain-Python pass of small dispatches agrees too
        records = [dispatch.AppendRecord("T", 0, 0, np.zeros(len(strings), np.int64), np.zeros(len(strings), np.int64),
                                         None, np.zeros(len(strings), np.int64), 0, strings)]
        _assert_same_info(fast, dispatch.scalar_dispatch_info(records, lambda _topic: prefix))


@given(strings=st.lists(property_strings(any_values), min_size=1, max_size=10))
@settings(max_examples=100, deadline=None)
def test_non_ascii_values_are_left_to_the_numpy_scan(lib, strings):
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    with _native("DISPATCH_INFO", lib.spark_mq_dispatch_info):
        direct = dispatch._native_dispatch_info(strings, lengths, 7)
    fast, numpy_scan = _infos(lib, strings, 7)
    _assert_same_info(fast, numpy_scan)
    if b"".join(strings).isascii():
        assert direct is not None


def test_more_keys_than_first_made_room_for_are_all_found(lib):
    """Room for ``KEYS_ROOM`` index keys a message is made first; messages with more get all of theirs."""
    strings = [encode_properties({"KEYS": " ".join(f"k{i}-{j}" for j in range(i % 9)), "UNIQ_KEY": f"u{i}"})
               for i in range(40)]
    fast, numpy_scan = _infos(lib, strings, 11)
    assert fast.key_rows.size > encode.KEYS_ROOM * len(strings)
    _assert_same_info(fast, numpy_scan)


@pytest.mark.parametrize("seed", range(4))
def test_native_index_insert_writes_the_numpy_inserts_bytes(lib, tmp_path, seed):
    """Few slots (long chains within a batch), stale slot heads (what a truncated file leaves: past the
    entry count, negative, or entries of this batch's numbers), store times before the file's begin,
    a file filled past its end: both index files hold the same bytes after every batch."""
    from spark_mq.store.index_file import IndexFile

    rng = np.random.default_rng(seed)
    slot_num, index_num = int(rng.integers(3, 40)), 200
    files = {name: IndexFile(tmp_path / name, slot_num, index_num) for name in ("native", "numpy")}
    stale = rng.integers(-3, index_num + 5, slot_num).astype(">i4")
    begin = 0 if seed == 0 else 1_700_000_000_000  # a begin of 0: no time differences
    for f in files.values():
        f.slots[:] = stale
    for i in range(12):
        k = int(rng.integers(1, 60))
        hashes = rng.integers(0, 2**31 - 1, k).astype(np.int32)
        phys = np.arange(i * 1000, i * 1000 + k, dtype=np.int64) * 97
        ts = begin + rng.integers(-3000, 10**7, k)
        ts[0] = begin if i == 0 else ts[0]  # the file's begin timestamp (the first key's)
        for name, f in files.items():
            with _native("INDEX_PUT", lib.spark_mq_index_put if name == "native" else None):
                f.put_batch(hashes, phys, ts)
        assert bytes(files["native"]._mf.buf) == bytes(files["numpy"]._mf.buf), f"batch {i}"
    assert files["native"].is_full()
    for f in files.values():
        f.close()


def test_native_body_crcs_are_zlibs_and_the_checks_agree(lib):
    """The batch CRC of a slave's and recovery's unit checks: zlib's CRC-32 of every range (empty and
    unaligned ones too), masked; ranges outside the buffer are refused; the mismatches found are the same."""
    from spark_mq.common.unit.check import body_crc_mismatch
    from spark_mq.common.unit.layout import CRC_MASK

    rng = np.random.default_rng(5)
    data = rng.bytes(20_000)
    starts = rng.integers(0, 19_000, 300)
    ends = starts + rng.integers(0, 300, 300)
    expected = [zlib.crc32(data[s:e]) & CRC_MASK for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    stored = np.array(expected, dtype=np.int64)
    stored[::7] ^= 1  # every seventh is damaged
    results = {}
    for name, function in (("native", lib.spark_mq_body_crcs), ("python", None)):
        with _native("BODY_CRCS", function):
            results[name] = body_crc_mismatch(memoryview(data), stored, starts, ends).tolist()
    assert results["native"] == results["python"] == [i % 7 == 0 for i in range(300)]
    crcs = np.zeros(2, dtype=np.int64)
    outside = np.array([0, 19_990], dtype=np.int64).tobytes(), np.array([5, 20_001], dtype=np.int64).tobytes()
    assert lib.spark_mq_body_crcs(np.frombuffer(data, np.uint8).ctypes.data, len(data), *outside, 2, crcs.ctypes.data,
                                  CRC_MASK) == -1
    assert crcs.tolist() == [0, 0]


# -- the encoder's dispatch info: what a put's pass takes instead of scanning the strings -----------
def _encoders_info(library, strings: list[bytes], prefix: int):
    """The dispatch info the native encoder gives with a batch of ``strings`` (as a pass joins it), or None."""
    batch = MessageBatch.of("T", 0, [b"body"] * len(strings), strings)
    with _encoder(library):
        encoded = encode.encode_batch(batch, 0, 0, 1, STORE_HOST, view=True, key_prefix=prefix)
    with _encoder(None):  # the units are the same with and without the info
        assert bytes(encoded.data) == encode.encode_batch(batch, 0, 0, 1, STORE_HOST).data
    return None if encoded.dispatch is None else dispatch.joined_infos([encoded.dispatch], [0, len(strings)])


@given(strings=st.lists(property_strings(any_values), min_size=2, max_size=30), prefix=int32)
@settings(max_examples=150, deadline=None)
def test_the_encoders_dispatch_info_is_the_numpy_scans(lib, library, strings, prefix):
    """Given whenever every hashed value is ASCII and the batch has at most ``KEYS_ROOM`` index keys a
    message (else None: the pass scans the strings); then the numpy scan's, and the joined pass of
    several batches' infos is the scan of all their strings."""
    got = _encoders_info(library, strings, prefix)
    numpy_scan = _infos(lib, strings, prefix)[1]
    ascii_info = dispatch._native_dispatch_info(strings, np.array([len(s) for s in strings]), prefix) is not None
    assert (got is not None) == (ascii_info and numpy_scan.key_rows.size <= encode.KEYS_ROOM * len(strings))
    if got is not None:
        _assert_same_info(got, numpy_scan)
        half = len(strings) // 2
        parts = [_encoders_info(library, strings[:half], prefix), _encoders_info(library, strings[half:], prefix)]
        if None not in parts:
            _assert_same_info(dispatch.joined_infos(parts, [0, half, len(strings)]), numpy_scan)


def test_the_encoder_gives_no_info_unless_asked_and_none_for_too_many_keys(library):
    batch = MessageBatch.of("T", 0, [b"a", b"b"], [encode_properties({"KEYS": "k1 k2 k3 k4 k5 k6", "UNIQ_KEY": "u"}),
                                                   encode_properties({"TAGS": "t"})])
    with _encoder(library):
        assert encode.encode_batch(batch, 0, 0, 1, STORE_HOST).dispatch is None
        assert encode.encode_batch(batch, 0, 0, 1, STORE_HOST, key_prefix=3).dispatch is None  # 7 keys, room for 6
        assert encode.encode_batch(batch.slice(1, 2), 0, 0, 1, STORE_HOST, key_prefix=3).dispatch is None  # a lone one
        info = encode.encode_batch(MessageBatch.of("T", 0, [b"a", b"b"], [b"", b"TAGS\x01t"]), 0, 0, 1, STORE_HOST,
                                   key_prefix=3).dispatch
    assert info is not None and info.tag_codes.tolist() == [0, ord("t")] and info.key_rows.size == 0


def test_a_store_writes_the_same_consume_queues_and_index_with_either_path(tmp_path):
    """Batches whose dispatch info the encoder gives, and batches it leaves to the scan (a non-ASCII key,
    more keys than it makes room for, single messages), mixed within passes: the consume queue and index
    files are byte for byte those the numpy encoder and scan write."""
    from unit_helpers import tiny_config

    from spark_mq.store.message_store import MessageStore

    rng = np.random.default_rng(11)
    batches = []
    for j in range(120):
        n = int(rng.integers(1, 40))
        keys = ["é-key" if j % 17 == 5 else "k1 k2 k3 k4" if j % 13 == 7 else f"order-{j}-{i}" for i in range(n)]
        props = [encode_properties({"TAGS": f"tag{i % 5}", "KEYS": keys[i], "UNIQ_KEY": f"U{j:04d}{i:04d}"})
                 for i in range(n)]
        batches.append(MessageBatch.of(f"T{j % 2}", j % 3, [rng.bytes(int(rng.integers(0, 200))) for _ in range(n)],
                                       props, born_timestamp=1_700_000_000_000))
    files = {}
    for name in ("native", "numpy"):
        saved = native.ENCODER, native.DISPATCH_INFO, native.APPEND_ONE
        if name == "numpy":
            native.ENCODER = native.DISPATCH_INFO = native.APPEND_ONE = None
        try:
            store = MessageStore(tiny_config(tmp_path / name, max_hash_slot_num=997, max_index_num=5000),
                                 clock=lambda: 1_700_000_000.0).start()
            for k, b in enumerate(batches):
                store.put_messages(b)
                if k % 40 == 39:
                    store.get_max_offset("T0", 0)  # a read mid-way: passes of every size
            store.shutdown()
        finally:
            native.ENCODER, native.DISPATCH_INFO, native.APPEND_ONE = saved
        root = tmp_path / name
        queues = {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "consumequeue").rglob("*"))
                  if p.is_file()}
        files[name] = queues, [p.read_bytes() for p in sorted((root / "index").iterdir())]  # named by the time
    assert len(files["native"][0]) >= 6 and len(files["native"][1]) >= 2
    assert files["native"][0].keys() == files["numpy"][0].keys()
    for path, data in files["native"][0].items():
        assert data == files["numpy"][0][path], path
    assert files["native"][1] == files["numpy"][1]


def test_body_crcs_of_every_length_and_alignment_are_zlibs(lib):
    """The CRC by carry-less multiplication (from 64 bytes on, where the CPU has it) and the table's
    tail: every length from 0 to 300 and some long ones, at every start modulo 16."""
    from spark_mq.common.unit.layout import CRC_MASK

    data = np.random.default_rng(9).bytes(70_000)
    lengths = [*range(301), 1023, 1024, 4097, 65_536]
    starts = np.array([i % 16 + 7 * i for i in range(len(lengths))], dtype=np.int64)
    ends = starts + np.array(lengths, dtype=np.int64)
    crcs = np.zeros(len(lengths), dtype=np.int64)
    assert lib.spark_mq_body_crcs(np.frombuffer(data, np.uint8).ctypes.data, len(data), starts.tobytes(),
                                  ends.tobytes(), len(lengths), crcs.ctypes.data, CRC_MASK) == 0
    assert crcs.tolist() == [zlib.crc32(data[s:e]) & CRC_MASK for s, e in zip(starts.tolist(), ends.tolist(),
                                                                              strict=True)]
