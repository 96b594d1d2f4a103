"""MappedFile.append: what it writes is what the mapping and the file hold, through pwrite, a copy into
pages faulted in ahead, or a plain copy; and what a writer puts at ``write_address`` is there too."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from spark_mq.store import mapped_file
from spark_mq.store.mapped_file import MappedFile

SIZE = 4 << 20


@pytest.mark.parametrize("way", ["pwrite", "mapping", "prefaulted"])
def test_appends_read_back_through_the_mapping_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            way: str) -> None:
    """pwrite: every append by pwrite (a patched write_address declines); mapping: no pwrite at all;
    prefaulted: copies into pages zeroed ahead 8 KiB at a time (many times over)."""
    monkeypatch.setattr(mapped_file, "_HAS_PWRITE", way != "mapping")
    monkeypatch.setattr(mapped_file, "PREFAULT_BYTES", 8192)
    if way == "pwrite":
        monkeypatch.setattr(MappedFile, "write_address", lambda self, size: None)
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    pieces = [os.urandom(n) for n in (1, 4095, 4097, 1 << 20, 300)]
    starts = [mf.append(memoryview(p) if i % 2 else p) for i, p in enumerate(pieces)]
    whole = b"".join(pieces)
    assert starts == [sum(map(len, pieces[:i])) for i in range(len(pieces))]
    assert mf.wrote_position == len(whole)
    assert bytes(mf.mv[:len(whole)]) == whole
    assert (mf._prefaulted >= len(whole)) == (way == "prefaulted")
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
    assert calls == [0, 1000, 0]  # the zeros ahead: short, then failing; then the append's own pwrite fails
    assert bytes(mf.mv[:5000]) == data and mf.wrote_position == 5000
    mf.close()


def test_bytes_written_at_the_write_address_follow_the_written_ones(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """What the native encoder does: fill the pages at ``write_address``, then count them as written
    (the zeros written ahead, 32 KiB at a time, never reach a written byte). A write larger than that
    is left to ``append`` (its ``pwrite``)."""
    monkeypatch.setattr(mapped_file, "PREFAULT_BYTES", 32768)
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE)
    head = os.urandom(5000)
    mf.append(head)
    pieces = [os.urandom(n) for n in (3, 20000, 8192)]
    for piece in pieces:
        address = mf.write_address(len(piece))
        assert address is not None
        ctypes.memmove(address, piece, len(piece))
        mf.wrote(len(piece))
    assert mf.write_address(32769) is None
    whole = head + b"".join(pieces)
    assert mf.wrote_position == len(whole)
    mf.flush()
    mf.close()
    with open(tmp_path / "00000000000000000000", "rb") as f:
        assert f.read(len(whole) + 8) == whole + bytes(8)
