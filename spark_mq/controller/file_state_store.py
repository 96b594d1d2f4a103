"""The controller's state in one process: records in memory and in one local JSON file; always leader.

For the controller embedded in the NameServer (``enableControllerInNamesrv``, development): there is
one controller, so there is no election, and the file is all that must survive. Every write is
durable before it is acknowledged: the whole file is replaced atomically (``common/atomic_file``:
temp file, fsync, rename, directory fsync), so a crash at any point leaves the old or the new file,
never a torn one. An exclusive ``flock`` on ``<file>.lock`` keeps a second process from opening the same
file (two "always leader" stores on one file would each decide alone).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from spark_mq.common.atomic_file import replace_file
from spark_mq.controller.state_store import NO_RECORD, StaleStateError, StateStoreError

_FORMAT = 1  # the file's "format" field, checked on load


class FileStateStore:
    """A :class:`~spark_mq.controller.state_store.ControllerStateStore` in ``path`` (created on the
    first write)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._mutex = threading.Lock()
        self._address: str | None = None
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._path.with_name(self._path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StateStoreError(f"cannot open the controller state file {self._path}: {e.strerror}") from e
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            raise StateStoreError(f"{self._path} is in use by another process (its .lock file is held): one "
                                  "controller per state file; controllers sharing their state use ZooKeeper") from e
        try:
            self._records = self._load()
        except StateStoreError:
            self._release()
            raise

    def _load(self) -> dict[str, tuple[bytes, int]]:
        try:
            raw = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise StateStoreError(f"cannot read the controller state file {self._path}: {e} "
                                  "(restore it from a backup or remove it to start with no broker sets)") from e
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT or not isinstance(raw.get("records"), dict):
            raise StateStoreError(f"{self._path} is not a controller state file of format {_FORMAT}")
        try:
            return {key: (base64.b64decode(rec["value"], validate=True), int(rec["version"]))
                    for key, rec in raw["records"].items()}
        except (KeyError, TypeError, ValueError) as e:
            raise StateStoreError(f"{self._path} holds a malformed record: {e!r}") from e

    def _save(self, records: dict[str, tuple[bytes, int]]) -> None:
        doc = {"format": _FORMAT,
               "records": {key: {"value": base64.b64encode(value).decode(), "version": version}
                           for key, (value, version) in records.items()}}
        data = json.dumps(doc, indent=1, sort_keys=True).encode()
        try:
            replace_file(self._path, data)
        except OSError as e:
            raise StateStoreError(f"cannot write the controller state file {self._path}: {e.strerror}") from e

    def load_all(self) -> dict[str, tuple[bytes, int]]:
        with self._mutex:
            return dict(self._records)

    def compare_and_set(self, key: str, value: bytes, expected_version: int) -> int:
        with self._mutex:
            current = self._records.get(key)
            version = NO_RECORD if current is None else current[1]
            if version != expected_version:
                raise StaleStateError(f"{key}: the record is at version {version}, not {expected_version}")
            records = {**self._records, key: (bytes(value), version + 1)}
            self._save(records)  # durable before it is acknowledged; memory keeps the old on failure
            self._records = records
            return version + 1

    def campaign(self, address: str, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """The only controller leads at once: ``on_elected`` runs before this returns; ``on_lost``
        never (a failing disk fails writes with StateStoreError instead)."""
        self._address = address
        on_elected()

    def leader_address(self) -> str | None:
        return self._address

    def close(self) -> None:
        self._address = None
        self._release()

    def _release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # drops the flock
            self._lock_fd = -1
