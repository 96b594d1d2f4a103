"""BODYCRC: ISA-L's CRC-32 (when installed) and zlib's give the same value bit for bit, and units
encoded with either are found intact by the checker using either."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from spark_mq.common.message import MessageBatch
from spark_mq.common.unit import crc
from spark_mq.common.unit.chain import follow_chain
from spark_mq.common.unit.check import unit_faults
from spark_mq.common.unit.encode import encode_batch

HOST = bytes(8)


def _bodies() -> list[bytes]:
    rng = random.Random(5)
    return [b"", b"a", bytes(4096), *(rng.randbytes(rng.randrange(2000)) for _ in range(200))]


def test_the_fast_crc_is_zlibs_bit_for_bit():
    if crc.FAST_CRC32 is zlib.crc32:
        pytest.skip("isal is not installed: zlib is the only CRC-32 here")
    bodies = _bodies()
    assert [crc.FAST_CRC32(b) for b in bodies] == [zlib.crc32(b) for b in bodies]
    view = memoryview(b"xx" + bodies[-1])[2:]  # a slice of a mapped file is a memoryview
    assert crc.FAST_CRC32(view) == zlib.crc32(bodies[-1])


@pytest.mark.parametrize("crc32", [crc.ZLIB_CRC32, crc.FAST_CRC32], ids=["zlib", "fast"])
def test_units_encoded_with_either_crc_check_intact(monkeypatch, crc32):
    bodies = _bodies()
    assert crc.body_crcs(bodies, len(bodies), crc32).tolist() == [zlib.crc32(b) & 0x7FFFFFFF for b in bodies]
    monkeypatch.setattr(crc, "FAST_CRC32", crc32)  # with zlib: what a store without isal encodes and checks with
    data = encode_batch(MessageBatch.of("T", 0, bodies), 0, 0, 1, HOST).data
    data += encode_batch(MessageBatch.of("T", 0, bodies[:1]), len(data), len(bodies), 1, HOST).data  # a lone unit
    chain = follow_chain(memoryview(data), 0, len(data))
    assert chain.end == len(data) and chain.starts.size == len(bodies) + 1
    faults = unit_faults(memoryview(data), chain.starts, chain.end, 0, check_crc=True)
    assert not faults.damaged.any()
    corrupt = bytearray(data)
    corrupt[int(chain.starts[3]) + 88] ^= 1  # a bit of the first byte of a body flipped
    faults = unit_faults(memoryview(bytes(corrupt)), chain.starts, chain.end, 0, check_crc=True)
    assert np.flatnonzero(faults.damaged).tolist() == [3]
