"""Copying a stopped broker's whole store directory to an empty one: how a master whose store was
lost is rebuilt from its slave (docs/operations.md, "Master and slave (replication)").

A slave's commitlog is byte-identical to its master's up to where it stands, and its consume queues,
index and config (topics, subscription groups, offsets: copied from the master) are its own, so its
store is a master's store. The copy holds the source's store lock for its whole run: it must not be
written while it is read (a torn commitlog tail would leave the rebuilt master short of its slave),
and it copies into a sibling directory renamed into place at the end (which fails if a broker has
started on the target meanwhile: its lock file makes it non-empty), so a copy that died halfway
leaves no target that looks like a store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from spark_mq.common.errors import StoreError
from spark_mq.store.lock_file import StoreLock
from spark_mq.store.store_paths import COMMITLOG_DIR, LOCK_FILE, store_path

PARTIAL_SUFFIX = ".copying"


def copy_store(source: Path, target: Path) -> int:
    """Copy the store at ``source`` (no broker running on it) to ``target`` (absent or an empty
    directory); returns the bytes of commitlog copied. Raises StoreError, touching nothing, when
    either is in use, the source has no commitlog, or the target holds anything."""
    if not store_path(source, COMMITLOG_DIR).is_dir():
        raise StoreError(f"{source} is not a broker's store directory (it has no {COMMITLOG_DIR}/)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise StoreError(f"{target} is not empty: copy into an absent or empty directory (move the old store "
                         f"away first; nothing was copied)")
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    if partial.exists():
        shutil.rmtree(partial)  # what an earlier copy that died left
    source_lock = StoreLock(store_path(source, LOCK_FILE))
    source_lock.acquire()  # StoreLockedError (a StoreError) names the broker running on it
    try:
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns(LOCK_FILE))
        try:
            os.replace(partial, target)  # replaces an empty directory, never a non-empty one
        except OSError as e:
            shutil.rmtree(partial)
            raise StoreError(f"cannot move the copy into {target} (did a broker start on it?): {e}") from e
    finally:
        source_lock.release()
    return sum(p.stat().st_size for p in store_path(target, COMMITLOG_DIR).iterdir())
