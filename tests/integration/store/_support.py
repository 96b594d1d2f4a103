"""Shared pieces of the store integration tests: configs, deterministic message bodies, the
verification of what a store serves, and subprocess handling.

Imported by the tests (``from ._support import ...``) and, as a plain module, by the helper
scripts the tests run in subprocesses (``crash_writer.py``, ``lock_holder.py``), so it must not
use relative imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spark_mq.common.config import BrokerConfig
from spark_mq.common.unit.batch import decode_units
from spark_mq.store.results import GetStatus

HERE = Path(__file__).resolve().parent
KiB = 1024
COMMITLOG_FILE = 64 * KiB
CRC_MASK = 0x7FFFFFFF


SEED_ENV = "SPARK_MQ_CRASH_SEED"


def crash_seed() -> int:
    """A fresh random seed, or ``$SPARK_MQ_CRASH_SEED`` when set: the randomized crash and damage
    tests print it and put it in every failure message, so a failure replays with the same seed."""
    env = os.environ.get(SEED_ENV)
    return int(env) if env else random.SystemRandom().randrange(1_000_000)


def store_config(root: Path | str, **overrides) -> BrokerConfig:
    """Small files and short intervals; the background retention thread effectively off."""
    kwargs = dict(
        store_path_root_dir=str(root),
        maped_file_size_commit_log=COMMITLOG_FILE,
        max_message_size=16 * KiB,
        maped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=1024,
        max_index_num=8192,
        flush_interval_commit_log=50,
        flush_interval_consume_queue=100,
        clean_resource_interval=3_600_000,
        sync_flush_timeout=10_000,
    )
    kwargs.update(overrides)
    return BrokerConfig(**kwargs)


# -- message bodies: the sequence number and a pattern derived from it ------------------------
_PATTERN = bytes((i * 31) & 0xFF for i in range(256))
_SHIFT = [bytes((b + k) & 0xFF for b in range(256)) for k in range(256)]


def body_for(seq: int, size: int | None = None) -> bytes:
    """``<seq>|`` then filler that depends on ``seq``: any damaged or swapped byte shows."""
    if size is None:
        size = 16 + (seq * 7919) % 900
    head = f"{seq:012d}|".encode()
    pattern = _PATTERN.translate(_SHIFT[seq & 0xFF])  # byte i is (seq + 31 * i) mod 256
    rest = max(0, size - len(head))
    return head + (pattern * (rest // 256 + 1))[:rest]


def seq_of(body: bytes) -> int:
    return int(body[:12])


def key_for(seq: int) -> str:
    return f"key-{seq}"


def tag_for(seq: int) -> str:
    return f"tag{seq % 3}"


# -- reading back ------------------------------------------------------------------------------
@dataclass
class Unit:
    """One message as served by ``get_messages``, with its header checked against the request."""

    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    stored_crc: int
    topic: str
    queue_id: int
    unit_queue_offset: int


def read_queue(store, topic: str, queue_id: int, start: int | None = None, batch: int = 256) -> list[Unit]:
    """Every message ``get_messages`` serves from ``start`` (the queue's min) to the max offset."""
    out: list[Unit] = []
    offset = store.get_min_offset(topic, queue_id) if start is None else start
    while offset < store.get_max_offset(topic, queue_id):
        res = store.get_messages(topic, queue_id, offset, batch)
        assert res.status == GetStatus.FOUND, f"{topic}:{queue_id}@{offset}: {res.status}"
        buf = np.frombuffer(res.data, dtype=np.uint8)
        starts = res.unit_starts()
        cols = decode_units(buf, starts)
        head = cols.header
        for i in range(res.count):
            a, b = int(cols.body_start[i]), int(cols.body_end[i])
            ts, te = int(cols.topic_start[i]), int(cols.topic_end[i])
            out.append(Unit(
                queue_offset=int(res.queue_offsets[i]),
                physical_offset=int(head["physical_offset"][i]),
                size=int(res.sizes[i]),
                body=res.data[a:b],
                stored_crc=int(head["body_crc"][i]),
                topic=res.data[ts:te].decode(),
                queue_id=int(head["queue_id"][i]),
                unit_queue_offset=int(head["queue_offset"][i]),
            ))
        offset = res.next_begin_offset
    return out


def check_units(units: Iterable[Unit], topic: str, queue_id: int, ordered: bool = True,
                gaps: bool = False) -> list[str]:
    """Problems with served units: bad CRC, wrong header, gaps (unless ``gaps``: quarantined
    units leave some), damaged or repeated bodies, and (if ``ordered``: one writer per queue)
    sequence numbers that do not increase."""
    problems: list[str] = []
    prev_offset = None
    prev_seq = -1
    seen: set[int] = set()
    for u in units:
        where = f"{topic}:{queue_id}@{u.queue_offset}"
        if zlib.crc32(u.body) & CRC_MASK != u.stored_crc:
            problems.append(f"{where}: body CRC {zlib.crc32(u.body) & CRC_MASK} != stored BODYCRC {u.stored_crc}")
        if (u.topic, u.queue_id, u.unit_queue_offset) != (topic, queue_id, u.queue_offset):
            problems.append(f"{where}: unit header says {u.topic}:{u.queue_id}@{u.unit_queue_offset}")
        jump = u.queue_offset != prev_offset + 1 if prev_offset is not None else False
        if jump and not (gaps and u.queue_offset > prev_offset):
            problems.append(f"{where}: queue offsets jump from {prev_offset}")
        prev_offset = u.queue_offset
        try:
            seq = seq_of(u.body)
        except ValueError:
            problems.append(f"{where}: body does not start with a sequence number: {u.body[:20]!r}")
            continue
        if u.body != body_for(seq, len(u.body)):
            problems.append(f"{where}: body of seq {seq} is damaged")
        if seq in seen:
            problems.append(f"{where}: seq {seq} is stored twice")
        elif ordered and seq <= prev_seq:
            problems.append(f"{where}: seq {seq} after {prev_seq}: out of order")
        seen.add(seq)
        prev_seq = max(prev_seq, seq)
    return problems


@dataclass
class Acks:
    """What writers acknowledged: (topic, queue) -> queue offset -> seq."""

    by_queue: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> (topic, key) for keyed ones

    def add(self, ack: dict) -> None:
        q = self.by_queue.setdefault((ack["t"], ack["q"]), {})
        for i, seq in enumerate(ack["s"]):
            q[ack["o"] + i] = seq
            if ack.get("k"):
                self.keys[seq] = (ack["t"], key_for(seq))

    @property
    def count(self) -> int:
        return sum(len(q) for q in self.by_queue.values())


def verify_store(store, acks: Acks, topics: Iterable[str]) -> list[str]:
    """Everything acknowledged is served exactly once at its offset, intact; nothing served is bad."""
    problems: list[str] = []
    queues = {(t, q) for t in topics for q in store.queue_ids(t)} | set(acks.by_queue)
    for topic, qid in sorted(queues):
        units = read_queue(store, topic, qid)
        problems += check_units(units, topic, qid)
        served = {u.queue_offset: seq_of(u.body) for u in units}
        for offset, seq in sorted(acks.by_queue.get((topic, qid), {}).items()):
            got = served.get(offset)
            if got != seq:
                problems.append(f"{topic}:{qid}@{offset}: acknowledged seq {seq}, store serves {got}")
    return problems


# -- subprocesses ------------------------------------------------------------------------------
def emit(obj: dict) -> None:
    """One JSON line to stdout in one ``write`` (a helper script's report: a kill never tears a
    line in two, only the last one short)."""
    os.write(1, (json.dumps(obj, separators=(",", ":")) + "\n").encode())


def spawn(script: str, args: list[str], stdout: Path, stderr: Path | None = None) -> subprocess.Popen:
    """Run ``script`` (next to this file) with this interpreter; output goes to files."""
    out = open(stdout, "wb")
    err = open(stderr or stdout.with_suffix(".err"), "wb")
    try:
        return subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=out, stderr=err,
                                cwd=str(HERE))
    finally:
        out.close()
        err.close()


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process we started (by pid) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def read_lines(path: Path) -> list[dict]:
    """The complete JSON lines of a file a (possibly killed) process wrote."""
    text = path.read_bytes().decode()
    lines = text.split("\n")[:-1]  # the part after the last newline may be torn
    return [json.loads(line) for line in lines if line.strip()]


def wait_for_line(path: Path, proc: subprocess.Popen, predicate, timeout: float = 30.0) -> dict:
    """Poll the output file until a JSON line matches ``predicate``; fail if the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in read_lines(path):
            if predicate(line):
                return line
        if proc.poll() is not None:
            err = path.with_suffix(".err")
            raise AssertionError(
                f"subprocess exited with {proc.returncode} before the expected line; stderr:\n"
                + (err.read_text() if err.exists() else "")
            )
        time.sleep(0.01)
    raise AssertionError(f"no expected line in {path} after {timeout}s")
