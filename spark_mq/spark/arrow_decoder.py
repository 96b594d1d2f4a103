"""Commitlog units (a PULL_MESSAGE body: units back to back) to one Arrow ``RecordBatch``.

The columns are DESIGN.md's message schema (:data:`SCHEMA`). Nothing here runs Python code per
message (the only exceptions: compressed bodies, which are rare, are inflated one by one):

* the fixed header of every unit is gathered with ONE numpy take through a byte-strided view of
  the buffer typed as the header record (``HEADER``), then converted column by column;
* variable fields (topic, body, property names and values, TAGS/KEYS/UNIQ_KEY) are byte ranges
  of the buffer. Ranges that are disjoint and in buffer order are compacted by Arrow itself: the
  buffer is viewed, zero-copy, as a binary array whose rows are the ranges *and the gaps between
  them* (offsets ``s0, e0, s1, e1, ...``), and ``take`` of the even rows copies just the wanted
  bytes into a fresh contiguous array (a C++ memcpy per row). Absent values are null indices;
* hosts become ``"ip:port"`` strings through digit lookup tables written into a fixed-width byte
  matrix (one string when every unit has the same host, as a broker's store host does);
* ``msg_id`` is the offsetMsgId (store host + commitlog offset as 32 upper-case hex characters).

Strings are taken as the producer wrote them (UTF-8, not re-validated). Property pairs are those
:func:`spark_mq.common.properties.decode_properties` would return, except that a name repeated in
one message keeps every occurrence in the map (TAGS, KEYS and UNIQ_KEY take the last, as Java).

A batch holds at most 2 GiB of bytes per string/binary column (Arrow's 32-bit offsets); pull
bodies are far smaller.

Thread-safety: pure functions of their arguments; safe to call from any number of threads.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.common.message import unpack_host
from spark_mq.common.message_id import offset_msg_ids
from spark_mq.common.message_unit import COMPRESSED_FLAG, HEADER, HEADER_SIZE, MIN_UNIT_SIZE
from spark_mq.common.properties import _NV, _PS, KEYS, TAGS, UNIQ_KEY, scan_properties
from spark_mq.remoting.message_batch_codec import split_pull_body

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker_name", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("commitlog_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("uniq_key", pa.string()),
        ("keys", pa.string()),
        ("tags", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("body", pa.binary()),
        ("born_timestamp", pa.timestamp("ms")),
        ("store_timestamp", pa.timestamp("ms")),
        ("born_host", pa.string()),
        ("store_host", pa.string()),
        ("reconsume_times", pa.int32()),
        ("sys_flag", pa.int32()),
        ("flag", pa.int32()),
    ]
)

_INT32_OFFSETS_LIMIT = 1 << 31
_LARGE = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}


def decode_units_to_arrow(
    buf: bytes | bytearray | memoryview | np.ndarray, starts: np.ndarray | None = None, *, broker_name: str
) -> pa.RecordBatch:
    """Decode the units of ``buf`` beginning at ``starts`` (found by walking the whole buffer
    when None: it must then be a well-formed pull body, else ``BatchBodyError``) into one
    RecordBatch with :data:`SCHEMA`. ``starts`` must be whole units in buffer order."""
    data = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1).view(np.uint8)
    if starts is None:
        starts = split_pull_body(memoryview(data))
    starts = np.asarray(starts, dtype=np.int64)
    n = starts.size
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=SCHEMA)
    if int(starts.min()) < 0 or int(starts.max()) + MIN_UNIT_SIZE > data.size or np.any(np.diff(starts) <= 0):
        raise ValueError("unit starts must be increasing offsets of whole units inside the buffer")
    head = _headers(data, starts)
    body_start = starts + HEADER_SIZE
    body_end = body_start + head["body_length"].astype(np.int64)
    topic_start = body_end + 1
    topic_end = topic_start + data[body_end]
    props_start = topic_end + 2
    props_end = props_start + (data[topic_end].astype(np.int64) << 8 | data[topic_end + 1])
    if int(props_end[-1]) > data.size or np.any(props_end[:-1] > starts[1:]):
        raise ValueError("unit lengths run past the next unit or the buffer")

    pybuf = pa.py_buffer(data)
    rows, names, values = _property_pairs(_take_ranges(data, pybuf, props_start, props_end, pa.binary()))
    sys_flag = head["sys_flag"].astype(np.int32)
    store_host = head["store_host"]
    phys = head["physical_offset"].astype(np.int64)
    columns = {
        "topic": _take_ranges(data, pybuf, topic_start, topic_end, pa.string()),
        "broker_name": _repeat_string(broker_name, n),
        "queue_id": pa.array(head["queue_id"].astype(np.int32)),
        "queue_offset": pa.array(head["queue_offset"].astype(np.int64)),
        "commitlog_offset": pa.array(phys),
        "msg_id": _msg_ids(store_host, phys),
        "uniq_key": _pick(rows, names, values, UNIQ_KEY, n),
        "keys": _pick(rows, names, values, KEYS, n),
        "tags": _pick(rows, names, values, TAGS, n),
        "properties": _property_map(rows, names, values, n),
        "body": _bodies(data, pybuf, body_start, body_end, sys_flag),
        "born_timestamp": _timestamps(head["born_timestamp"]),
        "store_timestamp": _timestamps(head["store_timestamp"]),
        "born_host": _hosts(head["born_host"]),
        "store_host": _hosts(store_host),
        "reconsume_times": pa.array(head["reconsume_times"].astype(np.int32)),
        "sys_flag": pa.array(sys_flag),
        "flag": pa.array(head["flag"].astype(np.int32)),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in SCHEMA], schema=SCHEMA)


def _headers(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The HEADER record of every unit, gathered with one take through a view of ``data`` that
    has a (mutually overlapping) HEADER record at every byte offset."""
    at_every_byte = np.ndarray((data.size - HEADER_SIZE + 1,), dtype=HEADER, buffer=data, strides=(1,))
    return at_every_byte[starts]


# -- variable-length fields ----------------------------------------------------------------
def _take_ranges(
    data: np.ndarray, pybuf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType,
    valid: np.ndarray | None = None,
) -> pa.Array:
    """Row i = bytes ``[starts[i], ends[i])`` of the buffer (null where ``valid`` is False),
    compacted into a fresh array. Ranges must be disjoint and in buffer order (the gaps between
    them become rows of the zero-copy view that ``take`` skips); otherwise bytes are gathered
    with a numpy index (slower, same result)."""
    n = starts.size
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    if n and np.any(np.diff(bounds) < 0):
        return _gather_ranges(data, starts, ends, typ, valid)
    large = data.size >= _INT32_OFFSETS_LIMIT
    view_type = _LARGE[typ] if large else typ
    offsets = bounds if large else bounds.astype(np.int32)
    view = pa.Array.from_buffers(view_type, max(2 * n - 1, 0), [None, pa.py_buffer(offsets), pybuf])
    picks = np.arange(0, 2 * n, 2, dtype=np.int64)
    out = view.take(pa.array(picks, mask=None if valid is None else ~valid))
    return out.cast(typ) if large else out


def _gather_ranges(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType, valid: np.ndarray | None
) -> pa.Array:
    """:func:`_take_ranges` for ranges in any order: one fancy index over all wanted bytes."""
    lengths = ends - starts
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
    offsets = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    validity = None if valid is None else pa.array(valid).buffers()[1]
    out = pa.Array.from_buffers(_LARGE[typ], starts.size, [validity, pa.py_buffer(offsets), pa.py_buffer(data[index])])
    return out.cast(typ)


def _repeat_string(value: str, n: int) -> pa.Array:
    """``value`` in every one of ``n`` rows."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    data = pa.py_buffer(raw * n)
    if offsets[-1] < _INT32_OFFSETS_LIMIT:
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), data])
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), data]).cast(pa.string())


def _property_pairs(props: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(row, name, value) of every pair of the property strings ``props`` (a compacted binary
    array, one per message), split as decode_properties splits them: a pair runs to the next
    PROPERTY_SEPARATOR (or its message's end), its name to the FIRST NAME_VALUE_SEPARATOR;
    pieces without a separator or with an empty name are dropped."""
    offsets = np.frombuffer(props.buffers()[1], dtype=np.int32, count=len(props) + 1).astype(np.int64)
    data_buf = props.buffers()[2] or pa.py_buffer(b"")
    flat = np.frombuffer(data_buf, dtype=np.uint8, count=int(offsets[-1]))
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    row_last = offsets[nonempty + 1] - 1
    if np.all(flat[row_last] == _PS):
        rows, name_start, name_end, value_end = _scan_terminated(flat, nonempty, row_last)
    else:  # some message's properties lack the final separator (RocketMQ 5 writes them so)
        scan = scan_properties(flat, offsets[:-1], offsets[1:])
        first = np.ones(scan.name_end.size, dtype=bool)  # drop pairs whose name holds a separator
        first[1:] = (scan.name_end[:-1] < scan.name_start[1:]) | (scan.row[:-1] != scan.row[1:])
        rows, name_start, name_end, value_end = (
            scan.row[first], scan.name_start[first], scan.name_end[first], scan.value_end[first]
        )
    keep = name_end > name_start
    rows, name_start, name_end, value_end = rows[keep], name_start[keep], name_end[keep], value_end[keep]
    names = _take_ranges(flat, data_buf, name_start, name_end, pa.string())
    values = _take_ranges(flat, data_buf, name_end + 1, value_end, pa.string())
    return rows, names, values


def _scan_terminated(
    flat: np.ndarray, nonempty: np.ndarray, row_last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of back-to-back property strings that all end with PROPERTY_SEPARATOR (as RocketMQ
    4 writes them): one pass finds every separator in order; a pair's name starts after the
    PROPERTY_SEPARATOR before its first NAME_VALUE_SEPARATOR, its value ends at the next one."""
    sep = np.flatnonzero(flat <= _PS)
    kinds = flat[sep]
    if not np.all(kinds):  # NUL bytes are rare: drop them
        sep, kinds = sep[kinds != 0], kinds[kinds != 0]
    is_ps = kinds == _PS
    ps_at = sep[is_ps]
    closing = np.cumsum(is_ps) - is_ps  # index (into ps_at) of the separator closing each event's pair
    prev_kind = np.empty_like(kinds)
    prev_kind[:1] = _PS
    prev_kind[1:] = kinds[:-1]
    events = np.flatnonzero((kinds == _NV) & (prev_kind == _PS))
    name_start = np.zeros(events.size, dtype=np.int64)
    name_start[events > 0] = sep[events[events > 0] - 1] + 1
    pair_end = closing[events]
    # the message of each PROPERTY_SEPARATOR: count the messages' last separators before it
    is_last = np.zeros(ps_at.size, dtype=np.int64)
    is_last[np.searchsorted(ps_at, row_last)] = 1
    ps_row = nonempty[np.cumsum(is_last) - is_last] if nonempty.size else is_last
    return ps_row[pair_end], name_start, sep[events], ps_at[pair_end]


def _pick(rows: np.ndarray, names: pa.Array, values: pa.Array, name: str, n: int) -> pa.Array:
    """Per message the value of property ``name`` (the last, as Java's map keeps), else null."""
    hits = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))
    index = np.full(n, -1, dtype=np.int64)
    index[rows[hits]] = hits  # numpy keeps the last of repeated indices
    return values.take(pa.array(index, mask=index < 0))


def _property_map(rows: np.ndarray, names: pa.Array, values: pa.Array, n: int) -> pa.Array:
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values)


def _bodies(
    data: np.ndarray, pybuf: pa.Buffer, body_start: np.ndarray, body_end: np.ndarray, sys_flag: np.ndarray
) -> pa.Array:
    """Bodies as stored, except that compressed ones (rare) are inflated and spliced in."""
    bodies = _take_ranges(data, pybuf, body_start, body_end, pa.binary())
    flagged = np.flatnonzero(sys_flag & COMPRESSED_FLAG)
    if not flagged.size:
        return bodies
    inflated = []
    for i in flagged.tolist():  # compressed bodies only (producers deflate bodies over 4 KiB)
        raw = data[int(body_start[i]) : int(body_end[i])].tobytes()
        try:
            inflated.append(zlib.decompress(raw))
        except zlib.error:
            inflated.append(raw)  # flagged but not a zlib stream: returned as stored
    index = np.arange(body_start.size, dtype=np.int64)
    index[flagged] = body_start.size + np.arange(flagged.size)
    combined = pa.concat_arrays([bodies.cast(pa.large_binary()), pa.array(inflated, type=pa.large_binary())])
    return combined.take(pa.array(index)).cast(pa.binary())


def _timestamps(column: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.timestamp("ms"), column.size, [None, pa.py_buffer(column.astype(np.int64))])


def _msg_ids(store_host: np.ndarray, phys: np.ndarray) -> pa.Array:
    """offsetMsgIds: ``offset_msg_ids`` once per distinct store host (a pull body has one)."""
    hosts = store_host.view(np.uint64)
    if np.all(hosts == hosts[0]):
        ids = offset_msg_ids(bytes(store_host[0]), phys)
    else:
        distinct, inverse = np.unique(hosts, return_inverse=True)
        ids = np.empty(phys.size, dtype="S32")
        for k in range(distinct.size):  # per distinct store host, not per message
            rows = np.flatnonzero(inverse == k)
            ids[rows] = offset_msg_ids(bytes(store_host[rows[0]]), phys[rows])
    offsets = np.arange(0, 32 * (phys.size + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), phys.size, [None, pa.py_buffer(offsets), pa.py_buffer(ids)])


# -- hosts ---------------------------------------------------------------------------------
_DIGITS = np.frombuffer(b"".join(f"{i:<3d}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 3)
_DIGITS_LEN = np.array([len(str(i)) for i in range(256)], dtype=np.int64)
_POW10 = 10 ** np.arange(10, dtype=np.int64)  # 1 .. 10**9
_HOST_WIDTH = 48  # "255.255.255.255:-2147483648" is 27 bytes; room for fixed-width writes past the end


def _hosts(raw: np.ndarray) -> pa.Array:
    """8-byte hosts (IPv4 + big-endian int port) as ``"a.b.c.d:port"`` strings, formatted once
    per distinct host."""
    key = raw.view(np.uint64)
    if np.all(key == key[0]):
        return _repeat_string(unpack_host(bytes(raw[0])), raw.size)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return _format_hosts(raw[first].view(np.uint8).reshape(-1, 8)).take(pa.array(inverse.reshape(-1)))


def _format_hosts(raw: np.ndarray) -> pa.Array:
    """Format ``(m, 8)`` host bytes with lookup tables into a fixed-width byte matrix, then
    compact the rows. Every piece is written at full width; the next piece overwrites the slack."""
    m = raw.shape[0]
    out = np.zeros((m, _HOST_WIDTH), dtype=np.uint8)
    rows = np.arange(m)[:, None]
    cur = np.zeros(m, dtype=np.int64)
    for j in range(4):
        out[rows, cur[:, None] + np.arange(3)] = _DIGITS[raw[:, j]]
        cur += _DIGITS_LEN[raw[:, j]]
        out[np.arange(m), cur] = ord("." if j < 3 else ":")
        cur += 1
    port = raw[:, 4:8].copy().view(">i4").reshape(m).astype(np.int64)
    negative = port < 0
    out[np.flatnonzero(negative), cur[negative]] = ord("-")
    cur += negative
    mag = np.abs(port)
    ndigits = np.maximum(1, np.searchsorted(_POW10, mag, side="right"))
    digits = (mag[:, None] // _POW10[::-1]) % 10 + ord("0")  # 10 digits, most significant first
    src = np.minimum(10 - ndigits[:, None] + np.arange(10), 9)
    out[rows, cur[:, None] + np.arange(10)] = np.take_along_axis(digits, src, axis=1)
    cur += ndigits
    base = np.arange(m, dtype=np.int64) * _HOST_WIDTH
    flat = out.reshape(-1)
    return _take_ranges(flat, pa.py_buffer(flat), base, base + cur, pa.string())
