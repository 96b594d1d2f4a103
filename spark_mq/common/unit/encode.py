"""Messages to commitlog units: a batch encoded without a Python step per message.

A batch is one call of the native encoder (:mod:`~spark_mq.common.unit.native`) when it is built:
the bodies and properties joined once, every unit written by C. Without it, all fixed headers
are one numpy structured array and header, body and tail pieces are joined with ``bytes.join``
over C iterators: no Python bytecode runs per message either way, and the bytes are the same. A
lone message (most network sends) is one ``struct.pack``.

Thread-safety: pure functions of their arguments.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from itertools import chain
from typing import NamedTuple

from spark_mq.common.lazy_numpy import np
from spark_mq.common.message import MessageBatch
from spark_mq.common.one_row import one_row
from spark_mq.common.unit import native
from spark_mq.common.unit.crc import body_crc, body_crcs
from spark_mq.common.unit.layout import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    CRC_MASK,
    HEADER_FIELDS,
    HEADER_SIZE,
    HEADER_STRUCT,
    MESSAGE_MAGIC,
    MIN_UNIT_SIZE,
    PROPS_LENGTH_STRUCT,
    SIZE_MAGIC,
    STOREHOST_V6_FLAG,
    TOPIC_LENGTH_STRUCT,
    fields_struct,
    header_record,
    header_struct,
    tail_record,
)

# the header with only the batch-wide fields set: magic, queue id, born host, store time, store host
_HEADER_TEMPLATE = header_struct(("magic", "queue_id", "born_host", "store_timestamp", "store_host"))
_HOSTS_V6 = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG  # cleared: hosts are written as IPv4
# mean body size up to which the native encoder runs. Above it the numpy encoder is faster: the native
# path's two large buffers a batch (the bodies joined, the units) were fresh pages each time: at 1 KiB x
# 2,048, ~1,100 page faults a batch, 0.6 -> 1.9 µs a message, where the numpy encoder's one join faults
# none (and isal's SIMD CRC-32 was faster than the native table's, before the native one used PCLMULQDQ)
NATIVE_MAX_MEAN_BODY = 256
_INT32 = "int32"  # numpy type names (native byte order), not dtypes: nothing of numpy's is made at import
_INT64 = "int64"
KEYS_ROOM = 3  # index keys a message the native encoder makes room for (UNIQ_KEY and two KEYS); a batch with more: none
# native.c's ENC_* scalars of spark_mq_encode_batch: n, units size, bodies size, properties size, topic tail
# length, physical offset, queue offset, sys flag bits cleared, CRC mask, key prefix, key capacity
_BATCH_SCALARS = struct.Struct("=11q")
# native.c's ONE_* scalars of spark_mq_append_one: body, properties and topic tail lengths, queue id, flag, queue
# offset, physical offset, sys flag, born timestamp, store timestamp, reconsume times, sys flag bits cleared, CRC
# mask, magic, file descriptor, position in the file
_ONE_SCALARS = struct.Struct("=16q")
# a lone unit up to this size takes the native append (``OneUnitWriter``; a network send's is a few hundred bytes),
# a larger one the struct encoder, whose copies are then the larger cost
ONE_UNIT_SCRATCH = 64 * 1024
# the lone unit's two hosts, back to back as spark_mq_append_one copies them
_HOSTS = fields_struct(tuple(f for f in HEADER_FIELDS if f[0] in ("born_host", "store_host")))


def blank_unit(remaining: int) -> bytes:
    """The 8 bytes that mark the unused tail of a commitlog file."""
    return SIZE_MAGIC.pack(remaining, BLANK_MAGIC)


def unit_sizes(batch: MessageBatch) -> np.ndarray:
    """Encoded size of every message of ``batch``."""
    fixed = MIN_UNIT_SIZE + len(batch.topic.encode())
    if len(batch.bodies) == 1:  # a lone message: a shared array (its size recurs), not two of lengths and two additions
        return one_row(fixed + len(batch.bodies[0]) + len(batch.properties[0]), np.int64)
    return fixed + batch.body_lengths + batch.property_lengths


def units_total(sizes: np.ndarray) -> int:
    """The bytes of units of ``sizes``: a lone unit's size as it is, without a reduction's fixed cost (~1 us where
    ``sizes.item(0)`` takes ~0.06, no numpy scalar made; a send of one message sums its sizes several times on
    its way)."""
    return sizes.item(0) if sizes.size == 1 else int(np.add.reduce(sizes))


class DispatchInfo(NamedTuple):
    """What the store's dispatch takes from messages' property strings (``store/dispatch.py``). A
    named tuple: one is built per put (the encoder's), at a third of a frozen dataclass's cost."""

    tag_codes: np.ndarray  # int64 per message
    key_rows: np.ndarray  # message index of each index key
    key_hashes: np.ndarray  # positive int32 hash of "topic#key" per index key (int64 in the encoder's)


class EncodedBatch(NamedTuple):
    """One per put: a named tuple, built at a third of a frozen dataclass's cost."""

    data: bytes | memoryview  # the units, back to back (a memoryview only when asked for a view)
    sizes: np.ndarray  # int64, one per unit
    physical_offsets: np.ndarray  # int64, one per unit
    dispatch: DispatchInfo | None = None  # given by the native encoder when asked for (see encode_batch)


def encode_batch(
    batch: MessageBatch,
    physical_offset: int,
    queue_offset: int,
    store_timestamp: int,
    store_host: bytes,
    sizes: np.ndarray | None = None,
    view: bool = False,
    key_prefix: int | None = None,
) -> EncodedBatch:
    """Encode every message of ``batch`` as consecutive units starting at ``physical_offset``. With
    ``view``, ``data`` may be a memoryview of the native encoder's buffer instead of a copy of it as
    bytes: for a caller that only writes the units out (the commitlog). With ``key_prefix`` (the hash
    of ``topic + "#"``) the native encoder also gives the batch's ``dispatch`` info as it copies the
    property strings (None otherwise, for a batch of more than ``KEYS_ROOM`` index keys a message, or
    with a hashed value not ASCII: the dispatch then scans the strings itself)."""
    n = len(batch)
    topic = batch.topic.encode()
    if sizes is None:
        sizes = unit_sizes(batch)
    if n == 1:  # a lone message (most network sends): one struct.pack beats ~25 numpy calls
        return _encode_one(batch, topic, sizes, physical_offset, queue_offset, store_timestamp, store_host)
    template = _HEADER_TEMPLATE.pack(MESSAGE_MAGIC, batch.queue_id, batch.born_host, store_timestamp, store_host)
    # decided before the bodies are joined: a join thrown away changes how the heap reuses pages as well
    if native.ENCODER is not None and int(np.add.reduce(batch.body_lengths)) <= n * NATIVE_MAX_MEAN_BODY:
        return _encode_native(batch, topic, sizes, template, physical_offset, queue_offset, view, key_prefix)
    phys = sizes.cumsum()
    phys -= sizes
    phys += physical_offset

    # fields shared by the whole batch are packed once (the template) and repeated; the rest are columns
    head = np.frombuffer(bytearray(template * n), dtype=header_record())
    head["total_size"] = sizes
    head["body_crc"] = body_crcs(batch.bodies, n)
    head["flag"] = batch.flags
    head["queue_offset"] = np.arange(queue_offset, queue_offset + n, dtype=np.int64)
    head["physical_offset"] = phys
    head["sys_flag"] = batch.sys_flags & ~_HOSTS_V6
    head["born_timestamp"] = batch.born_timestamps
    head["reconsume_times"] = batch.reconsume_times
    head["body_length"] = batch.body_lengths

    tail_record_type, tail_template = _tail_template(topic)
    tail = np.frombuffer(bytearray(tail_template * n), dtype=tail_record_type)
    tail["props_length"] = batch.property_lengths

    pieces = zip(
        head.view(f"V{HEADER_SIZE}").tolist(),
        batch.bodies,
        tail.view(f"V{tail.itemsize}").tolist(),
        batch.properties,
        strict=True,
    )
    return EncodedBatch(b"".join(chain.from_iterable(pieces)), sizes, phys)


def _encode_native(
    batch: MessageBatch, topic: bytes, sizes: np.ndarray, template: bytes, physical_offset: int, queue_offset: int,
    view: bool, key_prefix: int | None,
) -> EncodedBatch:
    """:func:`encode_batch` of two or more messages by the native encoder: the units in a buffer, and
    in another (they outlive the units: in the put's result, until the dispatch) their physical
    offsets and dispatch info."""
    n = len(batch)
    bodies = b"".join(batch.bodies)
    props = b"".join(batch.properties)
    topic_tail = _topic_tail(topic)
    units_size = n * (HEADER_SIZE + len(topic_tail) + PROPS_LENGTH_STRUCT.size) + len(bodies) + len(props)
    key_capacity = 0 if key_prefix is None else KEYS_ROOM * n
    keys_at = 1 + 2 * n  # after the key count, the offsets and the tag codes: the key rows, then their hashes
    units, meta = bytearray(units_size), bytearray(8 * (keys_at + 2 * key_capacity))
    wrote = native.ENCODER(
        _BATCH_SCALARS.pack(n, units_size, len(bodies), len(props), len(topic_tail), physical_offset, queue_offset,
                            _HOSTS_V6, CRC_MASK, key_prefix or 0, key_capacity),
        _column(batch.body_lengths, _INT64), _column(batch.property_lengths, _INT64), bodies, props,
        _column(batch.flags, _INT32), _column(batch.born_timestamps, _INT64), _column(batch.sys_flags, _INT32),
        _column(batch.reconsume_times, _INT32), template, topic_tail,
        ctypes.byref(ctypes.c_char.from_buffer(units)), ctypes.byref(ctypes.c_char.from_buffer(meta)),
    )
    if wrote != units_size:
        raise ValueError("a batch's bodies or properties are not all byte strings (their lengths do not add up)")
    out = np.frombuffer(meta, dtype=_INT64)
    keys = int(out[0])
    hashes_at = keys_at + key_capacity
    info = None if keys < 0 else DispatchInfo(out[1 + n:keys_at], out[keys_at:keys_at + keys],
                                               out[hashes_at:hashes_at + keys])
    return EncodedBatch(memoryview(units) if view else bytes(units), sizes, out[1:1 + n], info)


class OneUnitWriter:
    """Writes a lone message's unit into a commitlog file by one native call (:data:`native.APPEND_ONE`):
    encoded into this writer's scratch buffer and ``pwrite``n from there, where the struct encoder's way
    costs ~20 Python and C calls (packs, a CRC call, a join, ``MappedFile.append``'s layers). The same
    bytes as :func:`encode_batch`. Thread-safety: one per commitlog, used under its put lock (the scratch)."""

    def __init__(self) -> None:
        self._scratch = ctypes.create_string_buffer(ONE_UNIT_SCRATCH)

    def append(self, batch: MessageBatch, size: int, physical_offset: int, queue_offset: int, store_timestamp: int,
               store_host: bytes, fd: int, position: int) -> int | None:
        """The lone message of ``batch`` as its ``size``-byte unit at ``physical_offset``, ``pwrite``n into
        the file open as ``fd`` (-1: none) at ``position``; returns how many of its first bytes were written
        (all, but for a failed or short ``pwrite``: :meth:`unit` has the rest). None, with nothing written,
        when it does not apply: the library is not loaded, the unit is larger than the scratch, or the body
        or properties are not ``bytes`` (a view, a bytearray): encode it as a batch then."""
        if native.APPEND_ONE is None or size > ONE_UNIT_SCRATCH:
            return None
        body, props, topic_tail = batch.bodies[0], batch.properties[0], _topic_tail(batch.topic.encode())
        hosts = _HOSTS.pack(batch.born_host, store_host)  # cut or zero-padded, as the struct encoder's header
        try:
            wrote = native.APPEND_ONE(
                _ONE_SCALARS.pack(len(body), len(props), len(topic_tail), batch.queue_id, batch.flags.item(0),
                                  queue_offset, physical_offset, batch.sys_flags.item(0),
                                  batch.born_timestamps.item(0), store_timestamp, batch.reconsume_times.item(0),
                                  _HOSTS_V6, CRC_MASK, MESSAGE_MAGIC, fd, position),
                body, props, topic_tail, hosts, self._scratch, size)
        except ctypes.ArgumentError:  # checked by ctypes before the call: nothing was written
            return None
        return None if wrote < 0 else wrote

    def unit(self, size: int) -> memoryview:
        """The unit the last :meth:`append` encoded (``size`` bytes), until the next one."""
        return memoryview(self._scratch).cast("B")[:size]


def _column(values: np.ndarray, dtype: str) -> bytes:
    """``values`` as ``dtype`` (native byte order), contiguous: what the native encoder reads."""
    return (values if values.dtype == dtype else values.astype(dtype)).tobytes()


@functools.lru_cache(maxsize=1024)
def _topic_tail(topic: bytes) -> bytes:
    """The TOPIC length and bytes, as every unit of ``topic`` has them after its body."""
    return TOPIC_LENGTH_STRUCT.pack(len(topic)) + topic


@functools.lru_cache(maxsize=1024)
def _tail_template(topic: bytes) -> tuple[np.dtype, bytes]:
    """The record following every body of ``topic``'s units up to the PROPERTIES bytes, and its
    bytes with the PROPERTIES length zero: built once per topic (a record type costs more to build
    than the rest of the tail)."""
    return tail_record(len(topic)), _topic_tail(topic) + PROPS_LENGTH_STRUCT.pack(0)


def _encode_one(
    batch: MessageBatch, topic: bytes, sizes: np.ndarray, physical_offset: int, queue_offset: int,
    store_timestamp: int, store_host: bytes,
) -> EncodedBatch:
    """``sizes``: the lone unit's, as an array (the result's, as it is)."""
    size = sizes.item(0)  # .item: a Python int at once, no numpy scalar made (~0.06 us where int(a[0]) takes ~0.3)
    body, props = batch.bodies[0], batch.properties[0]
    head = HEADER_STRUCT.pack(
        size, MESSAGE_MAGIC, body_crc(body), batch.queue_id, batch.flags.item(0), queue_offset,
        physical_offset, batch.sys_flags.item(0) & ~_HOSTS_V6,
        batch.born_timestamps.item(0), batch.born_host, store_timestamp, store_host, batch.reconsume_times.item(0),
        0, len(body),
    )
    data = b"".join((head, body, TOPIC_LENGTH_STRUCT.pack(len(topic)), topic, PROPS_LENGTH_STRUCT.pack(len(props)),
                     props))
    return EncodedBatch(data, sizes, np.array([physical_offset], dtype=np.int64))
