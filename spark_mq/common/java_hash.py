"""Java's ``String.hashCode``, scalar and vectorised.

RocketMQ stores ``tags.hashCode()`` in consume queue entries and hashes ``topic#key`` with it
in index files, so ours must match Java bit for bit: ``h = 31*h + c`` over UTF-16 code units,
wrapping at 32 bits. The vectorised form hashes many byte ranges of one buffer at once using
uint32 arithmetic, which wraps exactly like Java's int.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from functools import cache

from spark_mq.common.buffers import at_every_byte
from spark_mq.common.lazy_numpy import np

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


_POWER_TABLES: dict[int, np.ndarray] = {}  # base -> its powers mod 2**32, grown on demand (``_power_table``)
_INV31 = pow(31, -1, 1 << 32)  # 31 is odd, so invertible modulo 2**32
PREFIX_SUM_MAX_BYTES = 4 << 20  # buffers up to this size may be hashed by prefix sums (tables of 4 B a byte)
_MATRIX_CELLS = 1 << 20  # bytes per hashing matrix
_TRIANGLE_WIDTH = 256  # ranges up to this long are masked with rows of one precomputed triangle


@cache
def _triangle() -> np.ndarray:
    """Row L has its last L columns set (made on first use)."""
    return np.arange(_TRIANGLE_WIDTH) >= (_TRIANGLE_WIDTH - np.arange(_TRIANGLE_WIDTH + 1))[:, None]


def _power_table(base: int, n: int) -> np.ndarray:
    """base**i mod 2**32 for i in [0, n), from a table per base grown by doubling (made on first use)."""
    table = _POWER_TABLES.get(base)
    if table is None or table.size < n:
        p = np.full(max(n, 2 * (1 if table is None else table.size)), base, dtype=np.uint32)
        p[0] = 1
        table = _POWER_TABLES[base] = np.cumprod(p, dtype=np.uint32)
    return table[:n]


def _powers(n: int) -> np.ndarray:
    """31**i mod 2**32 for i in [0, n)."""
    return _power_table(31, n)


def _inverse_powers(n: int) -> np.ndarray:
    """31**-i mod 2**32 for i in [0, n)."""
    return _power_table(_INV31, n)


class PrefixSumHasher:
    """``java_hashes`` of many ranges of one ASCII buffer from one prefix sum over it.

    Why: ``S[i] = sum(buf[j] * 31**-j for j < i)`` (mod 2**32, where 31 has an inverse) makes the
    hash of ``buf[s:e]`` ``31**(e-1) * (S[e] - S[s])``: a few calls over the buffer once, then a
    few gathers per set of ranges, whatever their lengths. For buffers that are mostly ranges to
    hash (packed property strings: tags, keys and UNIQ_KEY of a dispatch pass) this is several
    times cheaper than masking a matrix of every range's bytes. The caller checks that the buffer
    is ASCII (no byte >= 0x80: one byte is one UTF-16 unit) and at most ``PREFIX_SUM_MAX_BYTES``.
    """

    def __init__(self, buf: np.ndarray) -> None:
        n = buf.size
        self._sums = np.empty(n + 1, dtype=np.uint32)
        self._sums[0] = 0
        weighted = self._sums[1:]  # the sums are taken in place: one array, no temporaries
        np.multiply(buf, _inverse_powers(n), out=weighted, dtype=np.uint32)
        np.cumsum(weighted, out=weighted)
        self._powers = _powers(n + 1)

    def hashes(self, starts: np.ndarray, ends: np.ndarray, prefix_hash: int | np.ndarray = 0) -> np.ndarray:
        """What ``java_hashes(buf, starts, ends, prefix_hash)`` gives, as int32."""
        sums, powers = self._sums, self._powers
        out = sums[ends] - sums[starts]
        out *= powers[ends - (ends > 0)]  # 31**(e-1); an empty range at 0 is 0 times anything
        if np.isscalar(prefix_hash):
            if prefix_hash:
                out += powers[ends - starts] * np.uint32(int(prefix_hash) & _MASK)
        else:
            out += np.asarray(prefix_hash, dtype=np.int64).astype(np.uint32) * powers[ends - starts]
        return out.view(np.int32)


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
    high = np.zeros(n, dtype=bool)  # ranges holding a non-ASCII byte
    for rows, width in _chunks(lengths):
        out[rows], high[rows] = _hash_rows(buf, starts[rows], ends[rows], width)
    units = lengths.copy()
    for r in np.flatnonzero(high).tolist():  # non-ASCII is rare: decode just these ranges
        text = bytes(buf[starts[r] : ends[r]]).decode("utf-8", "replace")
        out[r] = java_hash(text) & _MASK
        units[r] = len(text.encode("utf-16-be")) // 2
    prefix = np.asarray(prefix_hash, dtype=np.int64).astype(np.uint32).astype(np.uint64)
    if prefix.any():
        out = (prefix * _powers(int(units.max()) + 1).astype(np.uint64)[units] + out) & _MASK
    return out.astype(np.uint32).view(np.int32)


def _chunks(lengths: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Rows of ranges (shortest first) in groups whose (rows x longest length) matrix stays under
    ``_MATRIX_CELLS``, with that longest length: usually one group."""
    order = np.argsort(lengths, kind="stable")
    by_len = lengths[order]
    out: list[tuple[np.ndarray, int]] = []
    i, n = 0, order.size
    while i < n:
        cells = np.arange(1, n - i + 1) * by_len[i:]
        j = i + max(int(np.searchsorted(cells, _MATRIX_CELLS, side="right")), 1)
        out.append((order[i:j], int(by_len[j - 1])))
        i = j
    return out


def _hash_rows(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of ranges of at most ``width`` bytes (ASCII assumed) and whether each holds a
    non-ASCII byte. The ``width`` bytes ending each range are gathered as one opaque record (a
    memcpy each), the bytes before the range zeroed (leading zeros add nothing), and each row's
    dot product with the powers 31**(width-1-j) taken in uint32 by ``einsum`` (its own loops: no
    BLAS threads, and far faster than numpy's per-row reductions). A few calls instead of a
    Horner step per byte position."""
    n = starts.size
    if width == 0:
        return np.zeros(n, dtype=np.uint32), np.zeros(n, dtype=bool)
    if int(ends.min()) < width:  # a range near the buffer's start: room for its leading zeros
        buf, starts, ends = np.concatenate((np.zeros(width, dtype=np.uint8), buf)), starts + width, ends + width
    cells = at_every_byte(buf, f"V{width}")[ends - width].view(np.uint8).reshape(n, width)
    lengths = ends - starts
    if width <= _TRIANGLE_WIDTH:  # row L of the triangle: the last L of its columns set
        cells *= _triangle()[lengths, _TRIANGLE_WIDTH - width:]
    else:
        cells *= np.arange(width) >= (width - lengths)[:, None]
    hashes = np.einsum("ij,j->i", cells, _powers(width)[::-1], dtype=np.uint32)  # wraps as Java's int
    non_ascii = cells.max(axis=1) >= 0x80 if cells.max() >= 0x80 else np.zeros(n, dtype=bool)
    return hashes, non_ascii
