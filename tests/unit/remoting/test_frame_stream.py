"""FrameDecoder on streams cut everywhere: a frame split at any byte (length word, header-length
word, header, body) decodes the same, the checks fire wherever the cut falls, and big bodies
arriving in many chunks are joined once."""

from __future__ import annotations

import struct

import pytest

from spark_mq.common.errors import FrameError
from spark_mq.remoting.codec import FrameDecoder, encode
from spark_mq.remoting.command import RemotingCommand, SerializeType

SMALL = [
    RemotingCommand(code=11, opaque=1, ext_fields={"topic": "T", "queueId": "3"}, body=b"hello"),
    RemotingCommand(code=0, opaque=2, flag=1, remark="ok", ext_fields={"k": "v"}, body=b"",
                    serialize_type=SerializeType.ROCKETMQ),
    RemotingCommand(code=12, opaque=3, body=bytes(range(256))),
]


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[RemotingCommand]:
    return [cmd for chunk in chunks for cmd in decoder.feed(chunk)]


def test_every_two_way_cut_of_a_stream_decodes_the_same():
    stream = b"".join(encode(c) for c in SMALL)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        assert feed_all(decoder, [stream[:cut], stream[cut:]]) == SMALL, cut
        assert decoder.buffered == 0


def test_one_byte_at_a_time():
    stream = b"".join(encode(c) for c in SMALL)
    decoder, got = FrameDecoder(), []
    for i in range(len(stream)):
        got.extend(decoder.feed(stream[i : i + 1]))
        done = sum(len(encode(c)) for c in got)
        assert decoder.buffered == i + 1 - done
    assert got == SMALL


def test_big_body_in_many_chunks_of_any_type():
    cmd = RemotingCommand(code=0, opaque=9, ext_fields={"nextBeginOffset": "4096"}, body=bytes(range(256)) * 12_000)
    frame = encode(cmd)
    for size in (1 << 16, 1 << 18, 777_777):
        for kind in (bytes, bytearray, memoryview):
            chunks = [kind(frame[i : i + size]) for i in range(0, len(frame), size)]
            decoder = FrameDecoder()
            (got,) = feed_all(decoder, chunks)
            assert got == cmd and type(got.body) is bytes and decoder.buffered == 0


def test_a_body_arriving_as_one_chunk_is_not_copied():
    cmd = RemotingCommand(code=0, opaque=9, body=b"z" * 100_000)
    frame = encode(cmd)
    head_len = len(frame) - len(cmd.body)
    body_chunk = frame[head_len:]
    (got,) = feed_all(FrameDecoder(), [frame[:head_len], body_chunk])
    assert got.body is body_chunk


def test_mutating_a_fed_buffer_afterwards_changes_nothing():
    frame = encode(RemotingCommand(code=1, opaque=4, body=b"a" * 1000))
    first, rest = bytearray(frame[:600]), bytearray(frame[600:])
    decoder = FrameDecoder()
    assert feed_all(decoder, [first]) == []
    first[:] = b"\xff" * len(first)
    (got,) = feed_all(decoder, [rest])
    assert got.body == b"a" * 1000


@pytest.mark.parametrize("length, why", [(10_000_000, "exceeds the 1024-byte limit"), (3, "below the 4-byte minimum"),
                                         (-5, "below the 4-byte minimum")])
def test_bad_lengths_are_rejected_wherever_the_word_is_cut(length, why):
    word = struct.pack(">i", length)
    for cut in range(5):
        decoder = FrameDecoder(max_frame=1024)
        with pytest.raises(FrameError, match=why):
            feed_all(decoder, [word[:cut], word[cut:], b"x" * 4000])
        assert decoder.buffered == 4  # nothing past the length word was kept


def test_a_header_longer_than_its_frame_is_rejected_when_split():
    frame = struct.pack(">iI", 8, 100) + b"x" * 4
    for cut in range(len(frame) + 1):
        with pytest.raises(FrameError, match="exceeds the frame"):
            feed_all(FrameDecoder(), [frame[:cut], frame[cut:]])


def test_garbage_after_good_frames_still_yields_them_first():
    good = encode(SMALL[0])
    decoder = FrameDecoder(max_frame=4096)
    stream = good + good + struct.pack(">i", 1 << 30)
    got = []
    with pytest.raises(FrameError, match="limit"):
        for cmd in decoder.feed(stream[:10]):
            got.append(cmd)
        for cmd in decoder.feed(stream[10:]):
            got.append(cmd)
    assert got == [SMALL[0], SMALL[0]]
