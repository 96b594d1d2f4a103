"""Disk blocks for mapped files, and free space.

Store files are written through mmap. A write into a page with no disk block behind it (a
sparse file on a full disk) cannot fail with an error: the kernel sends SIGBUS and the process
dies. So every mapped file gets all its blocks when it is created (``posix_fallocate``, or
zeros written where the filesystem cannot allocate), and a full disk shows as ``DiskFullError``
(ENOSPC) at creation, where the store can refuse the write instead.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from spark_mq.common.errors import DiskFullError

log = logging.getLogger(__name__)

ZERO_CHUNK = 1 << 20  # bytes written per call where fallocate is not supported
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still allocate on ``path``'s filesystem."""
    return shutil.disk_usage(path).free


def disk_full(path: Path, size: int, what: str) -> DiskFullError:
    """The error for ``size`` bytes that did not fit under ``path``, saying what to do."""
    try:
        free = f"{free_bytes(path)} bytes free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(
        f"disk full: cannot allocate {size} bytes for {what} in {path} ({free}); writes are refused until space "
        "is freed (delete files on that disk or grow it), reads and pulls keep working"
    )


def allocate(fd: int, size: int, path: Path, *, empty: bool = True) -> None:
    """Give the file open as ``fd`` its first ``size`` bytes of disk blocks (its size becomes at
    least ``size``). Raises ``DiskFullError`` if the disk cannot hold them. Zeros are written
    instead where fallocate is unsupported, so only into an ``empty`` file: a file with data
    keeps whatever blocks it has then."""
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in _UNSUPPORTED:
                raise
            if empty:
                _write_zeros(fd, size)
        except AttributeError:  # no posix_fallocate on this platform
            if empty:
                _write_zeros(fd, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path.parent, size, path.name) from None
        raise


def make_dirs(path: Path) -> None:
    """``mkdir -p``, with a full disk reported as ``DiskFullError``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(path.parent, 0, f"directory {path.name}") from None
        raise


def is_allocated(fd: int, size: int) -> bool:
    """Whether the file has blocks for ``size`` bytes (false for a sparse one)."""
    return os.fstat(fd).st_blocks * 512 >= size


def _write_zeros(fd: int, size: int) -> None:
    """Allocate by writing zeros over the holes, as ``posix_fallocate`` does where it must emulate."""
    zeros = bytes(ZERO_CHUNK)
    pos = 0
    while pos < size:
        pos += os.pwrite(fd, zeros[: min(ZERO_CHUNK, size - pos)], pos)
