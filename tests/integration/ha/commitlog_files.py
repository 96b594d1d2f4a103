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
    files: dict[int, bytes]  # file start offset -> content
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
    """Every file of ``store/commitlog`` and the unit chain through them."""
    directory = store / "commitlog"
    paths = sorted(directory.iterdir()) if directory.exists() else []
    files = {int(p.name): p.read_bytes() for p in paths}
    size = max((len(d) for d in files.values()), default=0) or 1  # a file being created may still be empty
    units: list[Unit] = []
    pos = min(files) if files else 0
    while pos - pos % size in files:
        base = pos - pos % size
        data = files[base]
        at = pos - base
        if at + HEAD.size > len(data):  # len: a file read just as the broker creates it may still be empty
            break
        total, magic = HEAD.unpack_from(data, at)
        if magic == BLANK_MAGIC:
            pos = base + size
            continue
        if magic != MESSAGE_MAGIC or total <= FIXED.size or at + total > len(data):
            break
        f = FIXED.unpack_from(data, at)
        queue_id, queue_offset, phys = f[3], f[5], f[6]
        b = at + FIXED.size
        (body_len,) = BODY_LEN.unpack_from(data, b)
        body = data[b + 4: b + 4 + body_len]
        t = b + 4 + body_len
        topic = data[t + 1: t + 1 + data[t]].decode()
        units.append(Unit(pos, queue_id, queue_offset, phys, topic, body))
        pos += total
    return Commitlog(files, size, units, pos if units else 0)
