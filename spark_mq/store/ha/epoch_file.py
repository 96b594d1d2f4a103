"""The epoch file: which master wrote which part of the commitlog (RocketMQ's ``EpochFileCache``).

Every time a broker becomes master it appends ``(epoch, start offset)``: the controller's new
master epoch and the commitlog offset its first write will take. Entry ``i`` covers
``[start_i, start_{i+1})``; the last one ends at the commitlog's max offset (the file does not
store it). A slave keeps the same entries for the bytes it copied, so two replicas compare
histories by epoch (see ``divergence``) instead of by bytes.

The file is RocketMQ's ``CheckpointFile`` text (its tools read ours)::

    2               number of entries
    773307083       CRC32 of the entry lines (Java UtilAll.crc32: masked to 31 bits; 0 = unchecked)
    7-7000          epoch-startOffset, one per line
    8-8000

It is replaced whole on every change (``atomic_file``: written to a temporary file, fsynced, renamed over the
old one, the directory fsynced), so a crash leaves the old history or the new one, never a mix.
A file that does not parse raises ``EpochFileError`` saying what to do: the history decides
what a slave truncates, so a guess would risk acknowledged messages.

Thread-safety: every method may be called from any thread (one lock).
"""

from __future__ import annotations

import itertools
import logging
import threading
import zlib
from pathlib import Path

from spark_mq.common.atomic_file import replace_file
from spark_mq.common.errors import EpochFileError
from spark_mq.common.lazy_dataclass import LazyDataclass, lazy_dataclass

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"  # RocketMQ's name, under the store root
CRC_MASK = 0x7FFFFFFF  # RocketMQ UtilAll.crc32 keeps 31 bits
UNCHECKED_CRC = 0


@lazy_dataclass(frozen=True)
class EpochEntry(LazyDataclass):
    """One master's term: ``epoch`` wrote the commitlog from ``start_offset`` on."""

    epoch: int
    start_offset: int

    def line(self) -> str:
        return f"{self.epoch}-{self.start_offset}"


def _crc(body: str) -> int:
    return zlib.crc32(body.encode()) & CRC_MASK


def encode(entries: tuple[EpochEntry, ...]) -> str:
    body = "".join(e.line() + "\n" for e in entries)
    return f"{len(entries)}\n{_crc(body)}\n{body}"


def decode(text: str, path: Path) -> tuple[EpochEntry, ...]:
    """The entries of a file's text; ``EpochFileError`` for anything but a well-formed history."""

    def bad(why: str) -> EpochFileError:
        return EpochFileError(
            f"{path}: not a valid epoch file ({why}). It records which master wrote which part of this "
            "commitlog, and a slave truncates by it: nothing was changed. Restore it from a backup, or, if "
            "this broker is to rejoin as a slave, move this store directory aside so it copies its master's "
            "commitlog afresh")

    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise bad("fewer than the two header lines")
    try:
        count, crc = int(lines[0]), int(lines[1])
    except ValueError:
        raise bad(f"header lines {lines[0]!r}, {lines[1]!r} are not numbers") from None
    entries = []
    for n, line in enumerate(lines[2:], start=3):
        epoch, sep, start = line.partition("-")
        if not sep or not epoch.isdigit() or not start.isdigit():
            raise bad(f"line {n} {line!r} is not epoch-startOffset")
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != count:
        raise bad(f"the header says {count} entries, the file has {len(entries)}")
    body = "".join(line + "\n" for line in lines[2:])
    if crc != UNCHECKED_CRC and crc != _crc(body):
        raise bad(f"CRC32 {crc} in the header, {_crc(body)} computed over the entries")
    for prev, cur in itertools.pairwise(entries):
        if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
            raise bad(f"entry {cur.line()} does not follow {prev.line()} (epochs must grow, offsets not shrink)")
    return tuple(entries)


class EpochFile:
    def __init__(self, path: Path) -> None:
        """Read ``path`` (no file: an empty history; nothing is created until the first change)."""
        self.path = path
        self._lock = threading.Lock()
        self._entries = self._read()

    def _read(self) -> tuple[EpochEntry, ...]:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return ()
        except (OSError, UnicodeDecodeError) as e:
            raise EpochFileError(f"{self.path}: cannot read the epoch file ({e}); nothing was changed") from e
        return decode(text, self.path)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 for an empty history."""
        entries = self._entries
        return entries[-1].epoch if entries else -1

    def append(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` writes from ``start_offset`` on. The epoch must be newer than the
        last one and the offset not below its start; a last epoch that wrote nothing (same start)
        is replaced, as it covers no byte."""
        with self._lock:
            entries = self._entries
            if entries:
                last = entries[-1]
                if epoch <= last.epoch or start_offset < last.start_offset:
                    raise ValueError(f"epoch {epoch} from offset {start_offset} cannot follow {last.line()}: "
                                     "epochs must grow and their start offsets must not shrink")
                if start_offset == last.start_offset:
                    log.info("epoch %d wrote nothing from offset %d: replaced by epoch %d", last.epoch,
                             start_offset, epoch)
                    entries = entries[:-1]
            self._write((*entries, EpochEntry(epoch, start_offset)))

    def truncate_after(self, offset: int) -> int:
        """Forget the epochs that start past ``offset`` (the commitlog was cut there); returns how
        many went. An epoch starting exactly at ``offset`` stays: it simply has written nothing."""
        with self._lock:
            keep = tuple(e for e in self._entries if e.start_offset <= offset)
            gone = len(self._entries) - len(keep)
            if gone:
                self._write(keep)
                log.info("epoch file: %d epochs past offset %d dropped, last now %s", gone, offset,
                         keep[-1].line() if keep else "none")
            return gone

    def _write(self, entries: tuple[EpochEntry, ...]) -> None:
        """Replace the file atomically, then the in-memory history."""
        replace_file(self.path, encode(entries).encode("ascii"))
        self._entries = entries
