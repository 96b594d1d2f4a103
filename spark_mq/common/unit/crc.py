"""BODYCRC's CRC-32: ISA-L's SIMD ``crc32`` (the ``isal`` package) when installed, zlib's otherwise.

Why: the CRC of every body is the largest single cost of encoding a batch of 1 KiB bodies
(zlib's table-driven loop: ~0.5 µs a KiB; ISA-L's folding: ~0.06 µs). Both compute the same
IEEE CRC-32 as ``zlib.crc32`` bit for bit (tests/unit/common/unit/test_crc.py checks both), so a
store written with one is checked with the other.

Thread-safety: pure functions.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable

from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit.layout import CRC_MASK

try:
    from isal.isal_zlib import crc32 as _isal_crc32
except ImportError:  # optional: the pure zlib path below is the fallback
    _isal_crc32 = None

Crc32 = Callable[[bytes | memoryview], int]
ZLIB_CRC32: Crc32 = zlib.crc32
FAST_CRC32: Crc32 = _isal_crc32 or zlib.crc32  # the fastest CRC-32 installed


def body_crcs(bodies: Iterable[bytes | memoryview], count: int, crc32: Crc32 | None = None) -> np.ndarray:
    """BODYCRC of each of ``count`` bodies (int64, masked as RocketMQ's ``UtilAll.crc32``), with
    ``crc32`` or else :data:`FAST_CRC32`."""
    return np.fromiter(map(crc32 or FAST_CRC32, bodies), dtype=np.int64, count=count) & CRC_MASK


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC of one body, with :data:`FAST_CRC32`."""
    return FAST_CRC32(body) & CRC_MASK
