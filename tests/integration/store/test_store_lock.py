"""One process per store directory: the lock file's flock, and its release by the kernel."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from spark_mq.common.errors import StoreLockedError, StoreNotWritableError
from spark_mq.common.message import Message
from spark_mq.store.message_store import MessageStore
from spark_mq.store.results import GetStatus, PutStatus

from ._support import kill, spawn, store_config, wait_for_line


def _start_holder(root: Path, tmp: Path) -> tuple[subprocess.Popen, dict]:
    out = tmp / "holder.out"
    proc = spawn("lock_holder.py", [str(root)], out)
    try:
        ready = wait_for_line(out, proc, lambda line: line.get("ready"))
    except BaseException:
        kill(proc)
        raise
    return proc, ready


def test_second_open_is_refused_while_another_process_holds_the_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc, ready = _start_holder(root, tmp_path)
    try:
        assert ready["pid"] == proc.pid
        store = MessageStore(store_config(root))
        with pytest.raises(StoreLockedError) as err:
            store.start()
        msg = str(err.value)
        assert str(root) in msg, msg
        assert f"pid {proc.pid}" in msg, msg
        # the refused open touched nothing: the holder's abort file is still there
        assert (root / "abort").exists()
        # and a refused store cannot be written to
        with pytest.raises(StoreNotWritableError):
            store.put_message(Message("T", b"x"), 0)
        # refusing again gives the same answer (no fd leaked into a half-held lock)
        with pytest.raises(StoreLockedError):
            MessageStore(store_config(root)).start()
    finally:
        kill(proc)
    assert proc.returncode == -9


def test_lock_is_released_by_the_kernel_when_the_holder_is_killed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc, _ = _start_holder(root, tmp_path)
    try:
        with pytest.raises(StoreLockedError):
            MessageStore(store_config(root)).start()
    finally:
        kill(proc)  # SIGKILL: no clean shutdown, the lock file and the abort file stay behind
    assert (root / "lock").exists() and (root / "abort").exists()

    store = MessageStore(store_config(root)).start()
    try:
        assert store.recovery.abnormal  # the killed holder left its abort file
        assert (root / "lock").read_text().strip() == str(os.getpid())
        res = store.put_message(Message("lockT", b"after the holder died", keys=["k1"]), 0)
        assert res.status == PutStatus.PUT_OK
        got = store.get_messages("lockT", 0, 0, 10)
        assert got.status == GetStatus.FOUND and got.count == 1
    finally:
        store.shutdown()

    # released on a clean shutdown too: a new holder process can take it
    proc, ready = _start_holder(root, tmp_path)
    try:
        assert ready["pid"] == proc.pid
        with pytest.raises(StoreLockedError, match=f"pid {proc.pid}"):
            MessageStore(store_config(root)).start()
    finally:
        kill(proc)
