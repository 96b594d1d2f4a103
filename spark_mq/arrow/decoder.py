"""Commitlog units (a PULL_MESSAGE body: units back to back) to one Arrow ``RecordBatch``.

The columns are DESIGN.md's message schema (:data:`~spark_mq.arrow.schema.SCHEMA`), or those of
them a pruned read asks for (only those are built). Nothing here runs Python code per message
(the only exceptions: compressed bodies, which are rare, are inflated one by one):

* a whole pull body (no starts given) is walked in ONE pass in C
  (:data:`~spark_mq.common.unit.native.PULL_UNITS`): the TOTALSIZE chain, each unit's BODY, TOPIC and
  PROPERTIES lengths checked against its size, its fixed header copied out, its ranges written and its
  topic compared with the first's, each unit's bytes read once while its cache lines are in (the numpy
  steps below each gather a few bytes per unit from a buffer larger than a core's cache). Without the
  library, or for a body that is not well-formed units back to back (then it says what is wrong), or for
  given starts, the numpy steps run: unit starts found by a vectorised walk (every offset holding the
  message magic is a candidate, and the candidates are the units when their TOTALSIZEs chain from the
  first byte to the last, else the sequential walk of ``split_pull_body`` decides, and says what is
  wrong); the fixed header of every unit gathered with ONE numpy take of opaque 88-byte items through a
  byte-strided view of the buffer, then viewed as the header record (``header_record()``); the ranges by
  :func:`~spark_mq.common.unit.layout.unit_ranges`. Either way the header is converted column by column;
* variable fields (topic, body, property names and values, TAGS/KEYS/UNIQ_KEY) are byte ranges
  of the buffer, copied back to back into a fresh Arrow buffer by one C loop (a memcpy a row,
  :data:`~spark_mq.common.unit.native.GATHER_RANGES`). Without the library, ranges that are
  disjoint and in buffer order are compacted by Arrow itself: the buffer is viewed, zero-copy, as
  a binary array whose rows are the ranges *and the gaps between them* (offsets ``s0, e0, s1,
  e1, ...``), and ``take`` of the even rows copies just the wanted bytes into a fresh contiguous
  array (a C++ memcpy per row). A topic shared by every unit (a pull is of one queue) and the broker
  name are one string repeated, built once per value and row count;
* property strings are split in C into names and values written straight as Arrow string buffers,
  each message's last TAGS/KEYS/UNIQ_KEY value copied into its own column in the same pass (absent:
  null) (:data:`~spark_mq.common.unit.native.PROPERTY_PAIRS`); without the library they are compacted
  and split at their separators found in one numpy pass (the common ``name\x01value\x02`` shape needs
  no more than that, odd ones take a general path) and the picks are ``take`` s of the values;
* ``msg_id`` (the offsetMsgId: store host + commitlog offset as 32 upper-case hex characters) and the
  ``"ip:port"`` hosts are written from the headers in C (:data:`~spark_mq.common.unit.native.HEADER_STRINGS`,
  a host equal to the row before's copied, not formatted); without the library, by numpy lookup tables
  (hosts once per distinct host, into a fixed-width byte matrix);
* a Spark read asks for ``utc``: timestamps multiplied into UTC µs in the copy that reads them, so the
  batch is already in :data:`~spark_mq.arrow.schema.UTC_SCHEMA`'s types (no cast per batch).

Strings are taken as the producer wrote them (UTF-8, not re-validated). Property pairs are those
:func:`spark_mq.common.properties.decode_properties` would return, except that a name repeated in
one message keeps every occurrence in the map (TAGS, KEYS and UNIQ_KEY take the last, as Java).

A batch holds at most 2 GiB of bytes per string/binary column (Arrow's 32-bit offsets); pull
bodies are far smaller.

Thread-safety: pure functions of their arguments; safe to call from any number of threads.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mq.arrow.schema import COLUMNS, SCHEMA, UTC_TIMESTAMP, utc_schema
from spark_mq.common.buffers import at_every_byte, byte_positions, gather_records
from spark_mq.common.errors import BatchBodyError
from spark_mq.common.message import unpack_host
from spark_mq.common.message_id import offset_msg_ids
from spark_mq.common.properties import _NV, _PS, KEYS, TAGS, UNIQ_KEY, scan_properties
from spark_mq.common.unit import native
from spark_mq.common.unit.chain import chained_unit_starts
from spark_mq.common.unit.layout import (
    COMPRESSED_FLAG,
    HEADER_SIZE,
    MIN_UNIT_SIZE,
    UnitRanges,
    header_record,
    unit_ranges,
)
from spark_mq.remoting.message_batch_codec import split_pull_body

_INT32_OFFSETS_LIMIT = 1 << 31
_PICKED = (TAGS, KEYS, UNIQ_KEY)  # the native pair split's picks, in its order (native.c)
_RANGE_FIELDS = 7  # native.c's UNIT_RANGES: a unit's start, then UnitRanges' six bounds, in its order


_HOST_ROOM = 27  # native.c's format_host: "255.255.255.255:-2147483648"
_MSG_ID_SIZE = 32  # an offsetMsgId's hex characters
_COPY_SLACK = 8  # native.c's copy_to_separator writes 8 bytes a step
_US_PER_MS = 1000
_ARROW_INTS = {np.int32: pa.int32(), np.int64: pa.int64()}


@dataclass(frozen=True)
class _Pairs:
    """Every property pair of a batch: names, values, each message's pairs' offsets (int32, rows + 1), and
    ``picked(name)``: per message the value of its last pair named ``name`` (TAGS, KEYS or UNIQ_KEY), else null."""

    names: pa.Array
    values: pa.Array
    map_offsets: np.ndarray
    picked: Callable[[str], pa.Array]


_LARGE = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}


def decode_units_to_arrow(
    buf: bytes | bytearray | memoryview | np.ndarray,
    starts: np.ndarray | None = None,
    *,
    broker_name: str,
    columns: Sequence[str] = COLUMNS,
    utc: bool = False,
) -> pa.RecordBatch:
    """Decode the units of ``buf`` beginning at ``starts`` (found by walking the whole buffer
    when None: it must then be a well-formed pull body, else ``BatchBodyError``) into one
    RecordBatch with ``columns`` of :data:`SCHEMA` (all by default), in that order. Only those
    columns are built: a pruned read skips, e.g., the property split when it wants no column made
    of properties. ``starts`` must be whole units in buffer order. ``utc``: timestamps as
    :data:`~spark_mq.arrow.schema.UTC_SCHEMA` has them (what a Spark read yields) rather than as stored."""
    schema = _schema(tuple(columns), utc)  # KeyError for a name not in SCHEMA
    data = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1).view(np.uint8)
    walked = starts is None
    native_pass = _native_units(data) if walked else None
    if native_pass is not None:  # the units walked and checked in C, their headers and ranges gathered there
        head, ranges, same_topic = native_pass
        n = len(ranges)
    else:
        starts = _unit_starts(data) if walked else np.asarray(starts, dtype=np.int64)
        n, same_topic = starts.size, None
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if native_pass is None:
        head, ranges = _checked_units(data, starts, walked)

    pybuf = pa.py_buffer(data)

    @functools.cache
    def pairs() -> _Pairs:  # shared by the four property columns
        split = _native_pairs(data, ranges.props_start, ranges.props_end)
        if split is not None:
            return split
        rows, names, values, map_offsets = _property_pairs(
            _take_ranges(data, pybuf, ranges.props_start, ranges.props_end, pa.binary()))
        return _Pairs(names, values, map_offsets, functools.partial(_picked_by_take, rows, names, values, n=n))

    def pick(name: str) -> pa.Array:
        return pairs().picked(name)

    def properties() -> pa.Array:
        found = pairs()
        return pa.MapArray.from_arrays(pa.array(found.map_offsets), found.names, found.values)

    def numbers(field: str, dtype: type) -> pa.Array:
        return pa.Array.from_buffers(_ARROW_INTS[dtype], n, [None, pa.py_buffer(head[field].astype(dtype))])

    build: dict[str, Callable[[], pa.Array]] = {
        "topic": lambda: _topics(data, pybuf, ranges.topic_start, ranges.topic_end, same_topic),
        "broker_name": lambda: _repeat_string(broker_name, n),
        "queue_id": lambda: numbers("queue_id", np.int32),
        "queue_offset": lambda: numbers("queue_offset", np.int64),
        "commitlog_offset": lambda: numbers("physical_offset", np.int64),
        "msg_id": lambda: _header_strings(head, "msg_id") or _msg_ids(head["store_host"],
                                                                      head["physical_offset"].astype(np.int64)),
        "uniq_key": lambda: pick(UNIQ_KEY),
        "keys": lambda: pick(KEYS),
        "tags": lambda: pick(TAGS),
        "properties": properties,
        "body": lambda: _bodies(data, pybuf, ranges.body_start, ranges.body_end, head["sys_flag"].astype(np.int32)),
        "born_timestamp": lambda: _timestamps(head["born_timestamp"], utc),
        "store_timestamp": lambda: _timestamps(head["store_timestamp"], utc),
        "born_host": lambda: _header_strings(head, "born_host") or _hosts(head["born_host"]),
        "store_host": lambda: _header_strings(head, "store_host") or _hosts(head["store_host"]),
        "reconsume_times": lambda: numbers("reconsume_times", np.int32),
        "sys_flag": lambda: numbers("sys_flag", np.int32),
        "flag": lambda: numbers("flag", np.int32),
    }
    return pa.RecordBatch.from_arrays([build[f.name]() for f in schema], schema=schema)


@functools.lru_cache(maxsize=64)
def _schema(columns: tuple[str, ...], utc: bool) -> pa.Schema:
    """``columns`` of :data:`SCHEMA`, or of :data:`~spark_mq.arrow.schema.UTC_SCHEMA` when ``utc``: built once per
    column list (a reader decodes every pull of a read with the same columns)."""
    return utc_schema(columns) if utc else pa.schema([SCHEMA.field(c) for c in columns])


def _native_units(data: np.ndarray) -> tuple[np.ndarray, UnitRanges, bool] | None:
    """(headers, ranges, whether every unit has the first's topic) of a whole pull body, from ONE pass over
    its units in C (:data:`~spark_mq.common.unit.native.PULL_UNITS`: each unit's bytes read while its cache
    lines are in, where the numpy steps each gather a few bytes per unit from a buffer larger than the cache);
    None without the library, or when the body is not well-formed units back to back (the numpy walk then says
    what is wrong)."""
    if native.PULL_UNITS is None:
        return None
    capacity = data.size // MIN_UNIT_SIZE + 1
    ranges = np.empty((_RANGE_FIELDS, capacity), dtype=np.int64)
    headers = np.empty(capacity * HEADER_SIZE, dtype=np.uint8)
    same_topic = np.zeros(1, dtype=np.int64)
    found = native.PULL_UNITS(data.ctypes.data, data.size, ranges.ctypes.data, headers.ctypes.data, capacity,
                              same_topic.ctypes.data)
    if found < 0:
        return None
    head = headers[: found * HEADER_SIZE].view(header_record())
    return head, UnitRanges(*ranges[:, :found]), bool(same_topic[0])


def _checked_units(data: np.ndarray, starts: np.ndarray, walked: bool) -> tuple[np.ndarray, UnitRanges]:
    """(headers, ranges) of the units at ``starts`` by numpy gathers, each unit's lengths checked: ``walked``
    (a whole pull body), every unit must end exactly where the next begins (else ``BatchBodyError``); given
    starts, no unit may run past the next one or the buffer (else ``ValueError``)."""
    if int(starts.min()) < 0 or int(starts.max()) + MIN_UNIT_SIZE > data.size or np.any(np.diff(starts) <= 0):
        raise ValueError("unit starts must be increasing offsets of whole units inside the buffer")
    head = gather_records(data, starts, header_record())
    ranges = unit_ranges(data, starts, head["body_length"].astype(np.int64))  # reads clamped into the buffer
    unit_bound = np.append(starts[1:], data.size)  # no unit runs past the next one or the buffer
    if walked:  # a pull body's units are back to back: each must end exactly where the next begins
        bad = np.flatnonzero(~ranges.fit(unit_bound))
        if bad.size:
            raise BatchBodyError(int(starts[bad[0]]), f"unit at {int(starts[bad[0]])} has inconsistent lengths")
    elif np.any(ranges.body_end < ranges.body_start) or np.any(ranges.props_end > unit_bound):
        raise ValueError("unit lengths run past the next unit or the buffer")
    return head, ranges


def _unit_starts(data: np.ndarray) -> np.ndarray:
    """Starts of the units of a whole pull body, as ``split_pull_body`` finds them but, when
    ``chained_unit_starts`` can tell, without its Python step per unit (the caller checks each
    unit's inner lengths). Anything else (magic bytes inside a body, a torn or foreign body) is
    left to ``split_pull_body``, which walks the chain or raises ``BatchBodyError`` saying what
    is wrong."""
    starts = chained_unit_starts(data)
    return starts if starts is not None else split_pull_body(memoryview(data))


# -- variable-length fields ----------------------------------------------------------------
def _take_ranges(
    data: np.ndarray, pybuf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType
) -> pa.Array:
    """Row i = bytes ``[starts[i], ends[i])`` of the buffer, compacted into a fresh array. Ranges
    must be disjoint and in buffer order (the gaps between them become rows of the zero-copy view
    that ``take`` skips); otherwise bytes are gathered with a numpy index (slower, same result)."""
    n = starts.size
    gathered = _native_gather(data, starts, ends, typ)
    if gathered is not None:
        return gathered
    large = data.size >= _INT32_OFFSETS_LIMIT
    bounds = np.empty(2 * n, dtype=np.int64 if large else np.int32)
    bounds[0::2] = starts
    bounds[1::2] = ends
    if n and np.any(bounds[1:] < bounds[:-1]):
        return _gather_ranges(data, starts, ends, typ)
    view_type = _LARGE[typ] if large else typ
    view = pa.Array.from_buffers(view_type, max(2 * n - 1, 0), [None, pa.py_buffer(bounds), pybuf])
    out = view.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    return out.cast(typ) if large else out


def _native_gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType) -> pa.Array | None:
    """:func:`_take_ranges` by the native library (:data:`~spark_mq.common.unit.native.GATHER_RANGES`: one memcpy
    a row into a buffer of their total size, no index array, any order); None without it, past Arrow's 32-bit
    offsets, or for ranges not inside ``data``."""
    n = starts.size
    if native.GATHER_RANGES is None or not n:
        return None
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total >= _INT32_OFFSETS_LIMIT or int(starts.min()) < 0 or int(ends.max()) > data.size or int(lengths.min()) < 0:
        return None
    out, offsets = np.empty(total, dtype=np.uint8), np.empty(n + 1, dtype=np.int32)
    native.GATHER_RANGES(data.ctypes.data, starts.ctypes.data, ends.ctypes.data, n, out.ctypes.data,
                         offsets.ctypes.data)
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def _gather_ranges(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, typ: pa.DataType) -> pa.Array:
    """:func:`_take_ranges` for ranges in any order: one fancy index over all wanted bytes."""
    lengths = ends - starts
    offsets = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    out = pa.Array.from_buffers(_LARGE[typ], starts.size, [None, pa.py_buffer(offsets), pa.py_buffer(data[index])])
    return out.cast(typ)


@functools.lru_cache(maxsize=16)
def _repeat_string(value: str | bytes, n: int) -> pa.Array:
    """``value`` (bytes: UTF-8 already) in every one of ``n`` rows. Cached (Arrow arrays are immutable): a read's
    pulls are of one topic at one broker, mostly of the same size, so its topic and broker_name columns are
    built once, not once a pull."""
    raw = value.encode() if isinstance(value, str) else value
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    data = pa.py_buffer(raw * n)
    if offsets[-1] < _INT32_OFFSETS_LIMIT:
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), data])
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), data]).cast(pa.string())


def _property_pairs(props: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray]:
    """(row, name, value) of every pair of the property strings ``props`` (a compacted binary
    array, one per message), and the int32 offsets of each message's pairs, split as
    decode_properties splits them: a pair runs to the next PROPERTY_SEPARATOR (or its message's
    end), its name to the FIRST NAME_VALUE_SEPARATOR; pieces without a separator or with an empty
    name are dropped."""
    n = len(props)
    offsets = np.frombuffer(props.buffers()[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data_buf = props.buffers()[2] or pa.py_buffer(b"")
    flat = np.frombuffer(data_buf, dtype=np.uint8, count=int(offsets[-1]))
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    row_last = offsets[nonempty + 1] - 1
    terminated = bool(np.all(flat[row_last] == _PS))
    sep = byte_positions(flat, np.less_equal, _PS) if terminated else None
    plain = _plain_pairs(flat, sep) if sep is not None else None
    if plain is not None:  # the common case, as RocketMQ 4 producers write: name\x01value\x02 ...
        name_start, name_end, value_end = plain
        map_offsets = np.searchsorted(value_end, offsets)  # pairs end inside their own message
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(map_offsets))
    else:
        if sep is not None:
            rows, name_start, name_end, value_end = _scan_terminated(flat, sep, nonempty, row_last)
        else:  # some message's properties lack the final separator (RocketMQ 5 writes them so)
            scan = scan_properties(flat, offsets[:-1], offsets[1:])
            first = np.ones(scan.name_end.size, dtype=bool)  # drop pairs whose name holds a separator
            first[1:] = (scan.name_end[:-1] < scan.name_start[1:]) | (scan.row[:-1] != scan.row[1:])
            rows, name_start, name_end, value_end = (
                scan.row[first], scan.name_start[first], scan.name_end[first], scan.value_end[first]
            )
        keep = name_end > name_start
        rows, name_start, name_end, value_end = rows[keep], name_start[keep], name_end[keep], value_end[keep]
        map_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=map_offsets[1:])
    names = _take_ranges(flat, data_buf, name_start, name_end, pa.string())
    values = _take_ranges(flat, data_buf, name_end + 1, value_end, pa.string())
    return rows, names, values, map_offsets.astype(np.int32)


def _plain_pairs(flat: np.ndarray, sep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(name start, name end, value end) of every pair when the separators ``sep`` simply
    alternate NAME_VALUE, PROPERTY, NAME_VALUE, ... and no name is empty; else None."""
    kinds = flat[sep]
    if kinds.size % 2 or not (np.all(kinds[0::2] == _NV) and np.all(kinds[1::2] == _PS)):
        return None
    name_end, value_end = sep[0::2], sep[1::2]
    name_start = np.zeros(name_end.size, dtype=np.int64)
    name_start[1:] = value_end[:-1] + 1
    if np.any(name_end == name_start):
        return None
    return name_start, name_end, value_end


def _scan_terminated(
    flat: np.ndarray, sep: np.ndarray, nonempty: np.ndarray, row_last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of back-to-back property strings that all end with PROPERTY_SEPARATOR (as RocketMQ
    4 writes them), given every byte ``sep`` at or below it, in order: a pair's name starts after
    the PROPERTY_SEPARATOR before its first NAME_VALUE_SEPARATOR, its value ends at the next one."""
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


def _picked_by_take(rows: np.ndarray, names: pa.Array, values: pa.Array, name: str, *, n: int) -> pa.Array:
    """Per message the value of its last pair named ``name`` (as Java's map keeps), else null."""
    import pyarrow.compute as pc  # lazy import: the driver's per-query runner never needs it
    hits = np.flatnonzero(pc.equal(names, name).to_numpy(zero_copy_only=False))
    index = np.full(n, -1, dtype=np.int64)
    index[rows[hits]] = hits  # numpy keeps the last of repeated indices
    missing = index < 0
    return values.take(pa.array(index, mask=missing) if missing.any() else pa.array(index))


def _native_pairs(data: np.ndarray, props_start: np.ndarray, props_end: np.ndarray) -> _Pairs | None:
    """:class:`_Pairs` of the property strings ``data[props_start[i]:props_end[i]]``, split and compacted in one
    pass by the native library (the same rule as :func:`_property_pairs`, which the tests compare it with), the
    picked values (TAGS, KEYS, UNIQ_KEY) written as their own columns in the same pass; None without the
    library, or past Arrow's 32-bit offsets."""
    starts = np.ascontiguousarray(props_start, dtype=np.int64)
    ends = np.ascontiguousarray(props_end, dtype=np.int64)
    size = int((ends - starts).sum())
    if native.PROPERTY_PAIRS is None or size >= _INT32_OFFSETS_LIMIT:
        return None
    n = starts.size
    capacity = size // 2 + 1  # a kept pair takes at least a name byte and its separator
    names, values = np.empty(size + _COPY_SLACK, dtype=np.uint8), np.empty(size + _COPY_SLACK, dtype=np.uint8)
    name_offsets, value_offsets = np.empty(capacity + 1, dtype=np.int32), np.empty(capacity + 1, dtype=np.int32)
    map_offsets = np.empty(n + 1, dtype=np.int32)
    picks = np.empty((len(_PICKED), n), dtype=np.int64, order="F")  # picks[k, row] at 3 * row + k
    pick_values = np.empty((len(_PICKED), size), dtype=np.uint8)  # column k's bytes in row k
    pick_offsets = np.empty((len(_PICKED), n + 1), dtype=np.int32)
    found = native.PROPERTY_PAIRS(data.ctypes.data, starts.ctypes.data, ends.ctypes.data, n, names.ctypes.data,
                                  name_offsets.ctypes.data, values.ctypes.data, value_offsets.ctypes.data,
                                  map_offsets.ctypes.data, picks.ctypes.data, capacity, pick_values.ctypes.data,
                                  pick_offsets.ctypes.data, size)
    if found < 0:  # cannot happen (see capacity): the numpy path then
        return None

    def strings(raw: np.ndarray, offsets: np.ndarray) -> pa.Array:
        return pa.Array.from_buffers(pa.string(), found, [None, pa.py_buffer(offsets[: found + 1]),
                                                          pa.py_buffer(raw[: int(offsets[found])])])

    def picked(name: str) -> pa.Array:
        k = _PICKED.index(name)
        offsets, valid = pick_offsets[k], picks[k] >= 0
        missing = n - int(np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if missing else None
        return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets),
                                                      pa.py_buffer(pick_values[k, : int(offsets[n])])], missing)

    return _Pairs(strings(names, name_offsets), strings(values, value_offsets), map_offsets, picked)


def _header_strings(head: np.ndarray, column: str) -> pa.Array | None:
    """The ``msg_id``, ``born_host`` or ``store_host`` column of the unit headers ``head``, written by the native
    library in one pass (:data:`~spark_mq.common.unit.native.HEADER_STRINGS`: what :func:`_msg_ids` and
    :func:`_hosts` give, which the tests compare it with); None without the library, or past Arrow's 32-bit
    offsets."""
    n = head.size
    if native.HEADER_STRINGS is None or n * _HOST_ROOM >= _INT32_OFFSETS_LIMIT:
        return None
    headers = np.ascontiguousarray(head)
    if column == "msg_id":
        ids = np.empty(n * _MSG_ID_SIZE, dtype=np.uint8)
        native.HEADER_STRINGS(headers.ctypes.data, n, ids.ctypes.data, None, None, None, None)
        offsets = np.arange(0, _MSG_ID_SIZE * (n + 1), _MSG_ID_SIZE, dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(ids)])
    out, offsets = np.empty(n * _HOST_ROOM, dtype=np.uint8), np.empty(n + 1, dtype=np.int32)
    written, skipped = (out.ctypes.data, offsets.ctypes.data), (None, None)
    born, store = (written, skipped) if column == "born_host" else (skipped, written)
    native.HEADER_STRINGS(headers.ctypes.data, n, None, *born, *store)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(out[: int(offsets[n])])])


def _topics(data: np.ndarray, pybuf: pa.Buffer, starts: np.ndarray, ends: np.ndarray, same: bool | None) -> pa.Array:
    """The topic column: one repeated string when every unit has the same topic (a pull is of one
    queue; ``same`` says so when the caller knows, None: compared here), else the ranges compacted."""
    length = int(ends[0] - starts[0])
    if same is None and length and np.all(ends - starts == length):
        topics = at_every_byte(data, f"V{length}")[starts]
        same = bool(np.all(topics == topics[0]))
    if same and length:
        return _repeat_string(data[starts[0] : ends[0]].tobytes(), starts.size)
    return _take_ranges(data, pybuf, starts, ends, pa.string())


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


def _timestamps(column: np.ndarray, utc: bool) -> pa.Array:
    """ms since the epoch as stored, or (``utc``) as UTC µs: multiplied here in the copy that reads the big-endian
    field, where a cast afterwards is another pass."""
    values = column.astype(np.int64)
    if not utc:
        return pa.Array.from_buffers(pa.timestamp("ms"), column.size, [None, pa.py_buffer(values)])
    values *= _US_PER_MS
    return pa.Array.from_buffers(UTC_TIMESTAMP, column.size, [None, pa.py_buffer(values)])


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
