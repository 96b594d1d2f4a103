"""One hash index file: ``topic#key`` → commitlog offsets (RocketMQ ``IndexFile``).

Layout, big-endian::

    header (40)  begin timestamp (8) | end timestamp (8) | begin phys (8) | end phys (8)
                 | used slot count (4) | index count (4)
    slots        slot_num x int32: number of the newest entry whose key hashes to the slot
    entries      index_num x 20: key hash (4) | phys offset (8) | seconds since begin (4)
                 | previous entry in the same slot (4)

Entry 0 is never used (a slot value of 0 means empty). Entries of one slot form a chain
from newest to oldest; a batch is inserted in one pass of the native library
(:data:`~spark_mq.common.unit.native.INDEX_PUT`), or with numpy, chains and all: the same bytes.

Thread-safety: one writer; queries may run concurrently and see a consistent prefix.
"""

from __future__ import annotations

from functools import cache, cached_property
from pathlib import Path

from spark_mq.common.lazy_numpy import np
from spark_mq.common.unit import native
from spark_mq.common.unit.layout import fields_struct
from spark_mq.store.mapped_file import MappedFile

HEADER_FIELDS = (("begin_timestamp", ">i8"), ("end_timestamp", ">i8"), ("begin_phys", ">i8"), ("end_phys", ">i8"),
                 ("slot_count", ">i4"), ("index_count", ">i4"))
_HEADER_AT = {name: (fields_struct(HEADER_FIELDS[:i]).size, fields_struct(HEADER_FIELDS[i : i + 1]))
              for i, (name, _) in enumerate(HEADER_FIELDS)}  # name -> (offset, struct)
HEADER_SIZE = fields_struct(HEADER_FIELDS).size  # 40
SLOT_SIZE = 4
ENTRY_FIELDS = (("key_hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"), ("prev", ">i4"))
ENTRY_SIZE = fields_struct(ENTRY_FIELDS).size  # 20
_ENTRY_PHYS = fields_struct(ENTRY_FIELDS, only=("phys",)).unpack_from  # an entry's phys alone
INVALID_INDEX = 0


@cache
def _entry_record() -> np.dtype:
    """ENTRY_FIELDS as a numpy record (made on first use)."""
    return np.dtype(list(ENTRY_FIELDS))


def index_file_size(slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


def positive_hashes(java_hashes: np.ndarray) -> np.ndarray:
    """RocketMQ's ``indexKeyHashMethod``: abs(hashCode), with Integer.MIN_VALUE mapped to 0."""
    h = java_hashes.astype(np.int64)
    h = np.abs(h)
    h[h > 0x7FFFFFFF] = 0
    return h.astype(np.int32)


def positive_hash(java_hash: int) -> int:
    """``positive_hashes`` of one signed hash."""
    h = abs(java_hash)
    return 0 if h > 0x7FFFFFFF else h


class IndexFile:
    def __init__(self, path: Path, slot_num: int, index_num: int) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self._mf = MappedFile(path, index_file_size(slot_num, index_num), file_from_offset=0)
        self._entries_at = HEADER_SIZE + slot_num * SLOT_SIZE
        if self.index_count == 0:
            self.set_header("index_count", 1)  # entry 0 is the "empty" sentinel

    # the header by ``struct`` (a start reads it without numpy); slots and entries as numpy views, made on first use
    def header(self, name: str) -> int:
        """Header field ``name`` (HEADER_FIELDS)."""
        at, field = _HEADER_AT[name]
        return field.unpack_from(self._mf.mv, at)[0]

    def set_header(self, name: str, value: int) -> None:
        at, field = _HEADER_AT[name]
        field.pack_into(self._mf.mv, at, int(value))

    @cached_property
    def slots(self) -> np.ndarray:
        return self._mf.buf[HEADER_SIZE : self._entries_at].view(">i4")

    @cached_property
    def entries(self) -> np.ndarray:
        return self._mf.buf[self._entries_at :].view(_entry_record())

    @property
    def index_count(self) -> int:
        return self.header("index_count")

    @property
    def begin_timestamp(self) -> int:
        return self.header("begin_timestamp")

    @property
    def end_timestamp(self) -> int:
        return self.header("end_timestamp")

    @property
    def begin_phys(self) -> int:
        return self.header("begin_phys")

    @property
    def end_phys(self) -> int:
        return self.header("end_phys")

    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_empty(self) -> bool:
        return self.index_count <= 1

    def put_batch(self, key_hashes: np.ndarray, phys: np.ndarray, store_ts: np.ndarray) -> int:
        """Insert as many of the keys as fit; returns how many went in.

        ``key_hashes`` are already positive (``positive_hashes``). Within the batch, an entry
        chains to the previous entry of the same slot in the batch, or to the slot's old head.
        """
        count = self.index_count
        k = min(key_hashes.size, self.index_num - count)
        if k <= 0:
            return 0
        key_hashes, phys, store_ts = key_hashes[:k], phys[:k], store_ts[:k]
        if count == 1:
            self.set_header("begin_timestamp", store_ts[0])
            self.set_header("begin_phys", phys[0])
        begin = self.begin_timestamp
        if native.INDEX_PUT is not None:
            # passed by address, not copied into bytes: a pass's columns are ~128 KB each, and a copy of that
            # size came from fresh pages every time (the heap trimmed between passes)
            columns = (np.ascontiguousarray(key_hashes, dtype=np.int32), np.ascontiguousarray(phys, dtype=np.int64),
                       np.ascontiguousarray(store_ts, dtype=np.int64))
            newly_used = native.INDEX_PUT(self.slots.ctypes.data, self.slot_num, self.entries.ctypes.data, count, k,
                                          *(c.ctypes.data for c in columns), begin)
        else:
            newly_used = self._put_numpy(key_hashes, phys, store_ts, count, begin)
        self.set_header("slot_count", self.header("slot_count") + newly_used)
        self.set_header("end_timestamp", store_ts[k - 1])
        self.set_header("end_phys", phys[k - 1])
        self.set_header("index_count", count + k)  # last: publishes the entries to queries
        return k

    def _put_numpy(self, key_hashes: np.ndarray, phys: np.ndarray, store_ts: np.ndarray, count: int, begin: int
                   ) -> int:
        """``put_batch``'s entries and slots by numpy (no native library); returns how many slots
        were empty before."""
        k = key_hashes.size
        numbers = np.arange(count, count + k, dtype=np.int32)
        slot = key_hashes.astype(np.int64) % self.slot_num

        order = np.argsort(slot, kind="stable")
        s_sorted = slot[order]
        first_of_group = np.ones(k, dtype=bool)
        first_of_group[1:] = s_sorted[1:] != s_sorted[:-1]
        last_of_group = np.ones(k, dtype=bool)
        last_of_group[:-1] = first_of_group[1:]

        old_head = self.slots[s_sorted].astype(np.int32)
        old_head[(old_head <= INVALID_INDEX) | (old_head >= count)] = INVALID_INDEX
        prev_sorted = np.empty(k, dtype=np.int32)
        prev_sorted[1:] = numbers[order][:-1]
        prev_sorted[first_of_group] = old_head[first_of_group]
        prev = np.empty(k, dtype=np.int32)
        prev[order] = prev_sorted

        diff = (store_ts.astype(np.int64) - begin) // 1000
        diff = np.clip(diff, 0, 0x7FFFFFFF) if begin > 0 else np.zeros(k, dtype=np.int64)

        ent = self.entries[count : count + k]
        ent["key_hash"] = key_hashes
        ent["phys"] = phys
        ent["time_diff"] = diff
        ent["prev"] = prev
        self.slots[s_sorted[last_of_group]] = numbers[order][last_of_group]
        return int(np.count_nonzero(old_head[first_of_group] == INVALID_INDEX))

    def first_at_or_past(self, phys: int) -> int:
        """Number of the first entry pointing at or past commitlog offset ``phys`` (``index_count``
        if none): entries go in in commitlog order, so a binary search."""
        lo, hi = 1, self.index_count
        mv, at = self._mf.mv, self._entries_at
        while lo < hi:  # one struct read a step: a start's check that nothing is past the log's end imports no numpy
            mid = (lo + hi) // 2
            if _ENTRY_PHYS(mv, at + mid * ENTRY_SIZE)[0] < phys:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def truncate_past(self, phys: int) -> int:
        """Drop the entries pointing at or past commitlog offset ``phys`` (the newest ones); returns
        how many went. Slots are moved back along their chains first and the count lowered after,
        so a query meanwhile (or a crash, then this again) never follows a chain into a dropped
        entry; the dropped entries are zeroed last."""
        count = self.index_count
        cut = self.first_at_or_past(phys)
        if cut >= count:
            return 0
        slots = np.unique(self.entries["key_hash"][cut:count].astype(np.int64) % self.slot_num)
        heads = self.slots[slots].astype(np.int64)
        was_used = heads > INVALID_INDEX
        heads = self._heads_below(heads, cut)
        self.slots[slots] = heads
        self.set_header("slot_count", max(0, self.header("slot_count")
                                          - int(np.count_nonzero(was_used & (heads == INVALID_INDEX)))))
        if cut > 1:
            last = self.entries[cut - 1]
            self.set_header("end_phys", last["phys"])
            self.set_header("end_timestamp", self.begin_timestamp + int(last["time_diff"]) * 1000)
        else:
            for name in ("begin_timestamp", "end_timestamp", "begin_phys", "end_phys"):
                self.set_header(name, 0)
        self.set_header("index_count", cut)
        self.entries[cut:count] = np.zeros(count - cut, dtype=_entry_record())
        return count - cut

    def repair_unpublished_heads(self) -> int:
        """Move slots that point past ``index_count`` back along their chains to published entries;
        returns how many slots were moved. An insert writes each entry, then its slot, and raises
        ``index_count`` last: a crash in between leaves slots naming entries no query follows, and
        the next insert would start those slots afresh, cutting every older key in them off. The
        entries themselves were written before their slots, so their ``prev`` links lead back."""
        count = self.index_count
        stale = np.flatnonzero(self.slots >= count)
        if not stale.size:
            return 0
        self.slots[stale] = self._heads_below(self.slots[stale].astype(np.int64), count)
        return int(stale.size)

    def _heads_below(self, heads: np.ndarray, bound: int) -> np.ndarray:
        """``heads`` (slot values) each moved back along its chain to its newest entry below ``bound``,
        or INVALID_INDEX; each step moves every head at or past ``bound`` one entry back (prev < entry).
        A link that does not go back, or a head past the file's entries, ends its chain."""
        for _ in range(self.index_num):
            behind = np.flatnonzero(heads >= bound)
            if not behind.size:
                break
            cur = heads[behind]
            prev = np.full(cur.size, INVALID_INDEX, dtype=np.int64)
            inside = cur < self.index_num
            prev[inside] = self.entries["prev"][cur[inside]]
            prev[prev >= cur] = INVALID_INDEX
            heads[behind] = prev
        heads[heads < INVALID_INDEX] = INVALID_INDEX
        return heads

    def query(self, key_hash: int, begin: int, end: int, max_num: int) -> list[int]:
        """Commitlog offsets of entries with ``key_hash`` stored in ``[begin, end]`` ms,
        newest first. Callers verify the key itself (hashes collide)."""
        out: list[int] = []
        count = self.index_count
        cur = int(self.slots[key_hash % self.slot_num])
        base = self.begin_timestamp
        while INVALID_INDEX < cur < count and len(out) < max_num:
            e = self.entries[cur]
            ts = base + int(e["time_diff"]) * 1000
            if int(e["key_hash"]) == key_hash and begin <= ts <= end:
                out.append(int(e["phys"]))
            prev = int(e["prev"])
            if prev >= cur or ts < begin:
                break
            cur = prev
        return out

    def overlaps(self, begin: int, end: int) -> bool:
        # entries keep whole seconds, so widen by one second either side
        return not self.is_empty() and self.begin_timestamp - 1000 <= end and self.end_timestamp + 1000 >= begin

    def flush(self) -> None:
        self._mf.wrote_position = self._mf.size
        self._mf.flush()

    def close(self) -> None:
        self._mf.close()

    def destroy(self) -> None:
        self._mf.destroy()

