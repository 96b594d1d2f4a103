"""An independent reader of commitlog files for the replication tests: ``struct`` over the files on
disk, nothing of ``spark_mq.store``, so a bug shared by our writer and our reader cannot hide.

RocketMQ 4.x unit layout (big-endian): TOTALSIZE int32, MAGICCODE int32 (0xDAA320A7 a message,
0xCBD43194 the blank that closes a file), BODYCRC int32, QUEUEID int32, FLAG int32, QUEUEOFFSET
int64, PHYSICALOFFSET int64, SYSFLAG int32, BORNTIMESTAMP int64, BORNHOST 8, STORETIMESTAMP int64,
STOREHOST 8, RECONSUMETIMES int32, PREPAREDTRANSACTIONOFFSET int64, then BODY (int32 length +
bytes), TOPIC (int8 length + bytes), PROPERTIES (int16 length + bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
HEAD = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
FIXED = struct.Struct(">iIiiiqqiq8sq8siq")  # up to PREPAREDTRANSACTIONOFFSET
BODY_LEN = struct.Struct(">i")
READ_AHEAD = 1 << 20  # bytes read past the chain's end in a file (at least): the HA tests' 64 KiB files are read whole


@dataclass(frozen=True)
class Unit:
    offset: int  # commitlog offset
    queue_id: int
    queue_offset: int
    physical_offset: int  # as written in the unit
    topic: str
    body: bytes


@dataclass(frozen=True)
class Commitlog:
    files: dict[int, bytes]  # file start offset -> its bytes, through the chain and READ_AHEAD past it
    file_size: int
    units: list[Unit]
    end: int  # just past the last unit (the chain end)

    def span(self, start: int, end: int) -> bytes:
        """The bytes of ``[start, end)``, across files."""
        out = bytearray()
        pos = start
        while pos < end:
            base = pos - pos % self.file_size
            data = self.files[base]
            take = min(end, base + self.file_size) - pos
            out += data[pos - base: pos - base + take]
            pos += take
        return bytes(out)


def read_commitlog(store: Path) -> Commitlog:
    """Every file of ``store/commitlog`` and the unit chain through them. Each file is read from its start up
    to past the chain's end in it (at least ``READ_AHEAD`` bytes; a smaller file whole): a broker preallocates
    its files (1 GiB by default), and reading their zero tails cost seconds a call for nothing the chain holds."""
    directory = store / "commitlog"
    paths = sorted(directory.iterdir()) if directory.exists() else []
    readers = {int(p.name): _Prefix(p) for p in paths}
    size = max((r.size for r in readers.values()), default=0) or 1  # a file being created may still be empty
    units: list[Unit] = []
    pos = min(readers) if readers else 0
    while pos - pos % size in readers:
        base = pos - pos % size
        reader = readers[base]
        at = pos - base
        data = reader.upto(at + HEAD.size)
        if at + HEAD.size > len(data):  # len: a file read just as the broker creates it may still be empty
            break
        total, magic = HEAD.unpack_from(data, at)
        if magic == BLANK_MAGIC:
            pos = base + size
            continue
        if magic != MESSAGE_MAGIC or total <= FIXED.size:
            break
        data = reader.upto(at + total)
        if at + total > len(data):
            break
        f = FIXED.unpack_from(data, at)
        queue_id, queue_offset, phys = f[3], f[5], f[6]
        b = at + FIXED.size
        (body_len,) = BODY_LEN.unpack_from(data, b)
        body = bytes(data[b + 4: b + 4 + body_len])
        t = b + 4 + body_len
        topic = data[t + 1: t + 1 + data[t]].decode()
        units.append(Unit(pos, queue_id, queue_offset, phys, topic, body))
        pos += total
    return Commitlog({base: bytes(r.data) for base, r in readers.items()}, size, units, pos if units else 0)


class _Prefix:
    """The first bytes of one file, read further on demand (in READ_AHEAD steps at least)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = bytearray()
        self.size = path.stat().st_size
        self.upto(READ_AHEAD)

    def upto(self, end: int) -> bytearray:
        """The prefix, read through ``end`` if the file is that long."""
        if end > len(self.data):
            with self.path.open("rb") as f:
                f.seek(len(self.data))
                self.data += f.read(max(end - len(self.data), READ_AHEAD))
        return self.data
