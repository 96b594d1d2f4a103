"""All index files of a store: puts go to the newest, queries walk newest to oldest.

Files are named by creation time (``yyyyMMddHHmmssSSS``, as RocketMQ names them) and a new
one starts when the newest is full (an empty newest file may wait for the next put).

Thread-safety: one writer; queries may run concurrently; a lock orders file-list changes
(the writer adds files, retention deletes them).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from spark_mq.common.java_hash import java_hash
from spark_mq.common.lazy_numpy import np
from spark_mq.store.disk_space import make_dirs
from spark_mq.store.index_file import IndexFile, positive_hash
from spark_mq.store.store_paths import store_path

_NAME = re.compile(r"^\d{17}$")


def _time_name(ms: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


class IndexService:
    def __init__(self, directory: Path, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self._last_name = ""
        self._lock = threading.Lock()

    def load(self) -> None:
        if not self.directory.exists():
            return
        names = sorted(p.name for p in self.directory.iterdir() if _NAME.match(p.name))
        self.files = [IndexFile(store_path(self.directory, n), self.slot_num, self.index_num) for n in names]
        self._last_name = names[-1] if names else ""

    def end_phys(self) -> int:
        """Commitlog offset of the newest indexed unit, -1 if none."""
        for f in reversed(self.files):
            if not f.is_empty():
                return f.end_phys
        return -1

    def _open_files(self) -> list[IndexFile]:
        """The newest files that are not full yet, oldest first (puts fill them in that order)."""
        tail: list[IndexFile] = []
        for f in reversed(self.files):
            if f.is_full():
                break
            tail.append(f)
        return tail[::-1]

    def _add_file(self) -> None:
        make_dirs(self.directory)
        name = _time_name(int(time.time() * 1000))
        if name <= self._last_name:  # two files in one millisecond: keep names unique and ordered
            name = str(int(self._last_name) + 1)
        f = IndexFile(store_path(self.directory, name), self.slot_num, self.index_num)
        self._last_name = name
        with self._lock:
            self.files = [*self.files, f]

    def put_batch(self, key_hashes: np.ndarray, phys: np.ndarray, store_ts: np.ndarray) -> None:
        """Index ``key_hashes[i]`` (positive ``topic#key`` hashes) → ``phys[i]``, in order.

        Every file the batch needs is created before any key goes in, so a full disk
        (``DiskFullError``) leaves the index as it was and the same batch can be put again."""
        room = sum(f.index_num - f.index_count for f in self._open_files())
        while room < key_hashes.size:
            self._add_file()
            room += self.index_num - 1  # entry 0 of a file is never used
        done = 0
        for f in self._open_files():
            if done >= key_hashes.size:
                break
            done += f.put_batch(key_hashes[done:], phys[done:], store_ts[done:])

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Candidate commitlog offsets for ``key`` in ``topic``, newest first, deduplicated."""
        h = positive_hash(java_hash(f"{topic}#{key}"))
        out: list[int] = []
        seen: set[int] = set()
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if not f.overlaps(begin, end):
                continue
            for phys in f.query(h, begin, end, max_num):
                if phys not in seen:
                    seen.add(phys)
                    out.append(phys)
        return out[:max_num]

    def delete_files_below(self, commitlog_min: int) -> int:
        """Delete old files whose every entry points below ``commitlog_min`` (never the newest)."""
        gone = 0
        with self._lock:
            while len(self.files) > 1 and self.files[0].end_phys < commitlog_min:
                self.files[0].destroy()
                self.files = self.files[1:]
                gone += 1
        return gone

    def repair_unpublished_heads(self) -> int:
        """After a crash: the newest file's slots left pointing at entries an insert cut short had not
        published (:meth:`IndexFile.repair_unpublished_heads`); only the newest file takes inserts."""
        return self.files[-1].repair_unpublished_heads() if self.files else 0

    def truncate_past(self, phys: int) -> int:
        """Drop every entry pointing at or past commitlog offset ``phys`` (a truncated commitlog):
        files whose first entry does are deleted newest first, the file before them is cut back.
        Entries go in in commitlog order, so only the newest files are looked at. Returns how many
        entries went."""
        gone = 0
        for f in reversed(self.files):
            if f.is_empty():
                continue
            if f.begin_phys < phys:
                gone += f.truncate_past(phys)
                break
            gone += f.index_count - 1
            with self._lock:
                self.files = [g for g in self.files if g is not f]
            f.destroy()
        return gone

    def flush(self) -> None:
        for f in self.files[-2:]:  # older files are full and were flushed when they filled
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
