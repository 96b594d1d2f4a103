"""MappedFile.append: what it writes is what the mapping and the file hold, through pwrite or without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_mq.store import mapped_file
from spark_mq.store.mapped_file import MappedFile

SIZE = 4 << 20


@pytest.mark.parametrize("with_pwrite", [True, False], ids=["pwrite", "mapping"])
def test_appends_read_back_through_the_mapping_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            with_pwrite: bool) -> None:
    monkeypatch.setattr(mapped_file, "_HAS_PWRITE", with_pwrite)
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    pieces = [os.urandom(n) for n in (1, 4095, 4097, 1 << 20, 300)]
    starts = [mf.append(memoryview(p) if i % 2 else p) for i, p in enumerate(pieces)]
    whole = b"".join(pieces)
    assert starts == [sum(map(len, pieces[:i])) for i in range(len(pieces))]
    assert mf.wrote_position == len(whole)
    assert bytes(mf.mv[:len(whole)]) == whole
    mf.flush()
    mf.close()
    with open(tmp_path / "00000000000000000000", "rb") as f:
        assert f.read(len(whole) + 8) == whole + bytes(8)


def test_a_failing_pwrite_leaves_the_append_to_the_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short or failed pwrite (a full disk under a sparse file) loses nothing: the rest is copied."""
    calls = []
    real_pwrite = os.pwrite

    def failing_after_one(fd: int, data: memoryview, pos: int) -> int:
        calls.append(pos)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_pwrite(fd, data[:1000], pos)  # a short write first

    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    monkeypatch.setattr(mapped_file.os, "pwrite", failing_after_one)
    data = os.urandom(5000)
    assert mf.append(data) == 0
    assert calls[:2] == [0, 1000]  # then the zeros written ahead of the mapping copy (failing too)
    assert bytes(mf.mv[:5000]) == data and mf.wrote_position == 5000
    mf.close()


@pytest.mark.parametrize("with_native", [True, False], ids=["native", "numpy"])
def test_zero_from_clears_stale_bytes_past_a_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      with_native: bool) -> None:
    """What recovery leaves past the log's end is zeros, found by the native scan or by numpy alike."""
    if not with_native:
        monkeypatch.setattr(mapped_file.native, "FIRST_NONZERO", None)
    elif mapped_file.native.FIRST_NONZERO is None:
        pytest.skip("the native library is not built")
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    stale = {100: b"\x01", 5000: os.urandom(64) + b"\x07", (1 << 20) + 3: b"\xff", SIZE - 1: b"\x02"}
    for at, data in stale.items():
        mf.mv[at:at + len(data)] = data
    mf.zero_from(200, clean_run=SIZE, chunk=4096)
    assert bytes(mf.mv[100:101]) == b"\x01"  # before the position: kept
    assert bytes(mf.mv[200:]) == bytes(SIZE - 200)
    mf.close()
    assert mf.buf.size == 0  # a closed file's numpy view is empty, made or not
