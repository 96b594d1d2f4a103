"""The epoch file: round trips, RocketMQ's text format, append/truncate rules, atomic replacement
(a crash before the rename leaves the old history) and corrupt files refused with a clear error."""

from __future__ import annotations

import os
import zlib

import pytest

from spark_mq.common.atomic_file import TMP_SUFFIX
from spark_mq.common.errors import EpochFileError
from spark_mq.store.ha.epoch_file import FILE_NAME, EpochEntry, EpochFile


def test_missing_file_is_an_empty_history_and_creates_nothing(tmp_path):
    f = EpochFile(tmp_path / FILE_NAME)
    assert f.entries == () and f.last_epoch == -1
    assert not (tmp_path / FILE_NAME).exists()


def test_append_survives_reopen_in_rocketmq_format(tmp_path):
    path = tmp_path / FILE_NAME
    f = EpochFile(path)
    f.append(7, 7000)
    f.append(8, 8000)
    body = "7-7000\n8-8000\n"
    assert path.read_text() == f"2\n{zlib.crc32(body.encode()) & 0x7FFFFFFF}\n{body}"
    assert EpochFile(path).entries == (EpochEntry(7, 7000), EpochEntry(8, 8000))
    assert EpochFile(path).last_epoch == 8


def test_rocketmq_example_file_reads(tmp_path):
    """The example in RocketMQ's CheckpointFile javadoc, CRC 0 meaning 'not checked'."""
    (tmp_path / FILE_NAME).write_text("2\n0\n7-7000\n8-8000\n")
    assert EpochFile(tmp_path / FILE_NAME).entries == (EpochEntry(7, 7000), EpochEntry(8, 8000))


def test_append_rules(tmp_path):
    f = EpochFile(tmp_path / FILE_NAME)
    f.append(3, 100)
    with pytest.raises(ValueError, match="epochs must grow"):
        f.append(3, 200)
    with pytest.raises(ValueError, match="must not shrink"):
        f.append(4, 50)
    f.append(4, 100)  # epoch 3 wrote nothing: replaced
    assert f.entries == (EpochEntry(4, 100),)
    f.append(6, 300)
    assert EpochFile(tmp_path / FILE_NAME).entries == (EpochEntry(4, 100), EpochEntry(6, 300))


def test_truncate_after_drops_epochs_starting_past_the_offset(tmp_path):
    path = tmp_path / FILE_NAME
    f = EpochFile(path)
    for e, s in [(1, 0), (2, 500), (3, 900)]:
        f.append(e, s)
    assert f.truncate_after(900) == 0  # epoch 3 starts at the cut: it simply wrote nothing
    assert f.truncate_after(899) == 1
    assert f.truncate_after(600) == 0
    assert EpochFile(path).entries == (EpochEntry(1, 0), EpochEntry(2, 500))
    assert f.truncate_after(0) == 1
    assert EpochFile(path).entries == (EpochEntry(1, 0),)


def test_truncate_to_nothing_writes_an_empty_history(tmp_path):
    path = tmp_path / FILE_NAME
    f = EpochFile(path)
    f.append(2, 10)
    f.truncate_after(5)
    assert EpochFile(path).entries == () and path.read_text().startswith("0\n")


def test_a_crash_before_the_rename_leaves_the_old_history(tmp_path):
    """A half-written temporary file (the crash hit while writing it) is never read."""
    path = tmp_path / FILE_NAME
    f = EpochFile(path)
    f.append(1, 0)
    (tmp_path / (FILE_NAME + TMP_SUFFIX)).write_text("2\n12345\n1-0\n2-")
    assert EpochFile(path).entries == (EpochEntry(1, 0),)
    EpochFile(path).append(2, 40)  # the stale temporary file is simply overwritten
    assert EpochFile(path).entries == (EpochEntry(1, 0), EpochEntry(2, 40))


def test_write_goes_through_a_renamed_fsynced_temporary(tmp_path, monkeypatch):
    path = tmp_path / FILE_NAME
    f = EpochFile(path)
    f.append(1, 0)
    calls: list[tuple[str, str]] = []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", str(b))), real_replace(a, b))[1])
    f.append(2, 10)
    assert calls == [("fsync", str(path) + TMP_SUFFIX), ("replace", str(path)), ("fsync", str(tmp_path))]


@pytest.mark.parametrize("text, why", [
    ("", "fewer than the two header lines"),
    ("x\n0\n", "not numbers"),
    ("2\n0\n7-7000\n", "says 2 entries, the file has 1"),
    ("1\n0\n7:7000\n", "is not epoch-startOffset"),
    ("2\n99\n7-7000\n8-8000\n", "CRC32 99"),
    ("2\n0\n8-7000\n7-8000\n", "does not follow"),
    ("2\n0\n7-8000\n8-7000\n", "does not follow"),
])
def test_corrupt_file_raises_a_clear_error_and_is_left_alone(tmp_path, text, why):
    path = tmp_path / FILE_NAME
    path.write_text(text)
    with pytest.raises(EpochFileError, match=why) as e:
        EpochFile(path)
    assert str(path) in str(e.value) and "nothing was changed" in str(e.value)
    assert path.read_text() == text


def test_binary_garbage_is_a_clear_error(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(EpochFileError, match="nothing was changed"):
        EpochFile(path)
