"""Vectorised helpers over many ``[start, end)`` ranges of one byte buffer.

Ranges must be disjoint and given in buffer order (as message fields are). Instead of
gathering every byte of every range, these scan the whole covering region once with a numpy
compare and then assign each hit to its range with ``searchsorted``: a few passes over the
bytes, whatever the number of ranges. :func:`gather_ranges` copies ranges out back to back
with one byte mask over the region, likewise.
"""

from __future__ import annotations

from spark_mq.common.lazy_numpy import np


def positions_in_ranges(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, byte: int
) -> tuple[np.ndarray, np.ndarray]:
    """(position, range index) of every occurrence of ``byte`` inside the ranges."""
    if starts.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    lo, hi = int(starts[0]), int(ends.max())
    pos = np.flatnonzero(buf[lo:hi] == byte) + lo
    row = np.searchsorted(starts, pos, side="right") - 1
    keep = pos < ends[row]
    return pos[keep], row[keep]


def split_ranges(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split ranges on ``sep``: (range index, token start, token end) of non-empty tokens.

    Ranges with ``start < 0`` are absent and yield nothing.
    """
    present = np.flatnonzero(starts >= 0)
    s, e = starts[present], ends[present]
    cuts, _ = positions_in_ranges(buf, s, e, sep)
    if not cuts.size:  # no separator (one key per message, say): the non-empty ranges are the tokens
        keep = e > s
        return present[keep], s[keep], e[keep]
    tok_start = np.sort(np.concatenate((s, cuts + 1)))
    tok_end = np.sort(np.concatenate((cuts, e)))
    keep = tok_end > tok_start
    tok_start, tok_end = tok_start[keep], tok_end[keep]
    rows = present[np.searchsorted(s, tok_start, side="right") - 1]
    return rows, tok_start, tok_end


def gather_ranges(buf: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The ranges ``[starts[i], starts[i] + sizes[i])`` of ``buf`` back to back (a new array), in one pass:
    a byte mask of alternating gaps and ranges over the region, rather than an index per byte gathered
    (seven times slower)."""
    if starts.size == 0:
        return np.zeros(0, dtype=buf.dtype)
    ends = starts + sizes
    lengths = np.empty(2 * starts.size, dtype=np.int64)
    lengths[0::2] = starts - np.concatenate(([0], ends[:-1]))
    lengths[1::2] = sizes
    pattern = np.zeros(2 * starts.size, dtype=bool)
    pattern[1::2] = True
    return buf[:int(ends[-1])][np.repeat(pattern, lengths)]
