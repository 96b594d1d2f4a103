"""What the partition run (``test_partitions.py``) needs besides the cluster: one side's clients (a ledger
producer and a consumer group recording what it was given, with wall-clock times: ``Side``, run in the test
process and, through ``partition_client.py``, on a client host), the consumer offsets the broker reports over
time (``OffsetPolls``), and the masters' acknowledging intervals rebuilt from their master-lease log lines
(``lease_intervals``), so the checks can compare wall-clock moments across processes of one machine.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from integration.controller._support import route
from integration.ha.ledger import Ledger, key_of
from servers import Broker

from spark_mq.client.config import ClientConfig
from spark_mq.client.push_consumer import SyncPushConsumer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.errors import SparkMQError
from spark_mq.common.unit.decode import StoredMessage

ROUTE_REFRESH_S = 1.0  # the clients follow master changes within about this
COMMIT_EVERY_S = 1.0  # the consumers commit their offsets this often
SEND_PAUSE_S = 0.02  # between two ledger keys: a bounded rate for a long run on a loaded 2-core machine
POLL_EVERY_S = 0.5
POLL_TIMEOUT_S = 1.0
LEASE_LINE = re.compile(r"master lease: broker=\S+ id=\d+ (?:acknowledging from=(\S+?)\"|"
                        r"acknowledged from=(\S+) to=(\S+) reason=)")


def wall_of(iso: str) -> float:
    """A lease line's UTC ISO-8601 time (``...Z``) as epoch seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class Side:
    """One side's clients: a ledger producer and a push consumer group ``group`` reading ``topic`` from its first
    message; every SEND_OK and every message given to the consumer is kept with the wall-clock time."""

    def __init__(self, namesrv: str, topic: str, name: str, group: str) -> None:
        self.name = name
        self.group = group
        self._to_wall = time.time() - time.monotonic()  # this process's monotonic clock -> wall clock
        self.ledger = Ledger(namesrv, topic, config=ClientConfig(namesrv, instance_name=f"{name}-producer",
                                                                 poll_name_server_interval_s=ROUTE_REFRESH_S),
                             pause_s=SEND_PAUSE_S, key_prefix=f"{name}-")
        self._lock = threading.Lock()
        self.processed: list[tuple[float, int, int, str]] = []  # (wall, queue, queue offset, key)
        self.consumer = SyncPushConsumer(group, ClientConfig(
            namesrv, instance_name=f"{name}-reader", poll_name_server_interval_s=ROUTE_REFRESH_S,
            persist_consumer_offset_interval_s=COMMIT_EVERY_S), consume_from="first")
        self.consumer.subscribe(topic)
        self.consumer.register_listener(self._read)

    def start(self) -> Side:
        self.consumer.start()
        self.ledger.start()
        return self

    def _read(self, messages: list[StoredMessage]) -> bool:
        now = time.time()
        with self._lock:
            self.processed.extend((now, m.queue_id, m.queue_offset, key_of(m.body) or "") for m in messages)
        return True

    def stop_producing(self) -> None:
        self.ledger.stop()

    def close(self) -> None:
        self.ledger.stop()
        self.consumer.shutdown()

    def report(self) -> dict:
        """What this side saw, as JSON values: acked keys, each SEND_OK (sent, answered: wall clock; the storing
        broker's address), failed attempts, what the consumer was given."""
        with self._lock:
            processed = list(self.processed)
        return {"name": self.name, "group": self.group, "acked": sorted(self.ledger.acked_keys()),
                "answers": [(sent + self._to_wall, answered + self._to_wall, host)
                            for answered, host, sent in list(self.ledger.answers)],
                "attempts": dict(self.ledger.attempts), "processed": processed}


@dataclass
class OffsetPolls:
    """QUERY_CONSUMER_OFFSET of each group and queue at the set's routed master every POLL_EVERY_S, from a thread:
    (wall, group, queue, committed offset)."""

    api: SyncMQClientAPI
    namesrv: str
    topic: str
    set_name: str
    groups: list[str]
    queues: int
    seen: list[tuple[float, str, int, int, str]] = field(default_factory=list)  # ..., the master polled

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="offset-polls")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_EVERY_S):
            try:
                master = route(self.api, self.namesrv, self.topic, self.set_name).get(0)
                for group in self.groups:
                    for q in range(self.queues):
                        if master is None:
                            continue
                        offset = self.api.query_consumer_offset(master, group, self.topic, q, zero_if_not_found=False,
                                                                timeout=POLL_TIMEOUT_S)
                        if offset is not None:
                            self.seen.append((time.time(), group, q, offset, master))
            except SparkMQError:
                continue  # cut off from the master or the NameServer for now

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def lease_intervals(broker: Broker, deaths: list[float], now: float) -> list[tuple[float, float]]:
    """The broker's acknowledging intervals (wall clock) from its log, across its restarts: one left open by a killed
    process ends at its first death in ``deaths`` after its start, one still open at ``now``."""
    intervals: list[tuple[float, float]] = []
    open_from: float | None = None
    for started, begun, ended in LEASE_LINE.findall(broker.log()):
        if started:
            if open_from is not None:
                intervals.append((open_from, min((d for d in deaths if d >= open_from), default=now)))
            open_from = wall_of(started)
        else:
            intervals.append((wall_of(begun), wall_of(ended)))
            open_from = None
    if open_from is not None:
        intervals.append((open_from, min((d for d in deaths if d >= open_from), default=now)))
    return intervals


def overlaps(by_broker: dict[int, list[tuple[float, float]]]) -> list[tuple[int, tuple, int, tuple]]:
    """Pairs of intervals of two different brokers that share a moment."""
    found = []
    for a, mine in by_broker.items():
        for b, theirs in by_broker.items():
            if a < b:
                found += [(a, x, b, y) for x in mine for y in theirs if x[0] < y[1] and y[0] < x[1]]
    return found


@dataclass
class OffsetCheck:
    """A group's committed offsets on each queue as polled, against what the group had been given."""

    ahead: list = field(default_factory=list)  # (group, queue, wall, committed): past a message not given by then
    # (group, queue, (wall, offset, master) before, after): lower than the poll before it
    regressions: list = field(default_factory=list)


def committed_offsets_checked(polls: list[tuple[float, str, int, int, str]],
                              processed: dict[str, list[tuple[float, int, int, str]]]) -> OffsetCheck:
    """Each poll (wall, group, queue, committed offset, master polled) against the one before it and against what
    the group had been given by then."""
    reached: dict[tuple[str, int], list[float]] = {}  # [c]: when the group had been given every offset below c
    for group, records in processed.items():
        first_given: dict[int, dict[int, float]] = {}
        for wall, q, offset, _ in records:
            given = first_given.setdefault(q, {})
            given[offset] = min(given.get(offset, wall), wall)
        for q, given in first_given.items():
            times = [0.0]
            for o in range(max(given) + 1):
                times.append(max(times[-1], given.get(o, float("inf"))))
            reached[(group, q)] = times
    check = OffsetCheck()
    series: dict[tuple[str, int], list[tuple[float, int, str]]] = {}
    for wall, group, q, offset, master in sorted(polls):
        series.setdefault((group, q), []).append((wall, offset, master))
        times = reached.get((group, q), [0.0])
        if offset >= len(times) or times[offset] > wall:
            check.ahead.append((group, q, wall, offset))
    for (group, q), points in series.items():
        for i in range(1, len(points)):
            before, after = points[i - 1], points[i]
            if after[1] < before[1]:
                check.regressions.append((group, q, before, after))
    return check


def redelivered(processed: list[tuple[float, int, int, str]]) -> int:
    """Messages given to a consumer more than once (by queue offset)."""
    return sum(n - 1 for n in Counter((q, o) for _, q, o, _ in processed).values())
