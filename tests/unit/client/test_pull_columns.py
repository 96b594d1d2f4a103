"""The columnar pull API (``PullResult.batch`` → ``StoredBatch``) against the object API: every
column equals what ``PullResult.messages()`` decodes, whichever way the unit starts were found;
and ``StoredMessage``'s lazily decoded properties behave as an ordinary field."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.results import VECTOR_SPLIT_MIN_BYTES, PullResult, PullStatus, pull_body_starts
from spark_mq.client.subscription import filter_by_tags
from spark_mq.common.errors import BatchBodyError
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.properties import KEYS, TAGS, decode_properties, encode_properties
from spark_mq.common.unit.batch import StoredBatch
from spark_mq.common.unit.chain import back_to_back_units
from spark_mq.common.unit.decode import StoredMessage, decode_messages
from spark_mq.common.unit.encode import encode_batch
from spark_mq.common.unit.layout import COMPRESSED_FLAG, MESSAGE_MAGIC, field_offset
from spark_mq.remoting.message_batch_codec import split_pull_body

COLUMNS = {  # StoredBatch column -> StoredMessage field
    "topics": "topic", "queue_ids": "queue_id", "queue_offsets": "queue_offset",
    "physical_offsets": "physical_offset", "bodies": "body", "properties": "properties", "flags": "flag",
    "sys_flags": "sys_flag", "body_crcs": "body_crc", "born_timestamps": "born_timestamp",
    "born_hosts": "born_host", "store_timestamps": "store_timestamp", "store_hosts": "store_host",
    "reconsume_times": "reconsume_times", "tags": "tags", "keys": "keys",
}
safe_text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=10)


def units(topic: str, queue_id: int, bodies: list[bytes], props: list[dict[str, str]], *, pos: int = 0,
          queue_offset: int = 0, compressed: list[bool] | None = None, flags: list[int] | None = None) -> bytes:
    """Commitlog units of one batch, back to back (a pull body)."""
    batch = MessageBatch.of(topic, queue_id, bodies, [encode_properties(p) for p in props], born_timestamp=1234,
                            born_host=pack_host("10.0.0.7", 4567))
    if compressed:
        batch.sys_flags[:] = [COMPRESSED_FLAG if c else 0 for c in compressed]
    if flags:
        batch.flags[:] = flags
    batch.reconsume_times[:] = 2
    return encode_batch(batch, pos, queue_offset, 99_000, pack_host("192.168.1.2", 10911)).data


@st.composite
def pull_bodies(draw) -> bytes:
    parts: list[bytes] = []
    pos = draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 6))
        raw = draw(st.lists(st.binary(max_size=200), min_size=n, max_size=n))
        compressed = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        props = draw(st.lists(st.dictionaries(st.sampled_from([TAGS, KEYS, "a", "UNIQ_KEY"]), safe_text, max_size=3),
                              min_size=n, max_size=n))
        bodies = [zlib.compress(b) if c else b for b, c in zip(raw, compressed, strict=True)]
        part = units(draw(st.sampled_from(["T", "topic-β", "%RETRY%g"])), draw(st.integers(0, 7)), bodies, props,
                     pos=pos, queue_offset=draw(st.integers(0, 1 << 40)), compressed=compressed,
                     flags=draw(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=n, max_size=n)))
        parts.append(part)
        pos += len(part)
    return b"".join(parts)


def found(body: bytes) -> PullResult:
    return PullResult(PullStatus.FOUND, 0, 0, 0, 0, body)


def assert_columns_match(batch: StoredBatch, messages: list[StoredMessage]) -> None:
    assert len(batch) == len(messages)
    for column, field in COLUMNS.items():
        got = getattr(batch, column)
        got = got.tolist() if isinstance(got, np.ndarray) else got
        assert got == [getattr(m, field) for m in messages], column
    assert batch.messages() == messages
    assert [batch[i] for i in range(len(batch))] == messages


@settings(max_examples=150)
@given(pull_bodies())
def test_every_column_equals_the_object_api(body):
    result = found(body)
    assert_columns_match(result.batch(), result.messages())
    assert_columns_match(result.batch(check_crc=True), result.messages())


def test_large_bodies_split_without_walking_and_agree_with_the_walk():
    props = [{TAGS: f"t{i % 3}", KEYS: f"k{i} x{i}"} for i in range(400)]
    body = units("T", 1, [bytes([i % 256]) * (i % 90) for i in range(400)], props, pos=5_000)
    assert len(body) >= VECTOR_SPLIT_MIN_BYTES
    starts = split_pull_body(body)
    assert back_to_back_units(np.frombuffer(body, dtype=np.uint8)).tolist() == starts.tolist()
    assert pull_body_starts(body).tolist() == starts.tolist()
    batch = found(body).batch()
    assert_columns_match(batch, decode_messages(body, starts.tolist()))
    assert batch.queue_offsets.tolist() == list(range(400))
    assert batch.keys[7] == ["k7", "x7"]


def test_magic_bytes_inside_bodies_fall_back_to_the_walk():
    magic = struct.pack(">i", MESSAGE_MAGIC)
    body = units("T", 0, [b"xxxx" + magic + b"yy"] * 200, [{}] * 200)
    assert back_to_back_units(np.frombuffer(body, dtype=np.uint8)) is None  # the quick test cannot tell
    assert pull_body_starts(body).tolist() == split_pull_body(body).tolist()
    assert found(body).batch().bodies == [b"xxxx" + magic + b"yy"] * 200


@settings(max_examples=300)
@given(pull_bodies(), st.integers(0, 1 << 16), st.integers(0, 255), st.integers(-3, 3))
def test_small_bodies_split_one_by_one_as_the_walk_does(body, where, byte, cut):
    """A small body (a long-polling consumer's few messages) is split unit by unit without numpy:
    intact, torn, padded or with any byte changed, it gives the walk's units or the walk's error."""
    bad = bytearray(body)
    bad[where % len(bad)] = byte
    for candidate in (body, bytes(bad), body[:cut] if cut < 0 else body + b"\x00" * cut):
        assert len(candidate) < VECTOR_SPLIT_MIN_BYTES
        try:
            expected = split_pull_body(candidate).tolist()
        except BatchBodyError:
            with pytest.raises(BatchBodyError):
                pull_body_starts(candidate)
        else:
            assert pull_body_starts(candidate).tolist() == expected


@settings(max_examples=300)
@given(pull_bodies(), st.integers(0, 1 << 16), st.integers(0, 255), st.integers(-3, 3))
def test_small_bodies_decode_in_one_pass_as_split_then_decode(body, where, byte, cut):
    """``messages()`` of a small body checks and decodes each unit in one pass: intact, torn, padded or
    with any byte changed (a topic that is no longer UTF-8 too), it gives the messages or the error that
    splitting with the walk and decoding the units after gives."""
    bad = bytearray(body)
    bad[where % len(bad)] = byte
    for candidate in (body, bytes(bad), body[:cut] if cut < 0 else body + b"\x00" * cut):
        try:
            expected = decode_messages(candidate, split_pull_body(candidate).tolist())
        except (BatchBodyError, UnicodeDecodeError) as e:
            with pytest.raises(type(e)):
                found(candidate).messages()
        else:
            assert found(candidate).messages() == expected


def test_torn_or_inconsistent_bodies_raise():
    body = units("T", 0, [b"b" * 50] * 400, [{TAGS: "x"}] * 400)
    with pytest.raises(BatchBodyError):
        found(body[:-1]).batch()
    with pytest.raises(BatchBodyError):
        found(body + b"\x00" * 3).batch()
    # unit 3's body length no longer adds up with its (intact) total size: the chain still holds
    bad = bytearray(body)
    start = int(split_pull_body(body)[3])
    struct.pack_into(">i", bad, start + field_offset("body_length"), 49)
    assert back_to_back_units(np.frombuffer(bytes(bad), dtype=np.uint8)) is None
    with pytest.raises(BatchBodyError, match="inconsistent lengths"):
        found(bytes(bad)).batch()
    # a wrong body CRC passes unless asked for
    bad = bytearray(body)
    bad[start + 100] ^= 0xFF
    assert len(found(bytes(bad)).batch()) == 400
    with pytest.raises(BatchBodyError, match="CRC"):
        found(bytes(bad)).batch(check_crc=True)


def test_compressed_bodies_are_inflated_and_a_non_zlib_one_kept():
    bodies = [zlib.compress(b"hello" * 50), b"not zlib", b"plain"]
    batch = found(units("T", 0, bodies, [{}] * 3, compressed=[True, True, False])).batch()
    assert batch.bodies == [b"hello" * 50, b"not zlib", b"plain"]
    assert batch.sys_flags.tolist() == [COMPRESSED_FLAG, COMPRESSED_FLAG, 0]


def test_tag_filter_and_take_match_the_object_api():
    tags = ["a", None, "b", "a", "c", None, "b"]
    props = [{TAGS: t} if t else {} for t in tags]
    result = found(units("T", 2, [str(i).encode() for i in range(7)], props))
    batch = result.batch()
    for wanted in (None, frozenset({"a"}), frozenset({"a", "b"}), frozenset({"zzz"})):
        kept = batch.with_tags(wanted)
        assert_columns_match(kept, filter_by_tags(result.messages(), wanted))
    assert batch.take([4, 0]).bodies == [b"4", b"0"]
    assert batch.take([4, 0]).queue_offsets.tolist() == [4, 0]


def test_empty_results_give_an_empty_batch():
    for result in (PullResult(PullStatus.NO_NEW_MSG, 5, 0, 5, 0), found(b"")):
        batch = result.batch()
        assert len(batch) == 0 and batch.bodies == [] and batch.queue_offsets.size == 0
        assert batch.messages() == [] and batch.with_tags({"a"}).bodies == []


def test_properties_are_decoded_on_first_access_and_behave_as_a_field():
    props = {TAGS: "tg", KEYS: "k1 k2", "x": "é"}
    body = units("T", 3, [b"body"], [props])
    (lazy,) = found(body).messages()
    assert "properties" not in vars(lazy)  # not decoded yet
    eager = StoredMessage(**{f.name: getattr(lazy, f.name) for f in dataclasses.fields(StoredMessage)})
    fresh = found(body).messages()[0]
    assert fresh == eager and eager == found(body).messages()[0]
    assert repr(found(body).messages()[0]) == repr(eager)
    assert lazy.properties == props and lazy.properties is lazy.properties
    assert (lazy.tags, lazy.keys) == ("tg", ["k1", "k2"])
    assert decode_properties(encode_properties(props)) == props
    for through in (pickle.loads(pickle.dumps(found(body).messages()[0])), copy.copy(found(body).messages()[0]),
                    copy.deepcopy(found(body).messages()[0])):
        assert through == eager and through.properties == props
    moved = dataclasses.replace(found(body).messages()[0], topic="U")
    assert (moved.topic, moved.properties) == ("U", props)
    assert dataclasses.asdict(found(body).messages()[0])["properties"] == props
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.properties = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _ = lazy.no_such_field
    assert not hasattr(found(body).messages()[0], "no_such_field")
