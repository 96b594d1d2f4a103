"""``notebooks/query_by_key_and_time.ipynb`` runs end to end (nbclient, the venv's ``python3`` kernel) against a
fresh NameServer + broker: messages produced with keys, offloaded (``spark-mq offload --all``, in process),
more produced; the notebook's printed counts per tier are checked against the rows each tier holds."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import nbformat
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import Cluster, create_topic
from nbclient import NotebookClient
from servers import Broker, start_namesrv, unique

from spark_mq.arrow.range_reader import QueueRange, read_range
from spark_mq.cli import main as cli_main
from spark_mq.client.config import ClientConfig
from spark_mq.client.producer import SyncProducer
from spark_mq.client.sync_api import SyncMQClientAPI
from spark_mq.common.message import Message
from spark_mq.tiered.lookup import COLD, HOT, find_archived

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "query_by_key_and_time.ipynb"
KEY = "shared"
ARCHIVED = 30
HOT_ONLY = 20
WINDOW_MS = 1000  # the notebook's window: this far either side of the newest archived store time
CELL_TIMEOUT_S = 300


@pytest.fixture
def fresh_cluster(tmp_path):
    namesrv = start_namesrv(tmp_path / "namesrv.log")
    try:
        broker = Broker(namesrv.addr, tmp_path / "broker")
        try:
            yield Cluster(namesrv.addr, broker)
        finally:
            broker.stop()
    finally:
        namesrv.stop_cleanly()


def produce(namesrv: str, topic: str, first: int, count: int) -> None:
    with SyncProducer(unique("notebook_pg"), ClientConfig(namesrv)) as producer:
        for i in range(first, first + count):
            keys = [f"order-{i}", KEY] if i % 3 else [f"order-{i}"]
            producer.send(Message(topic, f'{{"order": {i}}}'.encode(), tags="created", keys=keys))


def served(cluster: Cluster, topic: str) -> pa.Table:
    """Every message the broker holds (the archived ones too: nothing was deleted)."""
    parts = []
    with SyncMQClientAPI() as api:
        for q in range(4):
            end = api.get_max_offset(cluster.broker.addr, topic, q)
            part = QueueRange(topic, cluster.broker.name, cluster.broker.addr, q, 0, end, "*", "nb_test", 1024, True)
            parts.extend(read_range(part))
    return pa.Table.from_batches(parts)


def printed(nb, prefix: str) -> dict[str, int]:
    """The dict a cell printed after ``prefix``."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for line in out.get("text", "").splitlines():
                if line.startswith(prefix):
                    return ast.literal_eval(line[len(prefix):].strip())
    raise AssertionError(f"no output line starts with {prefix!r}")


def test_the_notebook_finds_both_tiers(fresh_cluster, tmp_path, monkeypatch):
    topic = unique("NotebookOrders")
    root = tmp_path / "archive"
    create_topic(fresh_cluster, topic)
    produce(fresh_cluster.namesrv, topic, 0, ARCHIVED)
    assert cli_main(["offload", "--namesrv", fresh_cluster.namesrv, "--topic", topic, "--root", str(root),
                     "--all"]) == 0
    produce(fresh_cluster.namesrv, topic, ARCHIVED, HOT_ONLY)

    archived = set(find_archived(str(root), topic).column("uniq_key").to_pylist())
    rows = served(fresh_cluster, topic)
    stored = pc.cast(pc.cast(rows.column("store_timestamp"), pa.timestamp("ms")), pa.int64()).to_pylist()
    tiers = [COLD if u in archived else HOT for u in rows.column("uniq_key").to_pylist()]
    shared = [KEY in k.split(" ") for k in rows.column("keys").to_pylist()]
    seam = max(ms for ms, t in zip(stored, tiers, strict=True) if t == COLD)
    inside = [seam - WINDOW_MS <= ms < seam + WINDOW_MS for ms in stored]

    for name, value in {"SPARK_MQ_NAMESRV": fresh_cluster.namesrv, "SPARK_MQ_ARCHIVE": str(root),
                        "SPARK_MQ_TOPIC": topic, "SPARK_MQ_KEY": KEY, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
                        "IPYTHONDIR": str(tmp_path / "ipython")}.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:  # kept with the test's temporary files, to read what each cell printed
        nbformat.write(nb, tmp_path / NOTEBOOK.name)

    by_key = printed(nb, "by_key tiers:")
    assert by_key == Counter(t for t, s in zip(tiers, shared, strict=True) if s) and set(by_key) == {COLD, HOT}
    assert printed(nb, "by_key in window tiers:") == Counter(
        t for t, s, w in zip(tiers, shared, inside, strict=True) if s and w)
    assert printed(nb, "by_time tiers:") == Counter(t for t, w in zip(tiers, inside, strict=True) if w)
    assert COLD in printed(nb, "by_time tiers:")
