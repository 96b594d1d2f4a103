"""Prometheus metrics of one broker, served over HTTP on ``metricsPort`` (0 = off), each broker
on its own registry (so a test or ``spark-mq dev`` can run several brokers in one process).

The counters are plain Python numbers updated on the broker's event loop; ``prometheus_client``
is imported only when the metrics are served, and reads them at scrape time through a collector.
Importing it (and the ``http.server``/``email`` modules it pulls in) cost a broker start some
30 ms, for nothing when ``metricsPort=0``.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spark_mq.common.tls import MIN_VERSION

if TYPE_CHECKING:
    import numpy as np

    from spark_mq.broker.replication.master_lease import LeaseGate
    from spark_mq.broker.scheduled.delay_service import ScheduleService
    from spark_mq.common.config import SecurityConfig
    from spark_mq.store.ha.ha_client import HAClient
    from spark_mq.store.ha.ha_service import HAService
    from spark_mq.store.message_store import MessageStore

log = logging.getLogger(__name__)

TPS_WINDOW_S = 60.0
LATENESS_BUCKETS_MS = (10, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 60_000)  # timer messages' lateness
TRANSACTION_EVENTS = {
    "half": "Half (prepared) transactional messages stored",
    "commit": "Transactions committed (the message written to its real topic)",
    "rollback": "Transactions rolled back",
    "check": "Transaction check-backs (CHECK_TRANSACTION_STATE) due",
    "discarded": "Half messages discarded after transactionCheckMax check-backs",
}
PUT_SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)


class TimerStats(Protocol):
    """What a scrape reads of the timer service (it counts its lateness in :data:`LATENESS_BUCKETS_MS`;
    a protocol, so the service builds on the buckets here and this module needs nothing of it)."""

    pending: int
    delivered_total: int
    lateness: np.ndarray  # delivered per bucket, the last past every bucket
    lateness_sum_ms: int


class GaugeValue:
    """A gauge the broker moves (``inc``/``dec``) and scrapes read."""

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class BrokerMetrics:
    def __init__(self, store_root: Path) -> None:
        self.store_root = store_root
        # topic -> [messages, bytes]; a new topic replaces the dict, so a scrape thread iterating
        # the old one never sees it change size
        self._in: dict[str, list[int]] = {}
        self._out: dict[str, list[int]] = {}
        self._put_bucket_counts = [0] * (len(PUT_SECONDS_BUCKETS) + 1)  # the last is +Inf
        self._put_seconds_sum = 0.0
        self.long_poll_waiters = GaugeValue()
        self._store: MessageStore | None = None
        self._ha_service: HAService | None = None  # a master's
        self._ha_client: HAClient | None = None  # a slave's
        self._lease: LeaseGate | None = None  # a controller-mode master's
        self._schedule: ScheduleService | None = None
        self._timer: TimerStats | None = None
        self.registry: Any = None  # a prometheus_client CollectorRegistry once served
        self._put_total = 0
        self._get_total = 0
        self._pulled: deque[tuple[float, str, int]] = deque()
        self._refused: dict[str, int] = {}
        self._transactions: dict[str, int] = {}
        self._acl_refused: dict[str, int] = {}
        self._acl_admin: dict[str, int] = {}

    @staticmethod
    def _add(table: dict[str, list[int]], topic: str, count: int, nbytes: int) -> dict[str, list[int]]:
        row = table.get(topic)
        if row is None:
            table = {**table, topic: [count, nbytes]}
        else:
            row[0] += count
            row[1] += nbytes
        return table

    def stored(self, topic: str, count: int, nbytes: int, seconds: float) -> None:
        self._in = self._add(self._in, topic, count, nbytes)
        self._put_bucket_counts[bisect.bisect_left(PUT_SECONDS_BUCKETS, seconds)] += 1
        self._put_seconds_sum += seconds
        self._put_total += count

    def delivered(self, topic: str, group: str, count: int, nbytes: int, now: float) -> None:
        self._out = self._add(self._out, topic, count, nbytes)
        self._get_total += count
        self._pulled.append((now, group, count))
        while self._pulled and self._pulled[0][0] < now - TPS_WINDOW_S:
            self._pulled.popleft()

    def refused(self, feature: str) -> None:
        """One request refused because the broker does not serve ``feature`` yet."""
        self._refused = {**self._refused, feature: self._refused.get(feature, 0) + 1}

    def acl_refused(self, reason: str) -> None:
        """One request the ACL refused, for ``reason`` (``acl/validator.py`` REASONS)."""
        self._acl_refused = {**self._acl_refused, reason: self._acl_refused.get(reason, 0) + 1}

    def acl_admin(self, request: str) -> None:
        """One admin request the ACL let through (``request``: the code's name)."""
        self._acl_admin = {**self._acl_admin, request: self._acl_admin.get(request, 0) + 1}

    def transaction(self, event: str, count: int = 1) -> None:
        """``count`` transactional events: ``half``, ``commit``, ``rollback``, ``check`` or ``discarded``."""
        self._transactions = {**self._transactions, event: self._transactions.get(event, 0) + count}

    def put_total(self) -> int:
        return self._put_total

    def get_total(self) -> int:
        return self._get_total

    def consume_tps(self, group: str, now: float) -> float:
        """Messages per second pulled by ``group`` over the last minute."""
        return sum(c for t, g, c in self._pulled if g == group and t >= now - TPS_WINDOW_S) / TPS_WINDOW_S

    def track_store(self, store: MessageStore) -> None:
        """Export the store's retention counters and write state (read at scrape time)."""
        self._store = store

    def track_schedule(self, service: ScheduleService) -> None:
        """Export delay messages: pending per level, delivered in all (read at scrape time)."""
        self._schedule = service

    def track_timer(self, service: TimerStats | None) -> None:
        """Export timer messages: pending, delivered, lateness (read at scrape time; None on a slave)."""
        self._timer = service

    def track_ha(self, service: HAService | None, client: HAClient | None) -> None:
        """Export replication: a master's ``service`` (per slave) or a slave's ``client``."""
        self._ha_service, self._ha_client = service, client

    def track_lease(self, gate: LeaseGate | None) -> None:
        """Export a controller-mode master's lease: acknowledging or not, time left (None: not such a master)."""
        self._lease = gate

    def serve(self, address: str, port: int, tls: SecurityConfig | None = None) -> None:
        """Serve ``/metrics`` on ``port`` (nothing if 0); HTTPS when ``tls.server.mode`` is permissive or
        enforcing (HTTPS only either way: one HTTP port cannot tell the two apart as cheaply as remoting's
        first byte, and a scraper is configured once), with client certificates per
        ``tls.server.need.client.auth``. May run on a worker thread."""
        if port <= 0:
            return
        # lazy import: prometheus_client (and the http.server it pulls in) only when metrics are served
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry()
        self.registry.register(_BrokerCollector(self))
        if tls is None or tls.tls_server_mode == "disabled":
            start_http_server(port, addr=address, registry=self.registry)
            log.info("metrics on http://%s:%d/metrics", address, port)
            return
        start_http_server(port, addr=address, registry=self.registry, certfile=tls.tls_server_cert_path,
                          keyfile=tls.tls_server_key_path, client_cafile=tls.tls_server_trust_cert_path or None,
                          client_auth_required=tls.tls_server_need_client_auth == "require",
                          tls_min_version=MIN_VERSION)
        log.info("metrics on https://%s:%d/metrics", address, port)

    def collect(self) -> Iterator[Any]:
        """The metric families, as ``prometheus_client`` collectors yield them."""
        # lazy import: as in serve
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        def labelled(name: str, doc: str, labels: list[str], rows: dict[Any, float]) -> Any:
            family = CounterMetricFamily(name, doc, labels=labels)
            for key, count in list(rows.items()):
                family.add_metric(list(key) if isinstance(key, tuple) else [key], count)
            return family

        for name, doc, table, col in (
            ("spark_mq_messages_in", "Messages stored", self._in, 0),
            ("spark_mq_messages_out", "Messages delivered by pulls and pops", self._out, 0),
            ("spark_mq_bytes_in", "Commitlog bytes stored", self._in, 1),
            ("spark_mq_bytes_out", "Bytes delivered by pulls and pops", self._out, 1),
        ):
            yield labelled(name, doc, ["topic"], {topic: row[col] for topic, row in list(table.items())})
        cumulative, buckets = 0, []
        for le, n in zip((*PUT_SECONDS_BUCKETS, float("inf")), list(self._put_bucket_counts), strict=True):
            cumulative += n
            buckets.append((floatToGoString(le), cumulative))
        yield HistogramMetricFamily("spark_mq_store_put_seconds", "Time to append one send request to the store",
                                    buckets=buckets, sum_value=self._put_seconds_sum)
        yield GaugeMetricFamily("spark_mq_long_poll_waiters", "Pull requests held by long polling",
                                value=self.long_poll_waiters.value)
        yield GaugeMetricFamily("spark_mq_disk_used_ratio", "Used fraction of the store's disk",
                                value=_ratio(self.store_root))
        yield labelled("spark_mq_unserved_feature_refusals",
                       "Requests refused because they need a feature this broker does not serve yet", ["feature"],
                       self._refused)
        yield labelled("spark_mq_acl_refusals", "Requests the ACL refused (aclEnable), by reason", ["reason"],
                       self._acl_refused)
        yield labelled("spark_mq_acl_admin_requests", "Admin requests the ACL let through (aclEnable), by request",
                       ["request"], self._acl_admin)
        for event in TRANSACTION_EVENTS:
            yield CounterMetricFamily(f"spark_mq_transaction_{event}", TRANSACTION_EVENTS[event],
                                      value=self._transactions.get(event, 0))
        if self._store is not None:
            # damaged units quarantined at start-up or skipped by reads
            yield CounterMetricFamily("spark_mq_store_corrupt_units", "Damaged commitlog units found and never served",
                                      value=self._store.corrupt_units)
            retention = self._store.retention
            # ``trigger`` is ``expiry`` (kept quietly) or ``disk_pressure`` (an error: the disk stays full)
            yield labelled("spark_mq_retention_unarchived_refusals",
                           "Retention runs that kept a commitlog file holding messages not yet archived", ["trigger"],
                           retention.unarchived_refusals)
            yield labelled("spark_mq_retention_unconsumed_deleted",
                           "Messages no consumer group had consumed, deleted by forced clean-up "
                           "(cleanUnconsumedForcibly=true)", ["topic", "group"], retention.unconsumed_deleted)
            yield CounterMetricFamily("spark_mq_retention_kept_for_master",
                                      "Retention runs on a slave that kept commitlog files its master still has",
                                      value=retention.kept_for_master)
            yield from self._collect_store()
        yield from self._collect_ha()
        yield from self._collect_lease()
        if self._schedule is not None:
            pending = GaugeMetricFamily("spark_mq_delay_pending", "Delayed messages not yet delivered, per delay level",
                                        labels=["level"])
            for level, count in self._schedule.pending().items():
                pending.add_metric([str(level)], count)
            yield pending
            yield CounterMetricFamily("spark_mq_delay_delivered", "Delayed messages delivered to their real topic",
                                      value=self._schedule.delivered_total)
        if (timer := self._timer) is not None:
            yield GaugeMetricFamily("spark_mq_timer_pending", "Timer messages in the timing wheel, not yet due",
                                    value=timer.pending)
            yield CounterMetricFamily("spark_mq_timer_delivered", "Timer messages delivered to their real topic",
                                      value=timer.delivered_total)
            cumulative, buckets = 0, []
            for le, n in zip((*(ms / 1000 for ms in LATENESS_BUCKETS_MS), float("inf")), timer.lateness.tolist(),
                             strict=True):
                cumulative += n
                buckets.append((floatToGoString(le), cumulative))
            yield HistogramMetricFamily("spark_mq_timer_lateness_seconds",
                                        "Time from a timer message's due time to its delivery", buckets=buckets,
                                        sum_value=timer.lateness_sum_ms / 1000)

    def _collect_store(self) -> Iterator[Any]:
        # lazy import: as in serve
        from prometheus_client.core import GaugeMetricFamily

        if self._store is not None:
            yield GaugeMetricFamily("spark_mq_store_writable",
                                    "1 while the store accepts writes, 0 while it refuses them (disk full or over "
                                    "a disk ratio)", value=0 if self._store.write_refusal else 1)

    def _collect_lease(self) -> Iterator[Any]:
        # lazy import: as in serve
        from prometheus_client.core import GaugeMetricFamily

        gate = self._lease
        if gate is not None:  # read without side effects: a scrape runs on another thread
            yield GaugeMetricFamily("spark_mq_master_lease_acknowledging",
                                    "1 while this controller-mode master acknowledges writes (its master lease holds), "
                                    "0 once the lease ran out", value=1 if gate.holds() else 0)
            yield GaugeMetricFamily("spark_mq_master_lease_remaining_seconds",
                                    "Time left on the master lease (renewed by each heartbeat the leading "
                                    "controller answers)", value=gate.lease.remaining_s())

    def _collect_ha(self) -> Iterator[Any]:
        """Replication, from the master's side (per slave, by the slave's HA connection address) or
        the slave's."""
        # lazy import: as in serve
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        service, client = self._ha_service, self._ha_client
        if service is not None:
            now = time.monotonic()
            slaves = sorted(service.connections, key=lambda c: c.peer)
            yield GaugeMetricFamily("spark_mq_ha_connected_slaves", "Slaves connected to this master's HA port",
                                    value=len(slaves))
            lag_bytes = GaugeMetricFamily("spark_mq_ha_slave_lag_bytes",
                                          "Commitlog bytes this master has that the slave has not acknowledged "
                                          "(commitlog max offset - the slave's last reported offset)", labels=["slave"])
            lag_seconds = GaugeMetricFamily("spark_mq_ha_slave_lag_seconds",
                                            "Age of the oldest commitlog byte the slave has not acknowledged (0 while "
                                            "it has every byte; grows while it stalls)", labels=["slave"])
            acked = GaugeMetricFamily("spark_mq_ha_slave_ack_offset",
                                      "The commitlog offset the slave last reported having", labels=["slave"])
            for conn in slaves:
                offset, behind, age = conn.lag(now)  # one reading: a scrape's three figures agree
                lag_bytes.add_metric([conn.peer], behind)
                lag_seconds.add_metric([conn.peer], age)
                acked.add_metric([conn.peer], offset)
            yield from (lag_bytes, lag_seconds, acked)
            yield CounterMetricFamily("spark_mq_ha_transferred_bytes",
                                      "Commitlog bytes streamed to slaves (rate() is the transfer rate)",
                                      value=service.bytes_sent())
        if client is not None:
            master = client.connected_to
            yield GaugeMetricFamily("spark_mq_ha_master_connected",
                                    "1 while this slave is connected to its master's HA port", value=1 if master else 0)
            yield GaugeMetricFamily("spark_mq_ha_master_lag_bytes",
                                    "Bytes this slave is behind its master's offset as last seen in the master's "
                                    "transfers (the master's spark_mq_ha_slave_lag_bytes also counts what it has "
                                    "not sent yet)", value=client.lag_bytes())
            yield CounterMetricFamily("spark_mq_ha_received_bytes",
                                      "Commitlog bytes received from the master and appended (rate() is the "
                                      "transfer rate)", value=client.bytes_received)


class _BrokerCollector:
    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self.metrics.collect()


def _ratio(root: Path) -> float:
    try:
        usage = shutil.disk_usage(root)
    except OSError:
        return 0.0
    return usage.used / usage.total if usage.total else 0.0
