"""Numpy views that read a field at many offsets of one byte buffer at once.

The unit decoders, chain walker and checkers, the Arrow decoder and the store's recovery read
fields at thousands of offsets of a commitlog file or pull body; these gathers do it in one numpy
call each, without a Python step per offset.

Thread-safety: pure functions of their arguments.
"""

from __future__ import annotations

from spark_mq.common.lazy_numpy import np

_SCAN_CHUNK = 1 << 22  # bytes tested per numpy call when searching a buffer (see byte_positions)


def at_every_byte(data: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """A zero-copy view of ``data`` with a (mutually overlapping) ``dtype`` value at every byte
    offset: indexing it with offsets gathers the fields there in one numpy take."""
    dtype = np.dtype(dtype)
    return np.ndarray((max(data.size - dtype.itemsize + 1, 0),), dtype=dtype, buffer=data, strides=(1,))


def gather_records(data: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records at offsets ``at``, gathered as opaque items (a plain memcpy each,
    several times faster than gathering structured records field by field), then viewed."""
    return at_every_byte(data, f"V{dtype.itemsize}")[at].view(dtype)


def ranges_equal(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, value: bytes) -> np.ndarray:
    """Whether each ``[start, end)`` of ``buf`` holds exactly ``value`` (a topic name): compared 8
    bytes at a time, a few gathers rather than one per byte, the last word overlapping."""
    width = len(value)
    ok = ((ends - starts) == width) & (starts + width <= buf.size)
    at = np.where(ok, starts, 0)  # never gather past the buffer
    if width >= 8:
        words = at_every_byte(buf, "<u8")
        for k in [*range(0, width - 7, 8), width - 8]:
            ok &= words[at + k] == int.from_bytes(value[k:k + 8], "little")
    else:
        for k in range(width):
            ok &= buf[at + k] == value[k]
    return ok


def byte_positions(data: np.ndarray, test: np.ufunc, value: int) -> np.ndarray:
    """Offsets (ascending int64) of the bytes ``b`` of ``data`` where ``test(b, value)`` holds. Tested
    a chunk at a time into one reused mask: a fresh mask as large as a 275 MB body costs more in
    page faults than the compares themselves."""
    mask = np.empty(min(_SCAN_CHUNK, data.size), dtype=bool)
    found = [np.empty(0, dtype=np.int64)]
    for lo in range(0, data.size, _SCAN_CHUNK):  # one step per 4 MiB, not per message
        chunk = data[lo : lo + _SCAN_CHUNK]
        test(chunk, value, out=mask[: chunk.size])
        found.append(np.flatnonzero(mask[: chunk.size]) + lo)
    return np.concatenate(found)
