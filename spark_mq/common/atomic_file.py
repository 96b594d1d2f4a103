"""Replacing a small state file atomically, so a crash leaves the old or the new content.

The bytes go to ``<name>.tmp``, are fsynced, renamed over the file, and the directory is fsynced
(the rename itself must survive a crash). The JSON state files and the epoch file use it.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def replace_file(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path``, all or nothing across a crash."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
