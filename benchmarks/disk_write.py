"""Raw sequential write bandwidth of the disk under ``--dir``: the ceiling for the store.

Three ways, one large file each (default 1 GiB, 4 MiB chunks of random bytes):

* ``os.write``: write every chunk, then one ``fdatasync``;
* ``mmap``: a sparse file of the full size (``ftruncate``) mapped and filled by slice
  assignment (page faults included), then one ``fdatasync``;
* ``mmap allocated``: the same into a file whose blocks ``posix_fallocate`` allocated first,
  what a store ``MappedFile`` does since a full disk must fail at creation, not with SIGBUS
  on a page fault; the fallocate counts in both times.

MB/s counts the time to durable (write + fdatasync); the page-cache-only rate (before the
fdatasync) is shown alongside. The file is deleted afterwards.

    .venv/bin/python benchmarks/disk_write.py [--size-mb 1024] [--chunk-mb 4] [--quick]
"""

from __future__ import annotations

import mmap
import os
from functools import partial
from pathlib import Path
from typing import Any

from _common import MB, MiB, Timer, dump_json, machine_line, parser, print_table, rate, scratch_dir


def _write_file(path: Path, size: int, chunk: bytes) -> tuple[float, float]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with Timer() as t_all:
            with Timer() as t_write:
                left = size
                view = memoryview(chunk)
                while left > 0:
                    n = os.write(fd, view[: min(left, len(chunk))])
                    left -= n
            os.fdatasync(fd)
    finally:
        os.close(fd)
    return t_write.seconds, t_all.seconds


def _write_mmap(path: Path, size: int, chunk: bytes, allocate: bool) -> tuple[float, float]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with Timer() as t_alloc:
            if allocate:
                os.posix_fallocate(fd, 0, size)
            else:
                os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
        try:
            with Timer() as t_all:
                with Timer() as t_write:
                    pos = 0
                    step = len(chunk)
                    while pos < size:
                        end = min(size, pos + step)
                        mm[pos:end] = chunk[: end - pos]
                        pos = end
                os.fdatasync(fd)
        finally:
            mm.close()
    finally:
        os.close(fd)
    return t_alloc.seconds + t_write.seconds, t_alloc.seconds + t_all.seconds


WAYS = {"write": _write_file, "mmap": partial(_write_mmap, allocate=False),
        "mmap_allocated": partial(_write_mmap, allocate=True)}


def measure(directory: Path, size_bytes: int = 1 << 30, chunk_bytes: int = 4 * MiB) -> dict[str, Any]:
    """Write ``size_bytes`` every way under ``directory``; returns MB/s figures."""
    chunk = os.urandom(chunk_bytes)
    out: dict[str, Any] = {"size_bytes": size_bytes, "chunk_bytes": chunk_bytes}
    with scratch_dir(directory, "bench-disk-") as d:
        for name, fn in WAYS.items():
            path = d / f"{name}.bin"
            t_write, t_all = fn(path, size_bytes, chunk)
            path.unlink()
            out[name] = {
                "seconds": t_all,
                "mb_s": rate(size_bytes / MB, t_all),
                "page_cache_mb_s": rate(size_bytes / MB, t_write),
                "fdatasync_seconds": t_all - t_write,
            }
    return out


def table_rows(res: dict[str, Any]) -> list[list[Any]]:
    return [
        [f"sequential {name.replace('_', ' ')} + fdatasync", res[name]["mb_s"], res[name]["page_cache_mb_s"],
         res[name]["fdatasync_seconds"], res[name]["seconds"]]
        for name in WAYS
    ]


COLUMNS = ("disk", "MB/s (durable)", "MB/s (page cache)", "fdatasync s", "total s")


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=1024, help="file size in MiB")
    p.add_argument("--chunk-mb", type=int, default=4, help="write size in MiB")
    a = p.parse_args()
    size = (16 if a.quick else a.size_mb) * MiB
    res = measure(a.dir, size, a.chunk_mb * MiB)
    print(machine_line(a.dir))
    print_table(f"raw sequential write, {size // MiB} MiB in {a.chunk_mb} MiB chunks under {a.dir}",
                COLUMNS, table_rows(res))
    dump_json(a.json, {"machine": machine_line(a.dir), "disk": res})


if __name__ == "__main__":
    main()
