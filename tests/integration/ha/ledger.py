"""A Jepsen-style ledger for the replication fault tests: a producer thread (our ``SyncProducer``) sends
messages with unique keys and records each one's outcome; at the end the messages found in a
broker's commitlog files (the independent ``commitlog_files`` reader) are checked against it.

A message whose send failed or was not SEND_OK is sent again with the same key (a client retrying a
send it got no answer for), so a message stored without an answer shows up as a duplicate.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendStatus
from spark_mq.common.errors import SparkMQError
from spark_mq.common.message import Message
from spark_mq.common.message_id import parse_offset_msg_id

from .commitlog_files import Commitlog

KEY_PREFIX = b"ledger:"
RETRY_PAUSE_S = 0.05  # between attempts while the master is down (it restarts in seconds)


def _store_host(offset_msg_id: str) -> str:
    host, _ = parse_offset_msg_id(offset_msg_id)
    return f"{'.'.join(str(b) for b in host[:4])}:{int.from_bytes(host[4:], 'big')}"


def body_of(key: str, size: int) -> bytes:
    """A body that names its key (the struct reader finds it there), padded to ``size`` bytes."""
    head = KEY_PREFIX + key.encode() + b":"
    return head + b"x" * max(0, size - len(head))


def key_of(body: bytes) -> str | None:
    if not body.startswith(KEY_PREFIX):
        return None
    return body[len(KEY_PREFIX):].split(b":", 1)[0].decode()


@dataclass
class Audit:
    """What the files hold against the ledger."""

    acknowledged: int  # messages answered SEND_OK
    lost: list[str]  # acknowledged, missing from the files
    duplicates: int  # extra copies of a key beyond its first
    unacknowledged: int  # keys in the files never answered SEND_OK (stored, but the answer said otherwise)

    def summary(self) -> str:
        return (f"acknowledged {self.acknowledged}, lost {len(self.lost)}, duplicates {self.duplicates}, "
                f"unacknowledged extras {self.unacknowledged}")


@dataclass
class Ledger:
    """The producer side: ``start()`` runs it in a thread until ``stop()``."""

    namesrv: str
    topic: str
    body_size: int = 200
    config: ClientConfig | None = None  # the producer's (default: ClientConfig(namesrv), no credentials)
    pause_s: float = 0.0  # between two keys (a bounded rate, for long runs)
    key_prefix: str = "m"  # keys are KEY_PREFIX + a count: ledgers writing one topic need prefixes of their own
    acked: set[str] = field(default_factory=set)
    # each SEND_OK in order: time.monotonic() when answered, the address ("ip:port") of the broker storing it, and
    # time.monotonic() when the answered attempt was sent
    answers: list[tuple[float, str, float]] = field(default_factory=list)
    attempts: Counter = field(default_factory=Counter)  # answers other than SEND_OK, by kind
    sent: int = 0  # distinct keys sent
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Ledger:
        self._thread = threading.Thread(target=self._run, name="ledger-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
            assert not self._thread.is_alive(), "the producer thread did not stop"

    def acknowledged(self) -> int:
        with self._lock:
            return len(self.acked)

    def acked_keys(self) -> set[str]:
        """The keys answered SEND_OK so far (a copy)."""
        with self._lock:
            return set(self.acked)

    def first_ack_after(self, moment: float, not_by: str) -> float | None:
        """The time.monotonic() of the first SEND_OK answered after ``moment`` by a broker other than the one
        at ``not_by`` (a send answered just before a kill may be counted a little after it), None if none yet."""
        with self._lock:
            i = bisect.bisect_right(self.answers, (moment, ""))
            return next((t for t, host, _ in self.answers[i:] if host != not_by), None)

    def _run(self) -> None:
        config = self.config or ClientConfig(namesrv_addr=self.namesrv)
        with SyncProducer("ledger_producer", config, send_timeout_s=5.0, retry_times=0) as producer:
            n = 0
            while not self._stop.is_set():
                key = f"{self.key_prefix}{n}"
                n += 1
                self.sent = n
                self._send_until_ok(producer, key)
                self._stop.wait(self.pause_s)

    def _send_until_ok(self, producer: SyncProducer, key: str) -> None:
        msg = Message(self.topic, body_of(key, self.body_size), keys=key)
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                result = producer.send(msg)
                status = result.status
            except SparkMQError as e:
                self.attempts[type(e).__name__] += 1
                time.sleep(RETRY_PAUSE_S)
                continue
            if status == SendStatus.SEND_OK:
                with self._lock:
                    self.acked.add(key)
                    self.answers.append((time.monotonic(), _store_host(result.offset_msg_id), sent))
                return
            self.attempts[status.name] += 1
            time.sleep(RETRY_PAUSE_S)

    def audit(self, log: Commitlog) -> Audit:
        found = Counter(k for u in log.units if u.topic == self.topic and (k := key_of(u.body)) is not None)
        lost = sorted(self.acked - found.keys())
        return Audit(len(self.acked), lost, sum(c - 1 for c in found.values()),
                     len(found.keys() - self.acked))
