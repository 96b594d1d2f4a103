"""Java's ``String.hashCode``, scalar and vectorised.

RocketMQ stores ``tags.hashCode()`` in consume queue entries and hashes ``topic#key`` with it
in index files, so ours must match Java bit for bit: ``h = 31*h + c`` over UTF-16 code units,
wrapping at 32 bits. The vectorised form hashes many byte ranges of one buffer at once using
uint32 arithmetic, which wraps exactly like Java's int.
"""

from __future__ import annotations

import numpy as np

_MASK = 0xFFFFFFFF


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash(s: str) -> int:
    """``s.hashCode()`` as a signed 32-bit int."""
    units = np.frombuffer(s.encode("utf-16-be"), dtype=">u2").astype(np.uint32)
    if units.size == 0:
        return 0
    powers = _powers(units.size)[::-1]
    return _to_signed(int(np.sum(units * powers, dtype=np.uint32)))


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
    """Hashes of ``prefix + buf[starts[i]:ends[i]]`` (UTF-8 ranges) as int32, one numpy pass.

    ``prefix_hash`` is the Java hash of a string to put before every range (one, or one per
    range), folded in as ``prefix * 31**len + hash``.

    ASCII ranges are hashed vectorised; the rare range holding non-ASCII bytes is decoded
    and hashed on its own so that UTF-16 surrogates count as Java counts them.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = starts.size
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out.view(np.int32)
    lengths = ends - starts
    total = int(lengths.sum())
    max_len = int(lengths.max())
    pw = _powers(max_len + 1)
    if total:
        seg_start = np.zeros(n, dtype=np.int64)
        np.cumsum(lengths[:-1], out=seg_start[1:])
        idx = np.repeat(starts - seg_start, lengths) + np.arange(total, dtype=np.int64)
        chars = buf[idx].astype(np.uint32)
        # position of each byte counted from its range's end: exponent of 31
        from_end = np.repeat(ends, lengths) - 1 - idx
        contrib = chars * pw[from_end]
        nonempty = lengths > 0
        sums = np.add.reduceat(contrib, seg_start[nonempty], dtype=np.uint32)
        out[nonempty] = sums
        high = np.flatnonzero(np.maximum.reduceat(chars, seg_start[nonempty]) >= 0x80)
        if high.size:
            rows = np.flatnonzero(nonempty)[high]
            for r in rows.tolist():  # non-ASCII is rare: decode just these ranges
                text = bytes(buf[starts[r] : ends[r]]).decode("utf-8", "replace")
                out[r] = java_hash(text) & _MASK
                lengths[r] = len(text.encode("utf-16-be")) // 2
    prefix = np.asarray(prefix_hash, dtype=np.int64).astype(np.uint32)
    if prefix.any():
        out = (prefix * _powers(int(lengths.max()) + 1)[lengths] + out).astype(np.uint32)
    return out.view(np.int32)
