"""Binary bodies of the send and pull commands.

SEND_BATCH_MESSAGE body (RocketMQ ``MessageDecoder.encodeMessages``; the C++ client 2.0's
``BatchMessage::encode`` writes the same): one record per message, big-endian::

    off  size  field
      0     4  TOTALSIZE     20 + BODYLEN + 2 + PROPERTIESLEN
      4     4  MAGICCODE     written as 0, never checked
      8     4  BODYCRC       written as 0, never checked
     12     4  FLAG          the message's flag
     16     4  BODYLEN, then BODY
      .     2  PROPERTIESLEN (Java short: at most 32767), then PROPERTIES (name\\x01value\\x02...)

Everything else of a stored message (topic, queue, born timestamp, sys flag, reconsume times)
comes from the request header and is the same for the whole batch.

PULL_MESSAGE response body: whole commitlog units back to back, exactly as stored (layout in
:mod:`spark_mq.common.unit.layout`), no padding, no blank units. The C++ client decodes it in
a loop "while bytes remain" assuming IPv4 hosts (``src/message/MQDecoder.cpp``), so a body
must end exactly at a unit boundary and hold no IPv6-flagged units.

Decoding never trusts a length: every record is checked against the bytes left and against
its own TOTALSIZE before anything is sliced, and any mismatch raises :class:`BatchBodyError`
naming the byte offset.
"""

from __future__ import annotations

import struct
from functools import cache
from itertools import chain

from spark_mq.common.buffers import at_every_byte, gather_records
from spark_mq.common.errors import BatchBodyError
from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch, pack_host
from spark_mq.common.properties import MAX_PROPERTIES_LENGTH
from spark_mq.common.unit.chain import walk_units
from spark_mq.common.unit.layout import MIN_UNIT_SIZE

RECORD_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
RECORD_SIZE = struct.Struct(">i")  # a record's first field: its total size
RECORD_HEAD_SIZE = RECORD_HEAD.size  # 20
PROPS_LEN = struct.Struct(">h")
MIN_RECORD_SIZE = RECORD_HEAD_SIZE + PROPS_LEN.size  # empty body, no properties

_HEAD_FIELDS = (("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("flag", ">i4"), ("body_length", ">i4"))
_PROPS_LEN_TYPE = ">i2"  # PROPS_LEN as a numpy type code
SMALL_BATCH_BYTES = 8192  # a batch body up to this size is decoded one record at a time (no numpy)
SMALL_BATCH_RECORDS = 16  # a batch of at most this many messages is encoded one record at a time (no numpy)


@cache
def _head_type() -> np.dtype:
    """RECORD_HEAD as a numpy record (made on first use)."""
    return np.dtype(list(_HEAD_FIELDS))


def decode_batch_body(
    body: bytes | bytearray | memoryview,
    topic: str,
    queue_id: int,
    born_timestamp: int,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    born_host: bytes | None = None,
) -> MessageBatch:
    """The messages of a SEND_BATCH_MESSAGE body as one columnar batch for ``topic``/``queue_id``.

    Only the TOTALSIZE chain is followed record by record (not even that when every record has the
    first one's size, as a batch of equal bodies does); every other field is read and checked with
    numpy at all record starts at once, and the bodies and properties are sliced in two comprehensions."""
    data = body if type(body) is bytes else bytes(body)
    n = len(data)
    if n == 0:
        raise BatchBodyError(0, "a batch body holds no message")
    if n <= SMALL_BATCH_BYTES:
        return _decode_small(data, topic, queue_id, born_timestamp, sys_flag, reconsume_times, born_host)
    starts, stop = _record_starts(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    head = gather_records(buf, starts, _head_type())
    total = head["total_size"].astype(np.int64)
    body_len = head["body_length"].astype(np.int64)
    body_start = starts + RECORD_HEAD_SIZE
    body_end = body_start + body_len
    fits = (body_len >= 0) & (total >= MIN_RECORD_SIZE + body_len)  # its properties length lies inside it
    props_len = at_every_byte(buf, _PROPS_LEN_TYPE)[np.where(fits, body_end, starts)].astype(np.int64)
    bad = np.flatnonzero(~(fits & (props_len >= 0) & (total == MIN_RECORD_SIZE + body_len + props_len)))
    if bad.size:
        raise _record_error(data, int(starts[bad[0]]))
    if stop < n:
        raise _record_error(data, stop)
    count = int(starts.size)
    batch = MessageBatch(
        topic=topic,
        queue_id=queue_id,
        bodies=[data[a:b] for a, b in zip(body_start.tolist(), body_end.tolist(), strict=True)],
        properties=[data[a:b] for a, b in zip((body_end + PROPS_LEN.size).tolist(), (starts + total).tolist(),
                                               strict=True)],
        flags=head["flag"].astype(np.int32),
        born_timestamps=np.full(count, born_timestamp, dtype=np.int64),
        sys_flags=np.full(count, sys_flag, dtype=np.int32),
        reconsume_times=np.full(count, reconsume_times, dtype=np.int32),
        born_host=born_host or pack_host("127.0.0.1", 0),
    )
    # the lengths are known here: the store need not measure every body and property string again
    batch.body_lengths, batch.property_lengths = body_len, props_len
    return batch


def _decode_small(data: bytes, topic: str, queue_id: int, born_timestamp: int, sys_flag: int, reconsume_times: int,
                  born_host: bytes | None) -> MessageBatch:
    """``decode_batch_body`` one record at a time, every check in reading order (the same batch, or the same
    error at the same byte): for a few records, a latency-bound producer's send, numpy's fixed cost is most
    of the decode."""
    n = len(data)
    bodies: list[bytes] = []
    props: list[bytes] = []
    flags: list[int] = []
    body_lens: list[int] = []
    props_lens: list[int] = []
    pos = 0
    while pos < n:
        if pos + MIN_RECORD_SIZE > n:
            raise _record_error(data, pos)
        total, _magic, _crc, flag, body_len = RECORD_HEAD.unpack_from(data, pos)
        body_end = pos + RECORD_HEAD_SIZE + body_len
        if body_len < 0 or total < MIN_RECORD_SIZE + body_len or total > n - pos:
            raise _record_error(data, pos)
        (props_len,) = PROPS_LEN.unpack_from(data, body_end)
        if props_len < 0 or total != MIN_RECORD_SIZE + body_len + props_len:
            raise _record_error(data, pos)
        bodies.append(data[pos + RECORD_HEAD_SIZE:body_end])
        props.append(data[body_end + PROPS_LEN.size:pos + total])
        flags.append(flag)
        body_lens.append(body_len)
        props_lens.append(props_len)
        pos += total
    count = len(bodies)
    batch = MessageBatch(
        topic=topic,
        queue_id=queue_id,
        bodies=bodies,
        properties=props,
        flags=np.array(flags, dtype=np.int32),
        born_timestamps=np.full(count, born_timestamp, dtype=np.int64),
        sys_flags=np.full(count, sys_flag, dtype=np.int32),
        reconsume_times=np.full(count, reconsume_times, dtype=np.int32),
        born_host=born_host or pack_host("127.0.0.1", 0),
    )
    batch.body_lengths = np.array(body_lens, dtype=np.int64)
    batch.property_lengths = np.array(props_lens, dtype=np.int64)
    return batch


def _record_starts(data: bytes) -> tuple[np.ndarray, int]:
    """Starts (int64) of the records the TOTALSIZE chain leads through, each at least a minimal record
    and inside ``data``, and where the chain stops (``len(data)`` when it covers it all).

    When the first record's size divides the body and every record at that stride has it (a strided
    view, no copy), the chain is that stride; otherwise one Python step per record."""
    n = len(data)
    first = RECORD_SIZE.unpack_from(data)[0] if n >= MIN_RECORD_SIZE else 0
    if first >= MIN_RECORD_SIZE and n % first == 0:
        sizes = np.ndarray((n // first,), dtype=">i4", buffer=data, strides=(first,))
        if (sizes == first).all():
            return np.arange(0, n, first, dtype=np.int64), n
    unpack = RECORD_SIZE.unpack_from
    found: list[int] = []
    append = found.append
    pos = 0
    while pos <= n - MIN_RECORD_SIZE:
        (total,) = unpack(data, pos)
        if total < MIN_RECORD_SIZE or total > n - pos:
            break
        append(pos)
        pos += total
    return np.array(found, dtype=np.int64), pos


def _record_error(data: bytes, pos: int) -> BatchBodyError:
    """What is wrong with the record at ``pos``, known to be wrong: the checks in the order a reader
    meets them, so the message names the first thing that does not add up."""
    n = len(data)
    if pos + MIN_RECORD_SIZE > n:
        return BatchBodyError(pos, f"{n - pos} bytes left, a record needs at least {MIN_RECORD_SIZE}")
    total, _magic, _crc, _flag, body_len = RECORD_HEAD.unpack_from(data, pos)
    if body_len < 0 or total < MIN_RECORD_SIZE + body_len:
        return BatchBodyError(pos, f"record size {total} and body length {body_len} are inconsistent")
    if total > n - pos:
        return BatchBodyError(pos, f"record of {total} bytes runs past the body's end ({n - pos} bytes left)")
    (props_len,) = PROPS_LEN.unpack_from(data, pos + RECORD_HEAD_SIZE + body_len)
    return BatchBodyError(pos, f"record size {total} != 22 + body {body_len} + properties {props_len} bytes")


def encode_batch_body(batch: MessageBatch) -> bytes:
    """A SEND_BATCH_MESSAGE body for ``batch``, byte for byte as ``MessageDecoder.encodeMessages``."""
    n = len(batch)
    if n == 0:
        raise ValueError("a batch body needs at least one message")
    if n <= SMALL_BATCH_RECORDS:
        return _encode_small(batch)
    body_len = batch.body_lengths
    props_len = batch.property_lengths
    if int(props_len.max()) > MAX_PROPERTIES_LENGTH:
        i = int(np.argmax(props_len > MAX_PROPERTIES_LENGTH))
        raise _properties_too_long(i, int(props_len[i]))
    head = np.zeros(n, dtype=_head_type())
    head["total_size"] = MIN_RECORD_SIZE + body_len + props_len
    head["flag"] = batch.flags
    head["body_length"] = body_len
    tail = props_len.astype(">u2")
    pieces = zip(
        head.view(f"V{RECORD_HEAD_SIZE}").tolist(),
        batch.bodies,
        tail.view("V2").tolist(),
        batch.properties,
        strict=True,
    )
    return b"".join(chain.from_iterable(pieces))


def _properties_too_long(i: int, length: int) -> ValueError:
    return ValueError(f"message {i} properties are {length} bytes, over {MAX_PROPERTIES_LENGTH}")


def _encode_small(batch: MessageBatch) -> bytes:
    """``encode_batch_body`` one record at a time: the same bytes and errors, without numpy."""
    return encode_records(batch.bodies, batch.properties, batch.flags.tolist())


def encode_records(bodies: list[bytes], properties: list[bytes], flags: list[int]) -> bytes:
    """A SEND_BATCH_MESSAGE body of a few messages given as lists, one record at a time (what
    ``encode_batch_body`` writes): a producer's small batch is encoded once, as it is prepared."""
    pieces: list[bytes] = []
    for i, (body, props, flag) in enumerate(zip(bodies, properties, flags, strict=True)):
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise _properties_too_long(i, len(props))
        pieces += (RECORD_HEAD.pack(MIN_RECORD_SIZE + len(body) + len(props), 0, 0, flag, len(body)), body,
                   PROPS_LEN.pack(len(props)), props)
    return b"".join(pieces)


def split_pull_body(body: bytes | bytearray | memoryview, check_crc: bool = False) -> np.ndarray:
    """Start offsets (int64) of the commitlog units that make up a PULL_MESSAGE response body.

    Every unit must be whole and self-consistent and the last must end exactly at the end of
    the body; ``check_crc`` also checks every body CRC. An empty body has no units.
    """
    mv = memoryview(body).cast("B")
    n = len(mv)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    walk = walk_units(mv, 0, n, check_crc=check_crc)
    if walk.end != n:
        why = {
            "end": f"{n - walk.end} trailing bytes are not a whole unit (a unit is at least {MIN_UNIT_SIZE} bytes)",
            "blank": "a blank (end-of-file) unit has no place in a pull body",
            "zero": "zeros where a unit should start",
            "bad magic": "no message magic code where a unit should start",
        }.get(walk.reason, walk.reason)
        raise BatchBodyError(walk.end, why)
    return walk.starts
