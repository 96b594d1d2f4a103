"""A ControllerStateStore in one local directory, for controllers on one machine (development, tests).

Interim: the project's local-file store (``file_state_store.py``) is written on another branch; this
one stands in so the controller process and the NameServer's embedded controller run today. The
lead replaces it by that store in ``open_state_store`` (``controller/server.py``) and deletes this file.

Records live in ``state.json`` (rewritten whole through a temp file + fsync + rename, so a crash
leaves the old or the new file). The leader is whoever holds an exclusive ``flock`` on ``leader.lock``
(the kernel drops it when the process dies, so a waiting controller takes over) and it writes its
address to ``leader``. This is no consensus across machines: that is what the ZooKeeper/etcd stores do.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from spark_mq.controller.state_store import NO_RECORD, StaleStateError, StateStoreError

log = logging.getLogger(__name__)

CAMPAIGN_POLL_S = 0.2  # how often a waiting controller tries the lock


class LocalStateStore:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StateStoreError(f"cannot create the controller store directory {self.dir}: {e.strerror}") from e
        self._state = self.dir / "state.json"
        self._leader = self.dir / "leader"
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    def load_all(self) -> dict[str, tuple[bytes, int]]:
        try:
            raw = json.loads(self._state.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise StateStoreError(f"cannot read {self._state}: {e}") from e
        return {k: (base64.b64decode(v["value"]), v["version"]) for k, v in raw.items()}

    def compare_and_set(self, key: str, value: bytes, expected_version: int) -> int:
        with self._mutex:
            if self._lock_fd is None:
                raise StaleStateError(f"{key}: this controller does not lead (it holds no lock on {self.dir})")
            records = self.load_all()
            version = records[key][1] if key in records else NO_RECORD
            if version != expected_version:
                raise StaleStateError(f"{key}: version {version}, not {expected_version}")
            records[key] = (value, version + 1)
            self._write({k: {"value": base64.b64encode(v).decode(), "version": n} for k, (v, n) in records.items()},
                        self._state)
            return version + 1

    def campaign(self, address: str, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=self._campaign, args=(address, on_elected), daemon=True,
                                        name="controller-campaign")
        self._thread.start()

    def _campaign(self, address: str, on_elected: Callable[[], None]) -> None:
        fd = os.open(self.dir / "leader.lock", os.O_RDWR | os.O_CREAT, 0o644)
        while not self._stop.is_set():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._stop.wait(CAMPAIGN_POLL_S)
                continue
            self._write_text(address, self._leader)
            with self._mutex:
                self._lock_fd = fd
            log.info("controller %s leads (lock on %s)", address, self.dir / "leader.lock")
            on_elected()
            return
        os.close(fd)

    def leader_address(self) -> str | None:
        if self._lock_fd is None:
            fd = os.open(self.dir / "leader.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return None  # nobody holds it: no leader (ours goes with the fd)
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
        try:
            return self._leader.read_text().strip() or None
        except FileNotFoundError:
            return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._mutex:
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    self._leader.unlink()
                os.close(self._lock_fd)
                self._lock_fd = None

    def _write(self, obj: object, path: Path) -> None:
        self._write_text(json.dumps(obj, sort_keys=True), path)

    @staticmethod
    def _write_text(text: str, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise StateStoreError(f"cannot write {path}: {e.strerror}") from e
