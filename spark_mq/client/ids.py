"""Client ids and message UNIQ_KEYs, as RocketMQ's ``ClientConfig.buildMQClientId`` and
``MessageClientIDSetter`` make them.

Client id: ``ip@instanceName[@unitName]``; an instance name left at ``DEFAULT`` becomes the pid
(``changeInstanceNameToPID``), or ``pid#nanos`` with ``unique=True`` as RocketMQ 4.9.3+ does, so
two clients of one group in one process stay apart.

UNIQ_KEY (the ``msgId`` a producer returns): 16 bytes as 32 upper-case hex characters::

    off  size  field
      0     4  IPv4 address of this host
      4     2  pid, low 16 bits
      6     4  Java: the class loader's hash; here a random int32 per generator
     10     4  ms since the start of the current month (local time), as a 32-bit int
     14     2  counter, low 16 bits

The first 10 bytes are fixed per generator, so keys of one process share a 20-character prefix
and sort by time within a month. Java's counter wraps every 65,536 keys whatever the clock
says, so a burst of more than that within one millisecond repeats a key; here the month-time
field never goes backwards and moves on by at least 1 ms whenever the counter wraps, so keys of
one generator never repeat within a month. ``next_many`` makes N keys with numpy, no Python
loop per key, and is byte-for-byte what N calls to ``next`` would give at the same instant.

Thread-safety: a generator may be shared by threads (reservation of counters is locked).
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

UNIQ_KEY_BYTES = 16
UNIQ_KEY_LENGTH = 2 * UNIQ_KEY_BYTES
PREFIX_BYTES = 10
COUNTER_SPAN = 1 << 16
DEFAULT_INSTANCE_NAME = "DEFAULT"
SPARK_DRIVER_INSTANCE_PREFIX = "spark_mq_"  # + 12 hex digits: a Spark driver's group member (spark/group_member.py)
SPARK_DRIVER_INSTANCE_HEX = 12

_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint16)


def spark_driver_instance() -> str:
    """A fresh instance name for a Spark driver's group member, which tools recognise (:func:`is_spark_driver`)."""
    return SPARK_DRIVER_INSTANCE_PREFIX + secrets.token_hex(SPARK_DRIVER_INSTANCE_HEX // 2)


def is_spark_driver(client_id: str) -> bool:
    """Whether ``client_id`` (``ip@instance[@unit]``) is a Spark driver's group member."""
    parts = client_id.split("@")
    instance = parts[1] if len(parts) > 1 else ""
    tail = instance.removeprefix(SPARK_DRIVER_INSTANCE_PREFIX)
    return (instance != tail and len(tail) == SPARK_DRIVER_INSTANCE_HEX
            and all(c in "0123456789abcdef" for c in tail))


@functools.cache
def local_ip() -> str:
    """This host's outward IPv4 address (no packet is sent), else its hostname's, else loopback.

    Cached for the process, as RocketMQ's ``RemotingUtil.getLocalAddress``.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.254.254.254", 1))  # UDP connect only picks a route
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def client_id(instance_name: str = DEFAULT_INSTANCE_NAME, unit_name: str | None = None, ip: str | None = None,
              unique: bool = False) -> str:
    """``ip@instance[@unit]``; instance ``DEFAULT`` becomes the pid (``pid#nanos`` if ``unique``)."""
    if instance_name == DEFAULT_INSTANCE_NAME:
        instance_name = f"{os.getpid()}#{time.monotonic_ns()}" if unique else str(os.getpid())
    cid = f"{ip or local_ip()}@{instance_name}"
    return f"{cid}@{unit_name}" if unit_name else cid


def month_bounds(ms: int) -> tuple[int, int]:
    """(start of the local month containing ``ms``, start of the next), in ms since the epoch."""
    start = datetime.fromtimestamp(ms / 1000).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


@dataclass(frozen=True)
class UniqKeyParts:
    """The fields of a UNIQ_KEY."""

    ip: str
    pid: int  # low 16 bits
    seed: int  # unsigned 32 bits
    month_ms: int  # unsigned 32 bits
    counter: int  # low 16 bits

    @property
    def prefix(self) -> str:
        return (socket.inet_aton(self.ip) + self.pid.to_bytes(2, "big") + self.seed.to_bytes(4, "big")).hex().upper()


def parse_uniq_key(key: str) -> UniqKeyParts:
    """Split a UNIQ_KEY into its fields; ValueError if it is not 32 hex characters."""
    try:
        raw = bytes.fromhex(key) if len(key) == UNIQ_KEY_LENGTH else b""
    except ValueError:
        raw = b""
    if len(raw) != UNIQ_KEY_BYTES:
        raise ValueError(f"{key!r} is not a UNIQ_KEY: expected {UNIQ_KEY_LENGTH} hex characters")
    return UniqKeyParts(socket.inet_ntoa(raw[:4]), int.from_bytes(raw[4:6], "big"), int.from_bytes(raw[6:10], "big"),
                        int.from_bytes(raw[10:14], "big"), int.from_bytes(raw[14:16], "big"))


def uniq_key_time(key: str, now_ms: int | None = None) -> int:
    """When a key was made (ms), as ``getNearlyTimeFromID``: this month's start plus the key's
    month time, or last month's if that would not be in the past."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    span = parse_uniq_key(key).month_ms
    start, _ = month_bounds(now)
    if start + span >= now:
        start, _ = month_bounds(start - 1)
    return start + span


class UniqKeyGenerator:
    """Makes UNIQ_KEYs; ``clock`` returns seconds since the epoch, like ``time.time``."""

    def __init__(self, ip: str | None = None, pid: int | None = None, seed: int | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.ip = ip or local_ip()
        self.pid = (os.getpid() if pid is None else pid) & 0xFFFF
        self.seed = (secrets.randbits(32) if seed is None else seed) & 0xFFFFFFFF
        addr = socket.inet_aton(self.ip) if _is_ipv4(self.ip) else socket.inet_aton("127.0.0.1")
        self._prefix_raw = np.frombuffer(addr + self.pid.to_bytes(2, "big") + self.seed.to_bytes(4, "big"),
                                         dtype=np.uint8)
        self.prefix = bytes(self._prefix_raw).hex().upper()
        self._clock = clock
        self._lock = threading.Lock()
        self._issued = 0  # keys made so far; the key's counter is its index's low 16 bits
        self._last_delta = 0  # month time of the last key made
        self._month_start, self._month_end = month_bounds(self._now())

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _reserve(self, n: int) -> tuple[int, int]:
        """Reserve ``n`` keys: (index of the first, month time of the first)."""
        now = self._now()
        with self._lock:
            if now >= self._month_end:
                old = self._month_start
                self._month_start, self._month_end = month_bounds(now)
                self._last_delta -= self._month_start - old
            first = self._issued
            delta = now - self._month_start
            if first:
                same_block = (first - 1) // COUNTER_SPAN == first // COUNTER_SPAN
                delta = max(delta, self._last_delta if same_block else self._last_delta + 1)
            self._issued = first + n
            self._last_delta = delta + (first + n - 1) // COUNTER_SPAN - first // COUNTER_SPAN
            return first, delta

    def next(self) -> str:
        """One key."""
        index, delta = self._reserve(1)
        return f"{self.prefix}{delta & 0xFFFFFFFF:08X}{index & 0xFFFF:04X}"

    def next_many(self, n: int) -> np.ndarray:
        """``n`` keys as a numpy ``S32`` array (ASCII bytes), made without a per-key loop."""
        if n <= 0:
            return np.empty(0, dtype="S32")
        first, delta = self._reserve(n)
        index = np.arange(first, first + n, dtype=np.int64)
        deltas = (delta + (index // COUNTER_SPAN - first // COUNTER_SPAN)) & 0xFFFFFFFF
        raw = np.empty((n, UNIQ_KEY_BYTES), dtype=np.uint8)
        raw[:, :PREFIX_BYTES] = self._prefix_raw
        raw[:, PREFIX_BYTES:14] = deltas.astype(">u4").view(np.uint8).reshape(n, 4)
        raw[:, 14:] = (index & 0xFFFF).astype(">u2").view(np.uint8).reshape(n, 2)
        return _HEX[raw].view("S32").reshape(n)

    def next_few(self, n: int) -> list[bytes]:
        """``n`` keys as ASCII bytes, formatted one by one: what ``next_many`` gives, without its
        numpy fixed cost (~10 us), which is most of the time for the few keys of a small batch."""
        first, delta = self._reserve(n)
        prefix, block = self.prefix, first // COUNTER_SPAN
        if (first + n - 1) // COUNTER_SPAN == block:  # the usual case: one month time for all, formatted once
            head = f"{prefix}{delta & 0xFFFFFFFF:08X}"
            return [f"{head}{i & 0xFFFF:04X}".encode() for i in range(first, first + n)]
        return [f"{prefix}{(delta + i // COUNTER_SPAN - block) & 0xFFFFFFFF:08X}{i & 0xFFFF:04X}".encode()
                for i in range(first, first + n)]


def _is_ipv4(ip: str) -> bool:
    try:
        socket.inet_aton(ip)
    except OSError:
        return False
    return ip.count(".") == 3


_default: UniqKeyGenerator | None = None
_default_lock = threading.Lock()


def _generator() -> UniqKeyGenerator:
    global _default
    gen = _default
    if gen is None:
        with _default_lock:
            if _default is None:
                _default = UniqKeyGenerator()
            gen = _default
    return gen


def _forget_default() -> None:
    """A forked child (a Spark Python worker) must not repeat its parent's keys: new pid, seed, counter."""
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_default)


def uniq_key() -> str:
    """One UNIQ_KEY from the process-wide generator."""
    return _generator().next()


def uniq_keys(n: int) -> np.ndarray:
    """``n`` UNIQ_KEYs (``S32`` array) from the process-wide generator."""
    return _generator().next_many(n)


def few_uniq_keys(n: int) -> list[bytes]:
    """``n`` UNIQ_KEYs (ASCII bytes) from the process-wide generator, for a small batch."""
    return _generator().next_few(n)
