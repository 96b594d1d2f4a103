"""Prometheus metrics of one broker, on their own registry (so a test or ``spark-mq dev`` can
run several brokers in one process), served over HTTP on ``metricsPort`` (0 = off)."""

from __future__ import annotations

import logging
import shutil
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily

from spark_mq.store.retention import RetentionService

log = logging.getLogger(__name__)

TPS_WINDOW_S = 60.0


class BrokerMetrics:
    def __init__(self, store_root: Path) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("spark_mq_messages_in", "Messages stored", ["topic"], registry=r)
        self.messages_out = Counter("spark_mq_messages_out", "Messages delivered by pulls", ["topic"], registry=r)
        self.bytes_in = Counter("spark_mq_bytes_in", "Commitlog bytes stored", ["topic"], registry=r)
        self.bytes_out = Counter("spark_mq_bytes_out", "Bytes delivered by pulls", ["topic"], registry=r)
        self.store_latency = Histogram(
            "spark_mq_store_put_seconds", "Time to append one send request to the store", registry=r,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
        )
        self.long_poll_waiters = Gauge("spark_mq_long_poll_waiters", "Pull requests held by long polling",
                                       registry=r)
        self.disk_used_ratio = Gauge("spark_mq_disk_used_ratio", "Used fraction of the store's disk", registry=r)
        self.disk_used_ratio.set_function(lambda: _ratio(store_root))
        self._put_total = 0
        self._get_total = 0
        self._pulled: deque[tuple[float, str, int]] = deque()

    def stored(self, topic: str, count: int, nbytes: int, seconds: float) -> None:
        self.messages_in.labels(topic).inc(count)
        self.bytes_in.labels(topic).inc(nbytes)
        self.store_latency.observe(seconds)
        self._put_total += count

    def delivered(self, topic: str, group: str, count: int, nbytes: int, now: float) -> None:
        self.messages_out.labels(topic).inc(count)
        self.bytes_out.labels(topic).inc(nbytes)
        self._get_total += count
        self._pulled.append((now, group, count))
        while self._pulled and self._pulled[0][0] < now - TPS_WINDOW_S:
            self._pulled.popleft()

    def put_total(self) -> int:
        return self._put_total

    def get_total(self) -> int:
        return self._get_total

    def consume_tps(self, group: str, now: float) -> float:
        """Messages per second pulled by ``group`` over the last minute."""
        return sum(c for t, g, c in self._pulled if g == group and t >= now - TPS_WINDOW_S) / TPS_WINDOW_S

    def track_retention(self, retention: RetentionService) -> None:
        """Export the store's retention counters (read at scrape time)."""
        self.registry.register(_RetentionCollector(retention))

    def serve(self, address: str, port: int) -> None:
        if port > 0:
            start_http_server(port, addr=address, registry=self.registry)
            log.info("metrics on http://%s:%d/metrics", address, port)


def _ratio(root: Path) -> float:
    try:
        usage = shutil.disk_usage(root)
    except OSError:
        return 0.0
    return usage.used / usage.total if usage.total else 0.0


class _RetentionCollector:
    """``spark_mq_retention_unarchived_refusals_total{trigger}``: retention runs that kept a
    commitlog file because it holds messages not yet archived (tiered storage); ``trigger`` is
    ``expiry`` (kept quietly) or ``disk_pressure`` (an error: the disk stays full)."""

    def __init__(self, retention: RetentionService) -> None:
        self.retention = retention

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("spark_mq_retention_unarchived_refusals",
                                     "Retention runs that kept a commitlog file holding messages not yet archived",
                                     labels=["trigger"])
        for trigger, count in self.retention.unarchived_refusals.items():
            family.add_metric([trigger], count)
        yield family
