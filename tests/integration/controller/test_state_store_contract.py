"""The ControllerStateStore contract, the same for both stores: ZooKeeper (a real server, a child
process) and the local file of the embedded controller. Each test gets a store that leads."""

from __future__ import annotations

import threading

import pytest
from consensus import ZooKeeperEnsemble
from servers import unique, wait_until

from spark_mq.controller.file_state_store import FileStateStore
from spark_mq.controller.state_store import NO_RECORD, StaleStateError
from spark_mq.controller.zookeeper_state_store import ZooKeeperStateStore


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"))
    yield ensemble
    ensemble.stop()


@pytest.fixture(params=["file", "zookeeper"])
def store(request, tmp_path):
    """A store that leads as 127.0.0.1:9999, each on its own records."""
    if request.param == "file":
        opened = FileStateStore(tmp_path / "controller" / "state.json")
    else:
        opened = ZooKeeperStateStore(request.getfixturevalue("zookeeper").hosts, f"/{unique('contract')}", 2.0)
    elected = threading.Event()
    opened.campaign("127.0.0.1:9999", elected.set, lambda: None)
    wait_until(elected.is_set, 30, "the store's leadership")
    yield opened
    opened.close()


def test_compare_and_set_creates_then_advances_the_version_and_refuses_a_stale_one(store):
    assert store.load_all() == {}
    assert store.compare_and_set("broker-a", b"v0", NO_RECORD) == 0
    with pytest.raises(StaleStateError):
        store.compare_and_set("broker-a", b"again", NO_RECORD)  # it exists already
    assert store.compare_and_set("broker-a", b"v1", 0) == 1
    with pytest.raises(StaleStateError):
        store.compare_and_set("broker-a", b"late", 0)  # someone wrote version 1 since
    with pytest.raises(StaleStateError):
        store.compare_and_set("broker-b", b"never", 3)  # no such record
    assert store.load_all() == {"broker-a": (b"v1", 1)}
    assert store.leader_address() == "127.0.0.1:9999"


def test_any_key_and_value_round_trip(store):
    records = {"a/b": b"\x00\xff binary", ".": b"dot", "..": b"", "broker-%41 é": b"x" * 100_000}
    for key, value in records.items():
        store.compare_and_set(key, value, NO_RECORD)
    assert store.load_all() == {key: (value, 0) for key, value in records.items()}


def test_concurrent_writers_lose_no_update(store):
    """Threads each add to one counter by read, compare-and-set, retry: every increment survives."""
    threads, increments = 4, 20
    store.compare_and_set("counter", b"0", NO_RECORD)

    def add() -> None:
        for _ in range(increments):
            while True:
                value, version = store.load_all()["counter"]
                try:
                    store.compare_and_set("counter", str(int(value) + 1).encode(), version)
                    break
                except StaleStateError:
                    continue  # another thread wrote since the read: read again

    workers = [threading.Thread(target=add) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert store.load_all()["counter"] == (str(threads * increments).encode(), threads * increments)
