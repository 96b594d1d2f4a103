"""Helpers of the offload tests: producing a known set of messages, the rows the broker serves for a
topic, reading an archive back with deltalake and with pyarrow, and running the offload job."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from servers import unique, wait_until

from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.arrow.schema import to_message_schema
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.results import SendResult
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.tiered.archive import BROKER_COLUMN, FORMAT_DELTA, PARTITION_COLUMNS, QUEUE_COLUMN, open_archive

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "jobs" / "offload.py"
QUEUES = 4
SORT = [(BROKER_COLUMN, "ascending"), (QUEUE_COLUMN, "ascending"), ("queue_offset", "ascending")]
JOB_TIMEOUT_S = 120.0


@dataclass
class Sent:
    message: Message
    result: SendResult


def create_topic(api: SyncMQClientAPI, namesrv: str, addr: str, prefix: str) -> str:
    topic = unique(prefix)
    api.create_topic(addr, topic, QUEUES, QUEUES)
    wait_until(lambda: api.get_route_info(namesrv, topic), what=f"route of {topic}")
    return topic


def produce(namesrv: str, topic: str, count: int, first: int = 0) -> list[Sent]:
    """``count`` varied messages (tags, keys, properties, flags, some absent; binary bodies of several
    hundred bytes), round-robin over the queues."""
    sent = []
    with SyncProducer(unique("offload_pg"), ClientConfig(namesrv)) as producer:
        for i in range(first, first + count):
            msg = Message(topic, f"body-{i}-".encode() + bytes(range(256)) * (1 + i % 3),
                          tags=f"tag{i % 3}" if i % 5 else None, keys=[f"k{i}", f"g{i % 7}"] if i % 2 else None,
                          properties={"n": str(i)} if i % 4 else {}, flag=i % 3)
            sent.append(Sent(msg, producer.send(msg)))
    return sent


def broker_rows(addr: str, broker_name: str, topic: str, ends: dict[int, int] | None = None) -> pa.Table:
    """What the broker serves of every queue, [min, max) (or [min, ends[q])), in SCHEMA and archive order."""
    tables = []
    with SyncMQClientAPI(timeout=10.0) as api:
        for q in range(QUEUES):
            lo = api.get_min_offset(addr, topic, q)
            hi = api.get_max_offset(addr, topic, q) if ends is None else ends[q]
            part = QueueRange(topic, broker_name, addr, q, lo, hi, "*", "offload_test", 1024, True)
            tables.extend(pa.Table.from_batches([b]) for b in read_range(part))
    return to_message_schema(pa.concat_tables(tables)).sort_by(SORT)


def check_produced(rows: pa.Table, sent: list[Sent]) -> None:
    """``rows`` hold every sent message exactly once, as the producer sent it."""
    assert rows.num_rows == len(sent)
    by_id = {r["uniq_key"]: r for r in rows.to_pylist()}
    assert len(by_id) == len(sent), "a message is in the archive twice"
    for s in sent:
        row = by_id[s.result.msg_id]
        m = s.message
        assert (row["queue_id"], row["queue_offset"], row["msg_id"]) == (
            s.result.queue_id, s.result.queue_offset, s.result.offset_msg_id)
        assert (row["body"], row["tags"], row["flag"], row["topic"]) == (m.body, m.tags, m.flag, m.topic)
        assert row["keys"] == (" ".join(m.keys) if m.keys else None)
        assert dict(m.properties).items() <= dict(row["properties"]).items()


def deltalake_rows(root: Path, topic: str) -> pa.Table:
    """The Delta table read by deltalake itself."""
    from deltalake import DeltaTable

    return to_message_schema(DeltaTable(str(root / topic)).to_pyarrow_table()).sort_by(SORT)


def pyarrow_rows(root: Path, topic: str) -> pa.Table:
    """The archive's data files read by pyarrow with Hive partitioning (for Delta: the files its log
    lists; for Parquet: the directory, where pyarrow itself skips the hidden ``.tmp-`` files)."""
    archive = open_archive(str(root), topic)
    partitioning = ds.partitioning(pa.schema([(BROKER_COLUMN, pa.string()), (QUEUE_COLUMN, pa.int32())]),
                                   flavor="hive")
    source = archive.data_files() if archive.format == FORMAT_DELTA else archive.uri
    dataset = ds.dataset(source, format="parquet", partitioning=partitioning, partition_base_dir=archive.uri)
    table = dataset.to_table()
    assert set(PARTITION_COLUMNS) <= set(table.column_names)
    return to_message_schema(table).sort_by(SORT)


def watermarks(api: SyncMQClientAPI, addr: str, topic: str) -> dict[int, int]:
    return {q: api.query_tiered_offset(addr, topic, q).offset for q in range(QUEUES)}


def run_job(*args: str, ok: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
                          env={**os.environ, **(env or {})})
    if ok:
        assert proc.returncode == 0, f"offload.py exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def kill_job_at(pause_at: str, *args: str) -> str:
    """Run the job with the test hook that stops it after its first ``pause_at`` event, SIGKILL it
    there, and return what it printed."""
    env = {**os.environ, "SPARK_MQ_OFFLOAD_TEST_PAUSE_AT": pause_at}
    proc = subprocess.Popen([sys.executable, str(JOB), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    out = b""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        while b"test hook" not in out:
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, (
                f"the job did not pause at {pause_at} (exit {proc.poll()}):\n{out.decode()}\n"
                f"{proc.stderr.read().decode()[-4000:] if proc.poll() is not None else ''}")
            if select.select([proc.stdout], [], [], min(left, 1.0))[0]:
                out += os.read(proc.stdout.fileno(), 65536)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(JOB_TIMEOUT_S)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return out.decode()
