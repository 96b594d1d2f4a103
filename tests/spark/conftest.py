"""Fixtures of the Spark connector tests: ONE local[2] SparkSession for the whole test session (Spark
starts slowly), and one NameServer + broker with a known topic produced once.

The session never calls ``spark_mq.spark.register``: every read goes through Spark's discovery of
the installed ``pyspark_spark_mq`` package. Executors run ``sys.executable`` (the venv's Python).
``tests/integration`` is on the path (appended), so the controller tests' replica sets can be imported as
``integration.controller...`` whose modules import ``broker._support``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

sys.path.append(str(Path(__file__).parents[1] / "integration"))

from servers import Broker, free_port, load_script, start_namesrv, unique, wait_until

from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendResult
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message

JOBS = Path(__file__).resolve().parents[2] / "jobs"
QUEUES = 4
MESSAGES = 60
TAGS = ("tagA", "tagB", "tagC")


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("spark_mq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class Cluster:
    namesrv: str
    broker: Broker


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark_cluster")
    namesrv = start_namesrv(root / "namesrv.log")
    try:
        broker = Broker(namesrv.addr, root / "broker", metrics=True)  # Prometheus: bytes served per topic
    except BaseException:
        namesrv.stop_cleanly()
        raise
    yield Cluster(namesrv.addr, broker)
    broker.stop()
    namesrv.stop_cleanly()


@pytest.fixture
def master_slave(tmp_path):
    """``(namesrv address, master, slave)``: a NameServer of its own and a SYNC_MASTER with its slave (one
    brokerName; the slave copies its master's metadata every 500 ms), stopped after the test if running."""
    namesrv = start_namesrv(tmp_path / "namesrv.log", verbose=False)
    name = unique("ha")
    ha_port = free_port()
    master = Broker(namesrv.addr, tmp_path / "master", f"brokerRole=SYNC_MASTER\nhaListenPort={ha_port}\n",
                    broker_name=name)
    slave = Broker(namesrv.addr, tmp_path / "slave", "brokerRole=SLAVE\nbrokerId=1\nslaveSynchronizeInterval=500\n",
                   broker_name=name)
    yield namesrv.addr, master, slave
    for b in (slave, master):
        b.stop_if_running()
    namesrv.stop_cleanly()


def create_topic(cluster: Cluster, topic: str, queues: int = QUEUES) -> None:
    with SyncMQClientAPI() as api:
        api.create_topic(cluster.broker.addr, topic, queues, queues)
        wait_until(lambda: api.get_route_info(cluster.namesrv, topic), what=f"route of {topic}")


def load_job(name: str) -> ModuleType:
    """``jobs/<name>.py`` as a module (the jobs are scripts, not a package): its functions run in this process, on
    the shared session, where a job's own JVM would only repeat what one ``spark-submit`` test already runs."""
    return load_script(f"job_{name}", JOBS / f"{name}.py")


@dataclass
class Produced:
    topic: str
    results: list[SendResult]  # in send order


@pytest.fixture(scope="session")
def produced(cluster) -> Produced:
    """MESSAGES messages over QUEUES queues, with tags, keys and properties (some without)."""
    topic = unique("spark_src")
    create_topic(cluster, topic)
    results = []
    with SyncProducer(unique("spark_pg"), ClientConfig(cluster.namesrv)) as producer:
        for i in range(MESSAGES):
            msg = Message(topic, f"body-{i}".encode() + bytes([i % 256]),
                          tags=TAGS[i % 3] if i % 7 else None,
                          keys=[f"k{i}", f"key-{i % 5}"] if i % 2 else None,
                          properties={"n": str(i), "even": str(i % 2 == 0)} if i % 4 else {},
                          flag=i % 3)
            results.append(producer.send(msg))
    return Produced(topic, results)


class Producer:
    """Sends batches of ``m-<n>`` bodies and remembers (queue_id, queue_offset, uniq_key, body) of each."""

    def __init__(self, cluster, topic: str) -> None:
        self.topic = topic
        self.rows: list[tuple[int, int, str, bytes]] = []
        self._next = 0
        self._producer = SyncProducer(unique("spark_stream_pg"), ClientConfig(cluster.namesrv)).start()

    def send(self, n: int, batch: int = 100) -> None:
        while n > 0:
            size = min(batch, n)
            bodies = [f"m-{self._next + i}".encode() for i in range(size)]
            result = self._producer.send([Message(self.topic, b) for b in bodies])
            ids = result.msg_ids
            assert len(ids) == size
            self.rows.extend((result.queue_id, result.queue_offset + i, ids[i], bodies[i]) for i in range(size))
            self._next += size
            n -= size

    def close(self) -> None:
        self._producer.shutdown()
