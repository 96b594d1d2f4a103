"""SEND_BATCH_MESSAGE bodies and PULL_MESSAGE bodies: exact layout, round trips, fuzzing."""

from __future__ import annotations

import struct
import zlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.errors import BatchBodyError, BodyError
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.properties import encode_properties
from spark_mq.common.unit.encode import encode_batch
from spark_mq.remoting import message_batch_codec
from spark_mq.remoting.message_batch_codec import decode_batch_body, encode_batch_body, split_pull_body

STORE_HOST = pack_host("127.0.0.1", 10911)


@pytest.fixture(scope="module", autouse=True, params=["record-walk", "vectorized"])
def decode_path(request):
    """Every test twice: batch bodies up to SMALL_BATCH_BYTES (nearly all here) decoded one record at a
    time, then every body by the vectorized path."""
    limit = message_batch_codec.SMALL_BATCH_BYTES if request.param == "record-walk" else 0
    with mock.patch.object(message_batch_codec, "SMALL_BATCH_BYTES", limit):
        yield request.param


def java_encode_message(body: bytes, props: bytes, flag: int = 0) -> bytes:
    """MessageDecoder.encodeMessage, written out field by field as the Java code does."""
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


def make_batch(bodies, props=None, flags=None) -> MessageBatch:
    batch = MessageBatch.of("TopicTest", 2, list(bodies), props, born_timestamp=1700000000000)
    if flags is not None:
        batch.flags = np.array(flags, dtype=np.int32)
    return batch


def test_encoding_matches_java_encode_messages():
    props = [encode_properties({"KEYS": "k1", "UNIQ_KEY": "AC11000100002A9F0000000000000001"}), b""]
    batch = make_batch([b"hello", b""], props, flags=[0, 7])
    expected = java_encode_message(b"hello", props[0]) + java_encode_message(b"", b"", flag=7)
    assert encode_batch_body(batch) == expected


def test_decode_fills_batch_wide_fields_from_the_header():
    raw = java_encode_message(b"a", b"TAGS\x01x\x02", flag=3) + java_encode_message(b"bb", b"")
    batch = decode_batch_body(raw, "TopicTest", 5, 1700000000000, sys_flag=0, reconsume_times=1)
    assert batch.bodies == [b"a", b"bb"]
    assert batch.properties == [b"TAGS\x01x\x02", b""]
    assert batch.flags.tolist() == [3, 0]
    assert batch.born_timestamps.tolist() == [1700000000000] * 2
    assert batch.reconsume_times.tolist() == [1, 1]
    assert (batch.topic, batch.queue_id) == ("TopicTest", 5)
    batch.validate()


def test_cpp_2_0_batch_record_decodes():
    # BatchMessage::encode: magic 0, crc 0, properties with UNIQ_KEY added per message
    props = b"UNIQ_KEY\x010A0000050000A1B2C3D4\x02WAIT\x01true\x02"
    raw = java_encode_message(b"payload", props)
    assert decode_batch_body(raw, "t", 0, 1).properties == [props]


@given(
    st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=60), st.integers(-(2**31), 2**31 - 1)),
             min_size=1, max_size=20)
)  # fmt: skip
def test_round_trip(messages):
    batch = make_batch([m[0] for m in messages], [m[1] for m in messages], [m[2] for m in messages])
    back = decode_batch_body(encode_batch_body(batch), "TopicTest", 2, 1700000000000)
    assert back.bodies == batch.bodies
    assert back.properties == batch.properties
    assert back.flags.tolist() == batch.flags.tolist()


def test_empty_and_truncated_bodies_raise():
    raw = java_encode_message(b"hello", b"a\x01b\x02") * 2
    with pytest.raises(BatchBodyError):
        decode_batch_body(b"", "t", 0, 0)
    for cut in range(1, len(raw)):
        if cut == len(raw) // 2:
            continue  # a whole first record is a valid batch
        with pytest.raises(BatchBodyError) as e:
            decode_batch_body(raw[:cut], "t", 0, 0)
        assert 0 <= e.value.offset < cut


@pytest.mark.parametrize(
    ("offset", "value", "fmt"),
    [(0, 10, ">i"), (0, 1 << 30, ">i"), (0, -1, ">i"), (16, -5, ">i"), (16, 6, ">i"), (16, 1 << 30, ">i"),
     (25, -2, ">h"), (25, 3, ">h"), (25, 32767, ">h")],
)  # fmt: skip
def test_inconsistent_lengths_raise(offset, value, fmt):
    raw = bytearray(java_encode_message(b"hello", b"a\x01b\x02"))
    struct.pack_into(fmt, raw, offset, value)
    with pytest.raises(BatchBodyError, match="byte 0"):
        decode_batch_body(bytes(raw), "t", 0, 0)


@settings(max_examples=300)
@given(st.binary(max_size=120), st.data())
def test_fuzzed_batch_bodies_only_raise_the_typed_error(noise, data):
    raw = bytearray(java_encode_message(b"hello", b"a\x01b\x02") + java_encode_message(b"", b"x\x01y\x02"))
    for _ in range(data.draw(st.integers(0, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    for body in (bytes(raw), noise, bytes(raw) + noise):
        try:
            batch = decode_batch_body(body, "t", 0, 0)
        except BatchBodyError:
            continue
        assert sum(22 + len(x) + len(p) for x, p in zip(batch.bodies, batch.properties, strict=True)) == len(body)


def test_encode_refuses_oversized_properties():
    with pytest.raises(ValueError):
        encode_batch_body(make_batch([b"x"], [b"p" * 32768]))


def _pull_body(n: int = 3) -> bytes:
    batch = make_batch([b"body-%d" % i * (i + 1) for i in range(n)], [b"TAGS\x01a\x02"] * n)
    return encode_batch(batch, 4096, 10, 1700000000500, STORE_HOST).data


def test_split_pull_body_finds_every_unit():
    data = _pull_body(3)
    starts = split_pull_body(data, check_crc=True)
    sizes = [struct.unpack_from(">i", data, int(s))[0] for s in starts]
    assert starts[0] == 0 and int(starts[-1]) + sizes[-1] == len(data)
    assert len(starts) == 3
    assert split_pull_body(b"").size == 0
    assert split_pull_body(memoryview(bytearray(data))).tolist() == starts.tolist()


def test_split_pull_body_rejects_partial_blank_and_bad_crc():
    data = _pull_body(2)
    with pytest.raises(BatchBodyError, match="trailing"):
        split_pull_body(data + b"\x00\x00\x00")
    with pytest.raises(BatchBodyError):
        split_pull_body(data[:-1])
    with pytest.raises(BatchBodyError, match="blank"):
        split_pull_body(data + struct.pack(">ii", 200, -875286124) + bytes(192))
    bad = bytearray(data)
    bad[90] ^= 0xFF  # inside the first body
    assert split_pull_body(bytes(bad)).size == 2  # lengths still consistent
    with pytest.raises(BatchBodyError, match="CRC"):
        split_pull_body(bytes(bad), check_crc=True)
    assert zlib.crc32(b"") == 0


@settings(max_examples=300)
@given(st.data())
def test_fuzzed_pull_bodies_only_raise_the_typed_error(data):
    raw = bytearray(_pull_body(3))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    try:
        starts = split_pull_body(bytes(raw))
    except BatchBodyError as e:
        assert isinstance(e, BodyError)
        return
    assert starts.size == 0 or int(starts[0]) == 0


def model_decode(body: bytes) -> tuple[list[bytes], list[bytes], list[int]] | tuple[int, str]:
    """One record at a time, every check in reading order: (bodies, properties, flags), or the
    (offset, message) of the first thing wrong."""
    pos, out = 0, ([], [], [])
    while pos < len(body):
        if pos + 22 > len(body):
            return pos, f"{len(body) - pos} bytes left, a record needs at least 22"
        total, _, _, flag, body_len = struct.unpack_from(">iiiii", body, pos)
        if body_len < 0 or total < 22 + body_len:
            return pos, f"record size {total} and body length {body_len} are inconsistent"
        if total > len(body) - pos:
            return pos, f"record of {total} bytes runs past the body's end ({len(body) - pos} bytes left)"
        (props_len,) = struct.unpack_from(">h", body, pos + 20 + body_len)
        if props_len < 0 or total != 22 + body_len + props_len:
            return pos, f"record size {total} != 22 + body {body_len} + properties {props_len} bytes"
        out[0].append(body[pos + 20 : pos + 20 + body_len])
        out[1].append(body[pos + 22 + body_len : pos + total])
        out[2].append(flag)
        pos += total
    return out


@settings(max_examples=400)
@given(
    st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=20)), min_size=1, max_size=8),
    st.booleans(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4), st.binary(max_size=30),
)  # fmt: skip
def test_decode_matches_a_record_by_record_model(messages, equal, noise, tail):
    """Equal records take the strided path, unequal ones the step per record; damaged bodies fail at the
    same byte with the same reason as a reader checking one record at a time."""
    if equal:
        messages = [messages[0]] * len(messages)
    raw = bytearray(b"".join(java_encode_message(b, p, flag=i) for i, (b, p) in enumerate(messages)))
    for at, value in noise:
        raw[at % len(raw)] = value
    for body in (bytes(raw), bytes(raw) + tail):
        expected = model_decode(body)
        if isinstance(expected[0], int):
            with pytest.raises(BatchBodyError) as e:
                decode_batch_body(body, "t", 0, 0)
            assert (e.value.offset, str(e.value).split(": ", 1)[-1]) == expected
            continue
        batch = decode_batch_body(body, "t", 0, 0)
        assert (batch.bodies, batch.properties, batch.flags.tolist()) == expected
        assert batch.body_lengths.tolist() == [len(b) for b in expected[0]]
        assert batch.property_lengths.tolist() == [len(p) for p in expected[1]]
