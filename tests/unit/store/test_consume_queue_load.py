"""``ConsumeQueue.load`` finds a file's written entries by a search, not a scan of every entry
(a restart maps every queue's files): checked against what was written, on files large
enough for the search's chunks and steps to matter."""

from __future__ import annotations

import numpy as np
import pytest

from spark_mq.store.consume_queue import _SCAN_CHUNK, ENTRY_SIZE, ConsumeQueue

PER_FILE = 3 * _SCAN_CHUNK + 123


def entries(first: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    phys = 5000 + 100 * np.arange(first, first + n, dtype=np.int64)
    return phys, np.full(n, 100, dtype=np.int64), np.arange(n, dtype=np.int64)


def reopened(directory, start: int, count: int) -> ConsumeQueue:
    cq = ConsumeQueue("T", 0, directory, PER_FILE * ENTRY_SIZE)
    cq.load()
    if count:
        cq.put_batch(start, *entries(start, count))
    cq.flush()
    cq.close()
    again = ConsumeQueue("T", 0, directory, PER_FILE * ENTRY_SIZE)
    again.load()
    return again


@pytest.mark.parametrize("start", [0, 1, _SCAN_CHUNK - 1, _SCAN_CHUNK + 5, 2 * PER_FILE + 5 * _SCAN_CHUNK // 2])
@pytest.mark.parametrize("count", [1, 2, _SCAN_CHUNK, PER_FILE - 7, PER_FILE, 2 * PER_FILE + 1])
def test_load_finds_min_and_max_offsets(tmp_path, start, count):
    cq = reopened(tmp_path, start, count)
    assert (cq.min_offset, cq.max_offset) == (start, start + count)
    got = cq.get(start, count)
    assert got["phys"].tolist() == entries(start, count)[0].tolist()
    # appends continue right after the last entry found
    cq.put_batch(start + count, *entries(start + count, 3))
    assert cq.max_offset == start + count + 3
    assert cq.get(start + count - 1, 4)["phys"].tolist() == entries(start + count - 1, 4)[0].tolist()
    cq.close()


def test_load_after_truncate_and_a_file_of_zeros(tmp_path):
    cq = reopened(tmp_path, 0, PER_FILE + 10)
    cq.truncate(PER_FILE)  # the second file is now all zeros
    cq.flush()
    cq.close()
    again = reopened(tmp_path, 0, 0)
    assert (again.min_offset, again.max_offset) == (0, PER_FILE)
    again.close()


def test_truncate_past_and_first_offset_at_or_after(tmp_path):
    cq = reopened(tmp_path, 10, 50)
    phys = entries(10, 50)[0]
    cq.truncate_past(int(phys[-1]) + 100)  # every unit inside: nothing dropped
    assert cq.max_offset == 60
    cq.truncate_past(int(phys[-1]) + 99)  # the last unit ends past the commitlog
    assert cq.max_offset == 59
    assert cq.first_offset_at_or_after(0) == 10
    assert cq.first_offset_at_or_after(int(phys[0])) == 10
    assert cq.first_offset_at_or_after(int(phys[0]) + 1) == 11
    assert cq.first_offset_at_or_after(int(phys[30])) == 40
    assert cq.first_offset_at_or_after(10**12) == 59
    cq.close()
