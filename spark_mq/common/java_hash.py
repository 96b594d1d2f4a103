"""Java's ``String.hashCode``, scalar and vectorised.

RocketMQ stores ``tags.hashCode()`` in consume queue entries and hashes ``topic#key`` with it
in index files, so ours must match Java bit for bit: ``h = 31*h + c`` over UTF-16 code units,
wrapping at 32 bits. The vectorised form hashes many byte ranges of one buffer at once using
uint32 arithmetic, which wraps exactly like Java's int.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

_MASK = 0xFFFFFFFF


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash(s: str) -> int:
    """``s.hashCode()`` as a signed 32-bit int."""
    return java_hash_utf8(s.encode())


def java_hash_utf8(raw: bytes, prefix_hash: int = 0) -> int:
    """Signed ``hashCode`` of the string UTF-8 ``raw`` holds, continued from ``prefix_hash`` (the
    hash of a prefix). Plain Python: for the few short strings of one message it beats any numpy
    call's fixed cost. Undecodable bytes are replaced, as ``java_hashes`` does."""
    units: Iterable[int] = raw
    if not raw.isascii():
        utf16 = raw.decode("utf-8", "replace").encode("utf-16-be")
        units = struct.unpack(f">{len(utf16) // 2}H", utf16)
    h = prefix_hash & _MASK
    for u in units:
        h = (31 * h + u) & _MASK
    return _to_signed(h)


def combine(prefix_hash: int, suffix_hash: int, suffix_units: int) -> int:
    """Hash of ``prefix + suffix`` from the two parts' hashes (suffix length in UTF-16 units)."""
    return _to_signed((prefix_hash * pow(31, suffix_units, 1 << 32) + suffix_hash) & _MASK)


_POW_CACHE = np.ones(1, dtype=np.uint32)


def _powers(n: int) -> np.ndarray:
    """31**i mod 2**32 for i in [0, n)."""
    global _POW_CACHE
    if _POW_CACHE.size < n:
        size = max(n, 2 * _POW_CACHE.size)
        p = np.full(size, 31, dtype=np.uint32)
        p[0] = 1
        _POW_CACHE = np.cumprod(p, dtype=np.uint32)
    return _POW_CACHE[:n]


def java_hashes(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, prefix_hash: int | np.ndarray = 0
) -> np.ndarray:
    """Hashes of ``prefix + buf[starts[i]:ends[i]]`` (UTF-8 ranges) as int32.

    ``prefix_hash`` is the Java hash of a string to put before every range (one, or one per
    range), folded in as ``prefix * 31**len + hash``. The rare range holding non-ASCII bytes is
    decoded and hashed on its own so that UTF-16 units count as Java counts them.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = starts.size
    out = np.zeros(n, dtype=np.uint64)
    if n == 0:
        return out.astype(np.uint32).view(np.int32)
    lengths = ends - starts
    # Horner's rule a column at a time, over the ranges still long enough (longest first);
    # uint32 arithmetic wraps exactly like Java's int
    order = np.argsort(-lengths, kind="stable")
    s_sorted = starts[order]
    neg_len = -lengths[order]
    h = np.zeros(n, dtype=np.uint32)
    high = np.zeros(n, dtype=np.uint8)  # max byte seen: >= 0x80 means non-ASCII
    thirty_one = np.uint32(31)
    for j in range(int(lengths.max())):
        k = int(np.searchsorted(neg_len, -j, side="left"))  # ranges with length > j
        col = buf[s_sorted[:k] + j]
        h[:k] = h[:k] * thirty_one + col
        np.maximum(high[:k], col, out=high[:k])
    out[order] = h
    units = lengths.copy()
    for r in order[high >= 0x80].tolist():  # non-ASCII is rare: decode just these ranges
        text = bytes(buf[starts[r] : ends[r]]).decode("utf-8", "replace")
        out[r] = java_hash(text) & _MASK
        units[r] = len(text.encode("utf-16-be")) // 2
    prefix = np.asarray(prefix_hash, dtype=np.int64).astype(np.uint32).astype(np.uint64)
    if prefix.any():
        out = (prefix * _powers(int(units.max()) + 1).astype(np.uint64)[units] + out) & _MASK
    return out.astype(np.uint32).view(np.int32)
