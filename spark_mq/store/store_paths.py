"""Every path under the store root is built by ``store_path``, and none leaves the root.

Names become directories here (``consumequeue/<topic>/<queueId>``), and a directory is what
``rmtree`` deletes when a topic goes. The broker checks names against the naming rule before
they reach the store; this is the store's own guard, whoever calls it: each part must be one
plain path component (not empty, ``.`` or ``..``; no ``/``, ``\\`` or NUL), and the joined path,
normalised, must lie inside the normalised root, or ``StorePathError`` is raised before anything
is touched. The check is lexical on purpose: a symlink an operator placed inside the store (a
commitlog on another disk) is followed as intended, and no request can create a symlink.

Layout: ``commitlog/``, ``consumequeue/<topic>/<queueId>/``, ``index/``, ``config/*.json``,
``checkpoint``, ``abort`` and ``lock``; timer messages add ``timerlog/`` and ``timerwheel``.
"""

from __future__ import annotations

import os
from pathlib import Path

from spark_mq.common.errors import StorePathError

COMMITLOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
TIMER_LOG_DIR = "timerlog"  # timer messages: RocketMQ's names
TIMER_WHEEL_FILE = "timerwheel"
_SEPARATORS = frozenset({"/", "\\", "\0", os.sep, os.altsep or "/"})


def store_path(root: Path, *parts: str) -> Path:
    """``root/parts[0]/parts[1]/...``; raises StorePathError unless every part is a single plain
    component and the result lies inside ``root``."""
    for part in parts:
        if part in ("", ".", "..") or not _SEPARATORS.isdisjoint(part):
            raise StorePathError(f"{part!r} is not a plain file name: refused to build a path under {root}")
    path = Path(root, *parts)
    base = os.path.normpath(os.path.abspath(root))
    if os.path.commonpath([base, os.path.normpath(os.path.abspath(path))]) != base:
        raise StorePathError(f"{path} is not inside the store root {root}: refused")
    return path
