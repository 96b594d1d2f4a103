"""The remoting frame codec: exact JSON header bytes, round trips of both header types, and
random bytes that never raise anything but FrameError."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.common.errors import FrameError
from spark_mq.remoting.codec import SEPARATE_BODY_BYTES, FrameDecoder, decode_frame, encode, frame_pieces
from spark_mq.remoting.command import LanguageCode, RemotingCommand, SerializeType

text = st.text(max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from([lang.name for lang in LanguageCode]),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    remark=st.one_of(st.none(), text.filter(bool)),
    ext_fields=st.dictionaries(text, text, max_size=6),
    body=st.binary(max_size=300),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def test_json_header_is_what_fastjson_writes():
    cmd = RemotingCommand(code=105, language="JAVA", version=407, opaque=7, ext_fields={"topic": "T"})
    frame = encode(cmd)
    header = (
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert frame == struct.pack(">ii", 4 + len(header), len(header)) + header


def test_binary_header_layout():
    cmd = RemotingCommand(
        code=10,
        language="CPP",
        version=63,
        opaque=5,
        flag=1,
        remark="ok",
        ext_fields={"k": "v"},
        body=b"xy",
        serialize_type=SerializeType.ROCKETMQ,
    )
    frame = encode(cmd)
    header = (
        struct.pack(">hbhii", 10, 1, 63, 5, 1)
        + struct.pack(">i", 2)
        + b"ok"
        + struct.pack(">i", 2 + 1 + 4 + 1)
        + struct.pack(">h", 1)
        + b"k"
        + struct.pack(">i", 1)
        + b"v"
    )
    assert frame == struct.pack(">iI", 4 + len(header) + 2, (1 << 24) | len(header)) + header + b"xy"


def test_cpp_client_header_is_read():
    """Bytes as the C++ client sends them: remark "", trailing newline, no serializeTypeCurrentRPC."""
    header = (
        b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","topic":"CppTopic"},'
        b'"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}\n'
    )
    cmd = decode_frame(struct.pack(">i", len(header)) + header)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.remark) == (105, "CPP", 63, 0, "")
    assert cmd.ext_fields["topic"] == "CppTopic" and cmd.body == b""


def test_non_string_ext_values_are_stringified():
    header = json.dumps({"code": 1, "extFields": {"a": 1, "b": True, "c": None}}).encode()
    cmd = decode_frame(struct.pack(">i", len(header)) + header)
    assert cmd.ext_fields == {"a": "1", "b": "true"}


@settings(max_examples=300)
@given(commands)
def test_round_trip(cmd):
    frame = encode(cmd)
    (got,) = list(FrameDecoder().feed(frame))
    assert got == cmd


@settings(max_examples=100)
@given(st.lists(commands, min_size=1, max_size=5), st.data())
def test_stream_split_anywhere(cmds, data):
    stream = b"".join(encode(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder, got, prev = FrameDecoder(), [], 0
    for cut in [*cuts, len(stream)]:
        got.extend(decoder.feed(stream[prev:cut]))
        prev = cut
    assert got == cmds and decoder.buffered == 0


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_frame_error(raw):
    try:
        list(FrameDecoder(max_frame=4096).feed(raw))
    except FrameError:
        pass


@settings(max_examples=500)
@given(st.sampled_from([0, 1, 2, 255]), st.binary(max_size=120), st.binary(max_size=20))
def test_random_headers_only_raise_frame_error(kind, header, body):
    """Well-framed garbage: valid lengths around a random header of either serialize type."""
    frame = struct.pack(">iI", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    try:
        list(FrameDecoder().feed(frame))
    except FrameError:
        pass


@pytest.mark.parametrize(
    "raw, why",
    [
        (struct.pack(">i", 3), "below the 4-byte minimum"),
        (struct.pack(">i", -1), "below the 4-byte minimum"),
        (struct.pack(">i", 5000), "exceeds the 4096-byte limit"),
        (struct.pack(">iI", 8, 100) + b"x" * 4, "exceeds the frame"),
        (struct.pack(">iI", 6, (7 << 24) | 2) + b"{}", "unknown serialize type 7"),
        (struct.pack(">iI", 6, 2) + b"\xff\xfe", "not valid UTF-8 JSON"),
        (struct.pack(">iI", 6, 2) + b"{]", "not valid UTF-8 JSON"),
        (struct.pack(">iI", 6, 2) + b"{}", "no 'code'"),
        (struct.pack(">iI", 6, 2) + b"[]", "not an object"),
        (struct.pack(">iI", 16, 12) + b'{"code":"x"}', "not an integer"),
        (struct.pack(">iI", 8, (1 << 24) | 4) + b"abcd", "shorter than its fixed part"),
    ],
)
def test_bad_frames_name_the_reason(raw, why):
    with pytest.raises(FrameError, match=why):
        list(FrameDecoder(max_frame=4096).feed(raw))


def test_oversized_frame_rejected_before_it_is_buffered():
    decoder = FrameDecoder(max_frame=1024)
    with pytest.raises(FrameError):
        list(decoder.feed(struct.pack(">i", 10_000_000)))
    assert decoder.buffered == 4


def test_make_response_copies_opaque_and_serialize_type():
    req = RemotingCommand.request(105, {"topic": "T", "n": 3, "b": False, "none": None})
    req.serialize_type = SerializeType.ROCKETMQ
    assert req.ext_fields == {"topic": "T", "n": "3", "b": "false"}
    resp = req.make_response(17, "nope", {"x": 1})
    assert resp.is_response and not resp.is_oneway
    assert (resp.opaque, resp.serialize_type, resp.ext_fields) == (req.opaque, SerializeType.ROCKETMQ, {"x": "1"})
    assert RemotingCommand.request(1, oneway=True).is_oneway
    assert RemotingCommand(code=1).opaque != RemotingCommand(code=1).opaque


@pytest.mark.parametrize("size", [0, 100, SEPARATE_BODY_BYTES - 1, SEPARATE_BODY_BYTES, 3 * SEPARATE_BODY_BYTES])
def test_a_large_body_is_written_as_it_is_behind_its_header(size):
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    cmd = RemotingCommand(code=320, ext_fields={"topic": "T"}, body=body)
    pieces = frame_pieces(cmd)
    assert b"".join(pieces) == encode(cmd)
    assert decode_frame(encode(cmd)[4:]).body == body
    if size >= SEPARATE_BODY_BYTES:
        assert len(pieces) == 2 and pieces[1] is body  # not copied
    else:
        assert len(pieces) == 1
