"""``copy_store`` (``spark-mq copy-store``): a stopped store copied whole into an empty place; refused,
touching nothing, while a broker holds the source's lock or when the target holds anything."""

from __future__ import annotations

import pytest

from spark_mq.common.errors import StoreError, StoreLockedError
from spark_mq.store.lock_file import StoreLock
from spark_mq.store.store_copy import copy_store


def a_store(root):
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / "00000000000000000000").write_bytes(b"units" * 10)
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text("{}")
    (root / "lock").write_text("123")
    return root


def test_copies_everything_but_the_lock_into_an_empty_directory(tmp_path):
    source = a_store(tmp_path / "slave")
    (tmp_path / "master").mkdir()
    assert copy_store(source, tmp_path / "master") == 50
    assert (tmp_path / "master" / "commitlog" / "00000000000000000000").read_bytes() == b"units" * 10
    assert (tmp_path / "master" / "config" / "topics.json").read_text() == "{}"
    assert not (tmp_path / "master" / "lock").exists()
    assert not (tmp_path / "master.copying").exists()


def test_refused_while_a_broker_runs_on_the_source(tmp_path):
    source = a_store(tmp_path / "slave")
    running = StoreLock(source / "lock")
    running.acquire()
    try:
        with pytest.raises(StoreLockedError, match="in use by another broker"):
            copy_store(source, tmp_path / "master")
    finally:
        running.release()
    assert not (tmp_path / "master").exists()


def test_refused_over_a_target_that_holds_anything(tmp_path):
    source = a_store(tmp_path / "slave")
    (tmp_path / "master").mkdir()
    (tmp_path / "master" / "keep").write_text("old")
    with pytest.raises(StoreError, match="not empty"):
        copy_store(source, tmp_path / "master")
    assert [p.name for p in (tmp_path / "master").iterdir()] == ["keep"]
    with pytest.raises(StoreError, match="no commitlog"):
        copy_store(tmp_path / "master", tmp_path / "elsewhere")
